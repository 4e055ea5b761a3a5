"""TensorRT-LLM's own client scripts, unchanged, against this server.

``tests/fixtures/trtllm/client/`` holds ``end_to_end_grpc_client.py`` and
``inflight_batcher_llm_client.py`` exactly as tensorrtllm_backend has them at the commit
docs/ENGINES.md pins (its README says where from). Each runs here as a subprocess, as a
TensorRT-LLM user runs it: against ``ensemble`` with its default arguments, streamed and not,
and with the variants that ask for outputs by name (``--batch-inputs``: ``batch_index``; ``-n``:
``sequence_index``; ``--return-log-probs``: ``cum_log_probs`` / ``output_log_probs``). Text the
server can give must come out as the script's own ``--check-outputs`` expects it (equal to the
``completion`` ensemble's greedy text: with neither ``top_k`` nor ``top_p`` TensorRT-LLM decodes
greedily); what it cannot honour must come back as the server's 400 naming the input, which the
script prints, never as a crash of the script on a missing output. ``--batch-inputs`` with a JSON
list of prompts sends them as one request of several rows, as TensorRT-LLM's ``ensemble`` takes
them: each row comes back under its ``batch_index`` and ``--check-outputs`` holds each to its
prompt's greedy text. tritonserver is the same process at the end.

The engine is also deployed as TensorRT-LLM's ``decoupled_mode: false`` (``LLM_DECOUPLED=0``, a
second server here): ``inflight_batcher_llm_client.py`` then sends plain requests, is answered with
one response each (a stop with an empty one, as upstream's docs run ``--stop-after-ms`` with a
``--request-id``), and a streamed request gets TensorRT-LLM's refusal; the generation ensembles
still serve both their modes, since ``detokenize`` asks such an engine for one response. A batch of
several prompts gets TensorRT-LLM's refusal too, as its ``tensorrt_llm`` deployed so answers one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import ports

pytestmark = pytest.mark.live

SCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "trtllm" / "client"
PROMPTS = ["The capital of France is", "Once upon a time"]
TOKENS = 8


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    got = subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args],
        cwd=SCRIPTS,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert "Traceback" not in got.stderr, got.stderr
    return got


@pytest.fixture(scope="module")
def url(server) -> str:
    return f"{server.host}:{server.grpc_port}"


@pytest.fixture(scope="module")
def pid(server) -> int:
    from launcher import cli as launch

    return launch.running_pid(server)


@pytest.fixture(scope="module")
def greedy(server) -> dict[str, str]:
    """Each prompt's greedy text from the ``completion`` ensemble."""
    from client import RendererClient

    with RendererClient(f"{server.host}:{server.grpc_port}", "grpc") as c:
        return {
            p: "".join(
                g.text
                for g in c.generate("completion", prompt=p, max_tokens=TOKENS, sampling_params={"temperature": 0})
            )
            for p in PROMPTS
        }


def end_to_end(url: str, prompt: str, *args: str, expected: list[str] | None = None) -> subprocess.CompletedProcess:
    checks = ["--check-outputs", "--expected-outputs", json.dumps(expected)] if expected is not None else []
    return run("end_to_end_grpc_client.py", "-u", url, "-p", prompt, "-o", str(TOKENS), *checks, *args)


@pytest.mark.parametrize(
    "args",
    [[], ["-S"], ["--batch-inputs"], ["--batch-inputs", "-S"], ["--exclude-input-in-output"], ["-n", "1"]],
    ids=lambda a: " ".join(a) or "defaults",
)
def test_end_to_end_client_gets_the_greedy_text(url, pid, greedy, args):
    prompt = PROMPTS[0]
    got = end_to_end(url, prompt, *args, expected=[greedy[prompt]])
    assert got.returncode == 0, got.stdout + got.stderr  # its --check-outputs asserts the text
    assert "error" not in got.stdout.lower(), got.stdout
    if "-S" in args:
        assert got.stdout.endswith(greedy[prompt] + "\n"), got.stdout  # the pieces, joined
    else:
        shown = greedy[prompt] if "--exclude-input-in-output" in args else prompt + greedy[prompt]
        assert f"0: {shown}\n" in got.stdout, got.stdout


