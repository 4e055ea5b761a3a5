"""vLLM's Rust render server (``vllm-rs``) as a peer in ``make bench``, without the binary: its
install from the wheel, its command line, how its answers are counted against vLLM's recorded
ones, and the report rows that put it beside ours and vLLM Python's. The live part (the binary
serving) runs in ``make bench`` and ``python -m benchmarks.peer replay`` once ``make vllm-rs`` ran."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from benchmarks import loadgen, make_inputs, peer, report
from benchmarks import run as bench_run
from benchmarks.layout import VLLM_RS_PORT
from model_builders import vllm_env


def _point_rs_at(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    monkeypatch.setattr(vllm_env, "BUILD", folder)
    monkeypatch.setattr(vllm_env, "RS_DIR", folder / "vllm-rs")
    monkeypatch.setattr(vllm_env, "RS_BINARY", folder / "vllm-rs" / "vllm-rs")
    monkeypatch.setattr(vllm_env, "RS_STAMP", folder / "vllm-rs" / "VERSION")


def _fake_pip(calls: list[list[str]]) -> Any:
    """``subprocess.run`` standing in for pip (writes a wheel holding a ``vllm/vllm-rs``) and for the
    binary's ``--version``."""

    def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
        calls.append(cmd)
        if cmd[1:4] == ["-m", "pip", "download"]:
            dest = Path(cmd[cmd.index("-d") + 1])
            with zipfile.ZipFile(dest / f"vllm-{vllm_env.RS_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl", "w") as z:
                z.writestr("vllm/__init__.py", "")
                z.writestr(vllm_env.RS_MEMBER, b"\x7fELF fake")
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return subprocess.CompletedProcess(cmd, 0, f"vllm-rs {vllm_env.RS_VERSION}\n", "")

    return run


def test_install_takes_only_the_binary_out_of_the_pinned_wheel_and_is_idempotent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _point_rs_at(monkeypatch, tmp_path)
    calls: list[list[str]] = []
    monkeypatch.setattr(vllm_env.subprocess, "run", _fake_pip(calls))
    assert vllm_env.install_rs() == 0
    pip = calls[0]
    assert f"vllm=={vllm_env.RS_VERSION}" in pip and "--no-deps" in pip
    binary = tmp_path / "vllm-rs" / "vllm-rs"
    assert binary.read_bytes() == b"\x7fELF fake" and binary.stat().st_mode & 0o111
    assert vllm_env.rs_installed() and vllm_env.rs_version() == vllm_env.RS_VERSION
    # The wheel's folder is gone: only build/vllm-rs/ stays.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vllm-rs"]
    assert sorted(p.name for p in (tmp_path / "vllm-rs").iterdir()) == ["VERSION", "vllm-rs"]
    calls.clear()
    assert vllm_env.install_rs() == 0 and calls == []  # installed: nothing downloaded again


def test_install_refuses_a_binary_that_names_another_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _point_rs_at(monkeypatch, tmp_path)
    fake = _fake_pip([])

    def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
        done = fake(cmd, **kw)
        return done if "pip" in cmd else subprocess.CompletedProcess(cmd, 0, "vllm-rs 9.9.9\n", "")

    monkeypatch.setattr(vllm_env.subprocess, "run", run)
    with pytest.raises(SystemExit, match="9.9.9"):
        vllm_env.install_rs()
    assert not vllm_env.rs_installed()


def test_the_pin_is_the_vllm_that_recorded_the_oracle() -> None:
    assert json.loads(peer.CORPUS.read_text())["vllm"] == vllm_env.RS_VERSION


def test_command_line_and_environment(tmp_path: Path) -> None:
    srv = peer.RsPeerServer("/m/smollm2", log=tmp_path / "rs.log")
    assert srv.command() == [
        str(vllm_env.RS_BINARY),
        "render",
        "/m/smollm2",
        "--host",
        "127.0.0.1",
        "--port",
        str(VLLM_RS_PORT),
        "--max-model-len",
        "2048",
    ]
    assert srv.url == f"127.0.0.1:{VLLM_RS_PORT}" and srv.env()["HF_HUB_OFFLINE"] == "1"
    assert srv.poll_s < peer.PeerServer.poll_s  # ready in under a second: a 0.5 s poll would hide it
    assert peer.RsPeerServer("/m", 1, max_model_len=4096).command()[-1] == "4096"


