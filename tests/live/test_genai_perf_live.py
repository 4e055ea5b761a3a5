"""genai-perf, NVIDIA's LLM load tool (nobody here wrote it), profiles the ``ensemble`` front with
its own TensorRT-LLM payload (``--endpoint-type kserve --backend tensorrtllm``: ``text_input``,
``max_tokens``, ``exclude_input_in_output``, ``stream``), streamed and not, and the OpenAI-compatible
HTTP front with its OpenAI chat payload (``--endpoint-type chat``), and every request succeeds.

genai-perf keeps no error count: its perf_analyzer stops at the first failed request and
genai-perf then exits non-zero without writing its exports. So success is: exit 0, the
requested count in its own summary, and every request in the raw export with responses and
non-empty text. ``make test`` installs it (``make genai-perf``, its own venv: it needs numpy 2).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
from genai_perf_output import export_lost_after_success

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
GENAI_PERF = BUILD / "genai-perf-venv" / "bin" / "genai-perf"
PERF_ANALYZER = BUILD / "perf_analyzer"
REQUESTS = 24


@pytest.fixture(scope="module")
def tools():
    missing = [str(p) for p in (GENAI_PERF, PERF_ANALYZER / "bin" / "perf_analyzer") if not p.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: `make test` installs them (make genai-perf perf-analyzer)")


def profile(tmp_path: Path, target: list[str], model_dir: Path, streaming: bool) -> tuple[dict, list[dict], dict]:
    """One short genai-perf profile; its summary, its requests, and the first payload it sent."""
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PATH=f"{PERF_ANALYZER / 'bin'}{os.pathsep}{os.environ['PATH']}",
        LD_LIBRARY_PATH=f"{PERF_ANALYZER / 'lib'}{os.pathsep}{os.environ.get('LD_LIBRARY_PATH', '')}",
    )
    cmd = [
        str(GENAI_PERF),
        "profile",
        *target,
        "--tokenizer",
        str(model_dir),
        "--synthetic-input-tokens-mean",
        "40",
        "--synthetic-input-tokens-stddev",
        "0",
        "--output-tokens-mean",
        "8",
        "--output-tokens-stddev",
        "0",
        "--concurrency",
        "2",
        "--request-count",
        str(REQUESTS),
        "--random-seed",
        "0",
        "--artifact-dir",
        str(tmp_path),
        # Verbose: genai-perf otherwise sends its perf_analyzer's output to /dev/null, and a failed
        # run then says nothing of what perf_analyzer saw.
        "--verbose",
    ] + (["--streaming"] if streaming else [])
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    if run.returncode != 0 and export_lost_after_success(tmp_path, run.stdout, REQUESTS):
        warnings.warn(
            f"genai-perf's perf_analyzer counted {REQUESTS} successful requests and left an empty"
            " profile export; profiling once more",
            stacklevel=1,
        )
        for folder in [p for p in tmp_path.iterdir() if p.is_dir()]:
            shutil.rmtree(folder)
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-3000:]
    [summary] = tmp_path.glob("*/profile_export_genai_perf.json")
    stats = json.loads(summary.read_text())
    export = json.loads(summary.with_name("profile_export.json").read_text())
    requests = [r for e in export["experiments"] for r in e["requests"]]
    sent = json.loads(summary.with_name("inputs.json").read_text())["data"][0]
    return stats, requests, sent


def every_request_succeeded(stats: dict, requests: list[dict], text_of) -> None:
    assert stats["request_count"]["avg"] == REQUESTS and len(requests) == REQUESTS
    for r in requests:
        assert r["response_timestamps"] and text_of(r).strip(), r
    assert stats["output_sequence_length"]["avg"] >= 6  # what it counted is what we generated (8 tokens)


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "streaming"])
def test_genai_perf_profiles_the_tensorrt_llm_front(tools, server, model_dir, tmp_path, streaming):
    target = [
        "-m",
        "ensemble",
        "--endpoint-type",
        "kserve",
        "--backend",
        "tensorrtllm",
        "-u",
        f"{server.host}:{server.grpc_port}",
    ]
    stats, requests, sent = profile(tmp_path, target, model_dir, streaming)
    every_request_succeeded(stats, requests, lambda r: "".join(o.get("text_output", "") for o in r["response_outputs"]))
    assert {"text_input", "max_tokens"} <= set(sent)  # TensorRT-LLM's payload
    if streaming:
        assert max(len(r["response_timestamps"]) for r in requests) > 1


def _openai_text(r: dict) -> str:
    text = ""
    for o in r["response_outputs"]:
        raw = o.get("response", "")
        for line in raw.splitlines() if isinstance(raw, str) else []:
            line = line.strip().removeprefix("data:").strip()
            if line and line != "[DONE]":
                for choice in json.loads(line).get("choices", []):
                    text += (choice.get("delta") or choice.get("message") or {}).get("content") or ""
    return text


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "streaming"])
def test_genai_perf_profiles_the_openai_front(tools, server, model_dir, tmp_path, streaming):
    target = ["-m", "smollm2-135m-instruct", "--endpoint-type", "chat", "--url", f"{server.host}:{server.openai_port}"]
    stats, requests, sent = profile(tmp_path, target, model_dir, streaming)
    every_request_succeeded(stats, requests, _openai_text)
    assert "messages" in json.dumps(sent)  # OpenAI's chat payload