@pytest.mark.parametrize(
    "args",
    [[], ["-S"], ["--exclude-input-in-output"], ["-S", "--exclude-input-in-output"]],
    ids=lambda a: " ".join(a) or "whole",
)
def test_end_to_end_client_batches_several_prompts_in_one_request(url, pid, greedy, args):
    """``--batch-inputs``: one request of two rows; the script files each response under its
    ``batch_index`` and its ``--check-outputs`` holds each row to its prompt's greedy text."""
    got = end_to_end(url, json.dumps(PROMPTS), "--batch-inputs", *args, expected=[greedy[p] for p in PROMPTS])
    assert got.returncode == 0, got.stdout + got.stderr
    assert "error" not in got.stdout.lower(), got.stdout
    if "-S" in args:  # each row's pieces, printed as they come under their batch_index, then joined
        assert {line.split(" ", 1)[0] for line in got.stdout.splitlines() if line[:2] in ("0 ", "1 ")} == {"0", "1"}
        assert got.stdout.endswith("".join(greedy[p] + "\n" for p in PROMPTS)), got.stdout
    else:
        for row, p in enumerate(PROMPTS):
            shown = greedy[p] if "--exclude-input-in-output" in args else p + greedy[p]
            assert f"{row}: {shown}\n" in got.stdout, got.stdout


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_end_to_end_client_with_several_prompts(url, greedy, stream):
    """A JSON list of prompts: one request each (the script's default), answered in order."""
    got = end_to_end(url, json.dumps(PROMPTS), *(["-S"] if stream else []), expected=[greedy[p] for p in PROMPTS])
    assert got.returncode == 0, got.stdout + got.stderr
    assert "error" not in got.stdout.lower(), got.stdout


@pytest.mark.parametrize(
    "args, parameter, why",
    [
        (["-b", "2"], "beam_width", "beam search is not served"),
        (["-n", "2"], "num_return_sequences", "one sequence per request"),
        (["-n", "2", "-S"], "num_return_sequences", "one sequence per request"),
        (["--return-log-probs"], "return_log_probs", "log probabilities are not returned"),
        (["--return-log-probs", "-S"], "return_log_probs", "log probabilities are not returned"),
        (["--return-context-logits"], "return_context_logits", "logits are not returned"),
        (["--return-generation-logits"], "return_generation_logits", "logits are not returned"),
        (["--return-perf-metrics"], "return_perf_metrics", "per-request engine metrics are not returned"),
        (["--batch-inputs", "-p", json.dumps(PROMPTS), "-b", "2"], "beam_width", "beam search is not served"),
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) else "",
)
def test_end_to_end_client_gets_the_400_of_what_cannot_be_honoured(url, pid, args, parameter, why):
    """The script prints the server's error and exits 0, as it does for any error it receives."""
    prompt_args = [] if "-p" in args else ["-p", PROMPTS[0]]
    got = run("end_to_end_grpc_client.py", "-u", url, "-o", str(TOKENS), *prompt_args, *args)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "Received an error from server:" in got.stdout, got.stdout
    assert why in got.stdout and f"(parameter={parameter})" in got.stdout, got.stdout


def test_inflight_batcher_client_streams_from_the_engine(server, url, greedy):
    """The engine-level script, on the engine model (``llm`` here; a TensorRT-LLM engine folder
    keeps its own name, ``tensorrt_llm``, the script's default), streamed: the seam is decoupled,
    as TensorRT-LLM's ``decoupled_mode:true`` is, and gives the same greedy text."""
    prompt = PROMPTS[0]
    got = run(
        "inflight_batcher_llm_client.py",
        "-u",
        url,
        "--model-name",
        "llm",
        "--tokenizer-dir",
        server.model_dir,
        "--text",
        prompt,
        "--request-output-len",
        str(TOKENS),
        "--streaming",
    )
    assert got.returncode == 0, got.stdout + got.stderr
    assert f"Output beam 0: {greedy[prompt]}\n" in got.stdout, got.stdout


