"""What each stage adapter's ``execute`` costs per request in process, beside the floor's stand-in.

A served request's time is mostly Triton's and the Python backend's; this isolates the part our
``model.py`` adapters add. It loads the rendered default repository's ``tokenize`` and
``chat_render`` adapters and the floor's stand-ins (``benchmarks/floor``) in process, on
``tests/support/fake_triton.py``'s stand-in for the backend module (its tensors are numpy arrays,
so no shared-memory copy is timed), and sends each one request per ``execute``, back to back,
the two in alternating rounds:

- ``tokenize`` on completion_mix: ``render_completion``'s step (the prompt alone, five outputs);
- ``tokenize`` on chat_mix's rendered prompts: ``render_chat``'s step (prompt and chat flag, four outputs);
- ``chat_render`` on chat_mix: messages and chat params, as ``render_chat`` sends them.

Medians over rounds of microseconds per request, and ours over the stand-in's (not the served
floor ratio: a served request also pays the server, both stubs' IPC and the client). Scratch
timings of these loops were quoted in docs/PERFORMANCE.md before this script held them.

    python -m benchmarks.stub_inprocess [--rounds 9] [--adapters-of REV]

``--adapters-of REV`` times revision REV's adapters (``model_repository/*/1/model.py``, read with
``git show``) on this tree's ``renderer/`` and ``triton_io/``: the same loops before an adapter change.

Writes ``benchmarks/results/stub_inprocess.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks.layout import ROOT

OUT = ROOT / "benchmarks" / "results" / "stub_inprocess.json"
COMPLETION_OUTPUTS = ["input_ids", "input_lengths", "token_offsets", "rendered_prompt", "input_embeds"]
CHAT_TOKENIZE_OUTPUTS = ["input_ids", "input_lengths", "token_offsets", "input_embeds"]
CHAT_RENDER_OUTPUTS = ["prompt", "chat_template_applied", "mm_placeholders"]


def rows(name: str) -> list[dict[str, Any]]:
    from benchmarks.make_inputs import path_of

    return json.loads(path_of(name).read_text())["data"]


def floor_model(stage: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"floor_{stage}", ROOT / "benchmarks" / "floor" / f"{stage}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize({})
    return model


def bytes_input(value: str | bytes) -> np.ndarray:
    return np.array([[value.encode() if isinstance(value, str) else value]], dtype=np.object_)


def us_per_request(model: Any, make: Callable[[], list[Any]]) -> float:
    """One round: every request of ``make()`` through ``model.execute`` alone."""
    requests = make()
    t0 = time.perf_counter()
    for r in requests:
        model.execute([r])
    return (time.perf_counter() - t0) / len(requests) * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--repeat", type=int, default=5, help="passes over the input set per round")
    ap.add_argument("--adapters-of", metavar="REV", help="time git revision REV's adapters instead")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)

    from tests.support import fake_triton as ft

    with tempfile.TemporaryDirectory(prefix="stub-inprocess-") as tmp, ft.rendered_repository(Path(tmp)) as repo:
        if a.adapters_of:  # before any model loads
            from benchmarks.lane_ab import write_adapters_of

            write_adapters_of(a.adapters_of, repo.repo)
        completions = [bytes_input(r["prompt"]["content"][0]) for r in rows("completion_mix")]
        chats = [
            {
                "messages": bytes_input(r["messages"]["content"][0]),
                **({"chat_params": bytes_input(r["chat_params"]["content"][0])} if "chat_params" in r else {}),
            }
            for r in rows("chat_mix")
        ]
        chat_prompts = [
            repo.infer("chat_render", {k: v[0] for k, v in c.items()}, ["prompt"])["prompt"].reshape(1, 1)
            for c in chats
        ]

        def requests(tensors: list[dict[str, np.ndarray]], wanted: list[str]) -> Callable[[], list[Any]]:
            return lambda: [
                ft.Request([ft.Tensor(k, v) for k, v in t.items()], requested_output_names=wanted)
                for t in tensors * a.repeat
            ]

        cases = {
            "tokenize, render_completion's step (completion_mix)": (
                "tokenize",
                requests([{"prompt": p} for p in completions], COMPLETION_OUTPUTS),
            ),
            "tokenize, render_chat's step (chat_mix)": (
                "tokenize",
                requests(
                    [{"prompt": p, "chat_template_applied": np.array([[True]])} for p in chat_prompts],
                    CHAT_TOKENIZE_OUTPUTS,
                ),
            ),
            "chat_render (chat_mix)": ("chat_render", requests(chats, CHAT_RENDER_OUTPUTS)),
        }
        ours = {stage: repo.model(stage) for stage in ("tokenize", "chat_render")}
        floors = {stage: floor_model(stage) for stage in ("tokenize", "chat_render")}
        result: dict[str, dict[str, float]] = {}
        for case, (stage, make) in cases.items():
            us_per_request(ours[stage], make), us_per_request(floors[stage], make)  # warm-up
            times: dict[str, list[float]] = {"ours": [], "floor": []}
            for r in range(a.rounds):
                for who in ("ours", "floor") if r % 2 == 0 else ("floor", "ours"):
                    times[who].append(us_per_request(ours[stage] if who == "ours" else floors[stage], make))
            mine, floor = statistics.median(times["ours"]), statistics.median(times["floor"])
            result[case] = {"ours_us": round(mine, 1), "floor_us": round(floor, 1), "ratio": round(mine / floor, 2)}
            print(f"{case:<52} ours {mine:6.1f} us, floor {floor:5.1f} us per request ({mine / floor:.2f}x)")
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m benchmarks.stub_inprocess " + " ".join(argv if argv is not None else sys.argv[1:]),
        "adapters_of": a.adapters_of or "this tree",
        "median_us_per_request": result,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
