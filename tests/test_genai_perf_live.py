"""genai-perf, NVIDIA's LLM load tool (nobody here wrote it), profiles the ``ensemble`` front with
its own TensorRT-LLM payload (``--endpoint-type kserve --backend tensorrtllm``: ``text_input``,
``max_tokens``, ``exclude_input_in_output``, ``stream``), streamed and not, and every request
succeeds.

genai-perf keeps no error count: its perf_analyzer stops at the first failed request and
genai-perf then exits non-zero without writing its exports. So success is: exit 0, the
requested count in its own summary, and every request in the raw export with responses and
non-empty text. ``make test`` installs it (``make genai-perf``, its own venv: it needs numpy 2).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
GENAI_PERF = BUILD / "genai-perf-venv" / "bin" / "genai-perf"
PERF_ANALYZER = BUILD / "perf_analyzer"
REQUESTS = 24


@pytest.fixture(scope="module")
def tools():
    missing = [str(p) for p in (GENAI_PERF, PERF_ANALYZER / "bin" / "perf_analyzer") if not p.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: `make test` installs them (make genai-perf perf-analyzer)")


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "streaming"])
def test_genai_perf_profiles_the_tensorrt_llm_front(tools, server, model_dir, tmp_path, streaming):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PATH=f"{PERF_ANALYZER / 'bin'}{os.pathsep}{os.environ['PATH']}",
               LD_LIBRARY_PATH=f"{PERF_ANALYZER / 'lib'}{os.pathsep}{os.environ.get('LD_LIBRARY_PATH', '')}")
    cmd = [str(GENAI_PERF), "profile", "-m", "ensemble", "--endpoint-type", "kserve", "--backend", "tensorrtllm",
           "-u", f"{server.host}:{server.grpc_port}", "--tokenizer", str(model_dir),
           "--synthetic-input-tokens-mean", "40", "--synthetic-input-tokens-stddev", "0",
           "--output-tokens-mean", "8", "--output-tokens-stddev", "0",
           "--concurrency", "2", "--request-count", str(REQUESTS), "--random-seed", "0",
           "--artifact-dir", str(tmp_path)] + (["--streaming"] if streaming else [])
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [summary] = tmp_path.glob("*/profile_export_genai_perf.json")
    stats = json.loads(summary.read_text())
    assert stats["request_count"]["avg"] == REQUESTS
    export = json.loads(summary.with_name("profile_export.json").read_text())
    requests = [r for e in export["experiments"] for r in e["requests"]]
    assert len(requests) == REQUESTS
    for r in requests:
        text = "".join(o.get("text_output", "") for o in r["response_outputs"])
        assert r["response_timestamps"] and text.strip(), r
    # It sent TensorRT-LLM's payload, and the output it counted is what we generated (8 tokens).
    sent = json.loads(summary.with_name("inputs.json").read_text())["data"][0]
    assert {"text_input", "max_tokens"} <= set(sent)
    assert stats["output_sequence_length"]["avg"] >= 6
    if streaming:
        assert max(len(r["response_timestamps"]) for r in requests) > 1