def _case(status: int, ids: list[int] | None = None, **params: Any) -> dict[str, Any]:
    case = {"id": f"c{status}", "status": status, "messages": [{"role": "user", "content": "x"}]}
    case["chat_params"] = params or None
    if ids is not None:
        case["token_ids"] = ids
    return case


def test_each_answer_is_counted_against_the_recorded_one() -> None:
    ok, refused = _case(200, [1, 2, 3]), _case(400)
    assert peer.outcome(ok, 200, [1, 2, 3]) == "same_ids"
    assert peer.outcome(ok, 200, [1, 2]) == "ids_differ"
    assert peer.outcome(ok, 400, None) == "refused_where_vllm_answers"
    assert peer.outcome(ok, 0, None) == "refused_where_vllm_answers"  # a dropped connection answers nothing
    assert peer.outcome(refused, 200, [9]) == "answered_where_vllm_refuses"
    assert peer.outcome(refused, 422, None) == "both_refuse"
    t = peer.tally(
        [
            ("a", "same_ids"),
            ("b", "ids_differ"),
            ("c", "both_refuse"),
            ("d", "ids_differ"),
            ("e", "answered_where_vllm_refuses"),
        ]
    )
    assert t["cases"] == 5 and t["same_ids"] == 1 and t["both_refuse"] == 1
    assert t["differ"] == 3 and t["refused_where_vllm_answers"] == 0
    assert t["differing_cases"]["ids_differ"] == ["b", "d"]


def test_requests_are_sent_as_they_were_recorded() -> None:
    body = json.loads(peer.corpus_body(_case(200, [], tools=[{"type": "function"}], add_generation_prompt=False)))
    assert body["tool_choice"] == "none" and body["add_generation_prompt"] is False and "model" not in body
    # An empty tools list went without tool_choice (make_chat.vllm_body): so does the replay.
    assert "tool_choice" not in json.loads(peer.corpus_body(_case(400, tools=[])))
    assert json.loads(peer.corpus_body(_case(200, []))) == {"messages": [{"role": "user", "content": "x"}]}


def test_a_tokenizer_only_template_gets_the_recording_s_config(tmp_path: Path) -> None:
    base, tok = tmp_path / "base", tmp_path / "qwen3"
    base.mkdir()
    tok.mkdir()
    (base / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 49152, "bos_token_id": 1}))
    (tok / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 1}}, "added_tokens": [{}]}))
    made = peer.corpus_model_dir(tok, base, tmp_path / "work")
    config = json.loads((made / "config.json").read_text())
    assert config["vocab_size"] == 3 + 64 and config["bos_token_id"] is None and config["model_type"] == "llama"
    assert not (tok / "config.json").exists()  # the source folder is left as it is
    assert peer.corpus_model_dir(base, base, tmp_path / "work") == base


class _Render(BaseHTTPRequestHandler):
    """Answers a chat whose user says "ok" with ids [7], refuses others, and drops "drop"."""

    protocol_version = "HTTP/1.1"  # keep-alive, as both clients expect

    def do_POST(self) -> None:  # noqa: N802 - the handler's name http.server calls
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        said = body["messages"][0]["content"]
        if said == "drop":
            self.close_connection = True
            return
        status, out = (200, {"token_ids": [7]}) if said == "ok" else (400, {"error": {"message": "no"}})
        data = json.dumps(out).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_cases_go_out_on_one_connection_and_a_drop_is_a_refusal() -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Render)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:

        def case(cid: str, said: str, status: int, ids: list[int] | None = None) -> dict[str, Any]:
            c = {"id": cid, "status": status, "messages": [{"role": "user", "content": said}], "chat_params": None}
            return c if ids is None else {**c, "token_ids": ids}

        cases = [case("a", "ok", 200, [7]), case("b", "ok", 200, [8]), case("c", "drop", 200, [7])]
        cases += [case("d", "no", 400), case("e", "ok", 400)]
        got = peer.send_cases(f"127.0.0.1:{srv.server_address[1]}", cases)
    finally:
        srv.shutdown()
    assert got == [
        ("a", "same_ids"),
        ("b", "ids_differ"),
        ("c", "refused_where_vllm_answers"),
        ("d", "both_refuse"),
        ("e", "answered_where_vllm_refuses"),
    ]