@pytest.fixture(scope="module")
def plain_engine(server_settings, tmp_path_factory):
    """A second server whose ``llm`` is not decoupled."""
    from launcher import cli as launch

    s = replace(
        server_settings,
        llm_decoupled=False,
        models="completion,ensemble",
        encoder_decoder=False,
        openai_port=0,
        build_dir=str(tmp_path_factory.mktemp("llm-not-decoupled")),
        http_port=ports.port("trtllm_clients"),
        grpc_port=ports.port("trtllm_clients") + 1,
        metrics_port=ports.port("trtllm_clients") + 2,
    )
    assert launch.start(s) == 0
    yield s
    launch.stop(s)


def inflight(s, *args: str) -> subprocess.CompletedProcess:
    return run(
        "inflight_batcher_llm_client.py",
        "-u",
        f"{s.host}:{s.grpc_port}",
        "--model-name",
        "llm",
        "--tokenizer-dir",
        s.model_dir,
        "--text",
        PROMPTS[0],
        *args,
    )


def test_inflight_batcher_client_sends_plain_requests_to_a_plain_engine(plain_engine, greedy):
    got = inflight(plain_engine, "--request-output-len", str(TOKENS))
    assert got.returncode == 0, got.stdout + got.stderr
    assert f"Output beam 0: {greedy[PROMPTS[0]]}\n" in got.stdout, got.stdout


def test_inflight_batcher_client_stops_a_plain_request(plain_engine):
    """``--stop-after-ms`` as upstream's docs run it (with a request id): the stop's own answer is
    an empty response, and the script itself asserts fewer ids than it asked for."""
    got = inflight(plain_engine, "--request-output-len", "100", "--stop-after-ms", "300", "--request-id", "7")
    assert got.returncode == 0, got.stdout + got.stderr
    assert "Got cancellation response from server" in got.stdout, got.stdout


def test_a_plain_engine_refuses_streaming_in_tensorrt_llms_words(plain_engine):
    got = inflight(plain_engine, "--request-output-len", str(TOKENS), "--streaming")
    assert got.returncode != 0
    assert "Streaming is only supported if model is deployed using decoupled mode." in got.stdout + got.stderr


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_plain_engine_refuses_a_batch_in_tensorrt_llms_words(plain_engine, stream):
    """TensorRT-LLM's ``tensorrt_llm`` deployed with ``decoupled_mode:false`` refuses a request of
    more than one row (its ``utils.cc``, ``createRequestsFromInputTensors``): so does the
    ``ensemble`` over such an engine, streamed or not."""
    url = f"{plain_engine.host}:{plain_engine.grpc_port}"
    args = ["--batch-inputs", "-p", json.dumps(PROMPTS), *(["-S"] if stream else [])]
    got = run("end_to_end_grpc_client.py", "-u", url, "-o", str(TOKENS), *args)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "Received an error from server:" in got.stdout, got.stdout
    assert "Batch size > 1 requires the tensorrt_llm backend to be using decoupled transaction policy" in got.stdout, (
        got.stdout
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_ensembles_serve_both_modes_over_a_plain_engine(plain_engine, greedy, stream):
    url = f"{plain_engine.host}:{plain_engine.grpc_port}"
    prompt = PROMPTS[0]
    got = end_to_end(url, prompt, *(["-S"] if stream else []), expected=[greedy[prompt]])
    assert got.returncode == 0, got.stdout + got.stderr
    assert "error" not in got.stdout.lower(), got.stdout


def test_the_server_never_restarted(server, pid):
    from launcher import cli as launch

    assert launch.running_pid(server) == pid, "tritonserver restarted"