def test_the_load_generator_names_failed_requests_by_their_number_in_the_input() -> None:
    """What ``measure_peer`` leaves out of a peer's timing: every request refused or answered with
    other ids, numbered as in the whole input even when some were already left out."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Render)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    said = ["ok", "no", "ok", "ok"]
    requests = [loadgen.peer_request({"messages": [{"role": "user", "content": s}]}) for s in said]
    expected = [[7], [7], [8], [7]]
    try:
        out = asyncio.run(
            loadgen.run_load(
                "127.0.0.1", srv.server_address[1], requests, expected, loadgen.peer_ids, 1, 5.0, 4, 0.0, [0, 2, 5, 9]
            )
        )
    finally:
        srv.shutdown()
    assert (out["errors"], out["mismatched"], out["failed_requests"]) == (1, 1, [2, 5])
    assert out["first_errors"][0].startswith("request 2: HTTP 400")


def test_perf_analyzer_inputs_leave_out_what_a_peer_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_run, "WORK", tmp_path)
    whole = bench_run.openai_inputs("chat_mix", "peer")
    part = bench_run.openai_inputs("chat_mix", "peer", [3, 37])
    assert whole != part and part.name == "pa-openai-peer-chat_mix-without-3-37.json"
    payloads = [d["payload"][0] for d in json.loads(part.read_text())["data"]]
    reqs = make_inputs.load("chat_mix")
    assert len(payloads) == len(reqs) - 2
    assert payloads[3] == json.loads(loadgen.peer_request(reqs[4])[1])


def test_the_plan_skips_vllm_rs_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_run.peer_mod, "installed", lambda: False)
    monkeypatch.setattr(bench_run.peer_mod, "rs_installed", lambda: False)
    plan = bench_run.Plan.make(quick=True, no_peer=False, docs=None)
    assert not plan.rs and "make vllm-rs" in plan.rs_reason
    monkeypatch.setattr(bench_run.peer_mod, "rs_installed", lambda: True)
    monkeypatch.setattr(bench_run, "model_dir", lambda: "/m")
    plan = bench_run.Plan.make(quick=True, no_peer=False, docs=None)
    assert plan.rs and not plan.peer
    assert [(n, side) for n, side, _ in bench_run.h2h_peers(plan)] == [("vllm-rs", "vllm_rs")]
    assert not bench_run.Plan.make(quick=True, no_peer=False, docs=None, no_rs=True).rs


def _res() -> dict[str, Any]:
    """A run where ours, vLLM Python and vllm-rs all ran (made-up figures)."""

    def pa(model: str, c: int, rate: float, p50: float, **kw: Any) -> dict[str, Any]:
        name = "chat_mix" if model == "render_chat" else "completion_mix"
        return {"model": model, "input": name, "concurrency": c, "requests_per_s": rate, "p50_ms": p50, **kw}

    def h(target: str, side: str, model: str, c: int, rate: float, p50: float) -> dict[str, Any]:
        return {**pa(model, c, rate, p50), "target": target, "side": side, "rounds": 1, "samples": []}

    smollm2 = [("a@smollm2", "same_ids"), ("b@smollm2", "ids_differ")]
    corpus_total = peer.tally(smollm2 + [("c@qwen3", "both_refuse")])
    return {
        "sweep": [
            pa("render_chat", 1, 500.0, 2.0, protocol="grpc"),
            pa("render_chat", 8, 1500.0, 5.0, protocol="grpc"),
        ],
        "openai_sweep": [],
        "peer": {
            "status": "ran",
            "sweep": [pa("render_chat", 1, 200.0, 5.0), pa("render_chat", 8, 300.0, 26.0)],
            "verify": [{"input": "chat_mix", "checked": 10, "mismatched": 0, "errors": 0}],
            "footprint_after_load": {"total_mb": 900.0},
            "startup_s": 20.0,
        },
        "vllm_rs": {
            "status": "ran",
            "version": "0.32.0",
            "command": "vllm-rs render M --max-model-len 2048",
            "sweep": [pa("render_chat", 1, 1000.0, 1.0), pa("render_chat", 8, 3000.0, 2.5)],
            # Fast because two of its requests were refused: no speed.
            "loadgen": [pa("render_chat", 4, 3500.0, 1.0, errors=2, mismatched=0)],
            "verify": [
                {"input": "chat_mix", "checked": 10, "mismatched": 2, "errors": 1, "first_errors": ["request 3"]},
                {"input": "completion_mix", "checked": 10, "mismatched": 0, "errors": 0},
            ],
            "footprint_after_load": {"total_mb": 100.0},
            "startup_s": 0.5,
            "left_out": {"chat_mix": [3, 37]},
            "corpus": {
                "corpus": "tests/fixtures/vllm/chat.json",
                "recorded_by": "vllm 0.32.0",
                "not_replayed": 0,
                "templates": {
                    "smollm2": {"status": "ran", **peer.tally(smollm2)},
                    "qwen3": {"status": "skipped", "reason": "build/models/tokenizers/qwen3 missing", "cases": 1},
                },
                "total": corpus_total,
            },
        },
        "footprint": {"servers": [{"server": "render", "start_s": 4.0, "after_load": {"total_mb": 1350.0}}]},
        "head_to_head": {
            "rounds": 1,
            "rows": [
                h("ours grpc", "ours", "render_chat", 8, 1400.0, 5.5),
                h("vllm", "peer", "render_chat", 8, 280.0, 28.0),
                h("vllm-rs", "vllm_rs", "render_chat", 8, 2800.0, 2.8),
                h("vllm-rs", "vllm_rs", "render_chat", 1, 900.0, 1.1),
            ],
        },
    }


def _summary(res: dict[str, Any]) -> dict[str, Any]:
    """The parts of ``summarize``'s output that ``vllm_rs_summary`` reads."""
    return {
        "best_throughput": {
            "ours": {"render_chat": {"requests_per_s": 1500.0}},
            "peer": {"render_chat": {"requests_per_s": 300.0}},
        },
        "p50_ms_c1": {"ours": {"render_chat grpc": 2.0}, "peer": {"render_chat http-json": 5.0}},
        "ids_equal": report.ids_summary(res),
    }


def test_report_rows_put_vllm_rs_beside_ours_and_vllm_python_as_ratios() -> None:
    res = _res()
    s = _summary(res)
    rs = report.vllm_rs_summary(res, s)
    fig = {f["figure"]: f for f in rs["figures"]}
    best = fig["render_chat req/s, best of the sweeps"]
    assert (best["ours"], best["vllm"], best["vllm_rs"]) == (1500.0, 300.0, 3000.0)  # not the 3,500 with errors
    assert best["ours_over_vllm_rs"] == 0.5 and best["vllm_over_vllm_rs"] == 0.1
    assert fig["render_chat p50 ms at c=1, sweeps"]["ours_over_vllm_rs"] == 2.0
    assert fig["render_chat req/s, head-to-head median"]["ours_over_vllm_rs"] == 0.5
    assert fig["PSS MB after load"]["ours_over_vllm_rs"] == 13.5
    assert fig["start to ready s"]["vllm_over_vllm_rs"] == 40.0
    assert rs["version"] == "0.32.0"
    assert rs["bench_inputs_vs_ours"]["mismatched"] == 2 and rs["bench_inputs_vs_ours"]["errors"] == 1
    assert rs["bench_inputs_vs_ours"]["per_input"]["chat_mix"] == {"checked": 10, "mismatched": 2, "errors": 1}
    assert rs["corpus"]["total"]["differ"] == 1
    assert s["ids_equal"]["vllm_rs_vs_ours"]["checked"] == 20
    h = report.head_to_head_summary(res)
    assert h["render_chat_vs_vllm_rs_interleaved"] == 0.5
    assert h["p50_ms_c1_interleaved"]["vllm_rs"]["render_chat"]["p50_ms"] == 1.1


def test_report_section_shows_version_ratios_and_counts() -> None:
    res = _res()
    text = "\n".join(report.vllm_rs_section({"vllm_rs": report.vllm_rs_summary(res, _summary(res))}))
    assert "vllm-rs 0.32.0" in text
    assert "| render_chat req/s, best of the sweeps | higher | 1,500.0 | 300.0 | 3,000.0 | 0.50 | 0.10 |" in text
    assert "**2 ids differ, 1 refused**" in text and "**1 of 3 differ**" in text
    assert "ids differ: b@smollm2" in text
    assert "| qwen3 | 1 | skipped: build/models/tokenizers/qwen3 missing | - | - | - | - |" in text
    assert "chat_mix without requests 3, 37" in text


def test_report_says_why_vllm_rs_is_missing() -> None:
    res = {"vllm_rs": {"status": "skipped", "reason": "not installed: build/vllm-rs/vllm-rs is missing (make vllm-rs)"}}
    rs = report.vllm_rs_summary(res, {})
    assert rs == {"status": "skipped", "reason": res["vllm_rs"]["reason"]}
    assert "Not measured: skipped (not installed" in "\n".join(report.vllm_rs_section({"vllm_rs": rs}))
