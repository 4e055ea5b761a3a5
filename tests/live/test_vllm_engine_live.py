"""vLLM's own engine as the downstream model (``LLM_ENGINE=vllm``), held against vLLM itself.

The server runs vLLM's ``AsyncLLM`` inside Triton behind the ``tensorrt_llm`` interface; the
ensembles render, and the engine takes their ids (or prompt embeddings) as its own engine inputs.
The reference is vLLM alone on the same model folder and request, in its own process
(``tests/support/vllm_reference.py``): ``LLM.generate`` on the prompt text, ``LLM.chat`` on the messages
(vLLM renders its template itself), ``LLM.generate`` on an ``EmbedsPrompt``. Token ids, text and
finish must be the same, streamed and not.

Needs vLLM's environment (``make engine-vllm``; ``.ci/run`` installs it). Without it these tests
are skipped, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import ports

from client import RendererClient, RequestError

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / "build" / "peer-venv" / "bin" / "python"

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not (ROOT / "build" / "peer-venv" / ".installed").exists(),
        reason="vLLM's environment build/peer-venv is missing: `make engine-vllm` installs it "
        "(.ci/run does), then these tests run",
    ),
]

COMPLETIONS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "日本の首都は",
    "Emoji story: 😀😃😄",
    "1, 2, 3, 4,",
]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Say hello."}],
    [
        {"role": "user", "content": "Count to five."},
        {"role": "assistant", "content": "1, 2, 3, 4, 5."},
        {"role": "user", "content": "Now backwards."},
    ],
    [{"role": "user", "content": [{"type": "text", "text": "Name a color."}, {"type": "text", "text": "Just one."}]}],
    [{"role": "user", "content": "你好！请介绍一下你自己。"}],
]
SAMPLING = [
    {},
    {"stop": ["."], "include_stop_str_in_output": True},
    {"stop": ["\n"], "min_tokens": 4},
    {"temperature": 0.8, "top_p": 0.9, "seed": 7},
    {"temperature": 1.0, "top_k": 20, "seed": 11, "repetition_penalty": 1.3},
]
MAX_TOKENS = 20
EMBED_PROMPTS = ["The capital of France is", "A list of fruits:", "Dear Sir or Madam,"]


def cases(tmp: Path) -> list[dict]:
    """At least 20 requests: completions and chats under several sampling settings, and prompt embeddings."""
    out = []
    for i, prompt in enumerate(COMPLETIONS):
        out.append({"kind": "completion", "prompt": prompt, "sampling": SAMPLING[i % len(SAMPLING)]})
    for i, messages in enumerate(CHATS):
        out.append({"kind": "chat", "messages": messages, "sampling": SAMPLING[(i + 2) % len(SAMPLING)]})
    for messages in CHATS[:2]:
        out.append({"kind": "chat", "messages": messages, "sampling": {"ignore_eos": True, "stop_token_ids": [30]}})
    out.append(
        {
            "kind": "chat",
            "messages": CHATS[0] + [{"role": "assistant", "content": "The capital"}],
            "sampling": {},
            "chat": {"add_generation_prompt": False, "continue_final_message": True},
        }
    )
    for prompt in COMPLETIONS[:4]:
        out.append({"kind": "completion", "prompt": prompt, "sampling": {"ignore_eos": True}})
    for i, prompt in enumerate(EMBED_PROMPTS):
        out.append({"kind": "embeds", "prompt": prompt, "embeds_file": str(tmp / f"embeds{i}.pt"), "sampling": {}})
    return out


@pytest.fixture(scope="module")
def requests_and_answers(model_dir, hf_tokenizer, tmp_path_factory):
    """The cases, and vLLM's own answers to them (one vLLM process, started once)."""
    import torch
    from safetensors import safe_open

    tmp = tmp_path_factory.mktemp("vllm-ref")
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        table = f.get_tensor(next(k for k in f.keys() if k.endswith("embed_tokens.weight")))
    for i, prompt in enumerate(EMBED_PROMPTS):
        torch.save(table[hf_tokenizer(prompt).input_ids].clone(), tmp / f"embeds{i}.pt")
    reqs = cases(tmp)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    run = subprocess.run(
        [
            str(VLLM_PYTHON),
            str(ROOT / "tests" / "support" / "vllm_reference.py"),
            str(model_dir),
            str(tmp / "answers.json"),
        ],
        input=json.dumps([{**r, "sampling": {**r["sampling"], "max_tokens": MAX_TOKENS}} for r in reqs]),
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    answers = json.loads((tmp / "answers.json").read_text())
    assert len(reqs) >= 20 and len(answers) == len(reqs)
    return reqs, answers


@pytest.fixture(scope="module")
def vllm_server(server_settings, tmp_path_factory):
    from launcher import cli as launch

    port = ports.port("vllm")
    s = replace(
        server_settings,
        openai_port=0,
        llm_engine="vllm",
        enable_prompt_embeds=True,
        models="completion,chat,ensemble",
        build_dir=str(tmp_path_factory.mktemp("vllm-build")),
        http_port=port,
        grpc_port=port + 1,
        metrics_port=port + 2,
        startup_timeout_s=600,
    )
    launch.stop(s)
    if launch.start(s) != 0:
        pytest.fail(f"tritonserver with vLLM's engine did not start; see {s.log_file}")
    yield s
    launch.stop(s)


def ask(c: RendererClient, r: dict, stream: bool):
    sampling = r["sampling"]
    if r["kind"] == "chat":
        chat = r.get("chat", {})
        pieces = list(
            c.generate(
                "chat",
                messages=r["messages"],
                chat_params=chat or None,
                max_tokens=MAX_TOKENS,
                stream=stream,
                sampling_params=sampling,
            )
        )
    elif r["kind"] == "embeds":
        pieces = list(
            c.generate(
                "completion",
                prompt_embeds=Path(r["embeds_file"]).read_bytes(),
                max_tokens=MAX_TOKENS,
                stream=stream,
                sampling_params=sampling,
            )
        )
    else:
        pieces = list(
            c.generate("completion", prompt=r["prompt"], max_tokens=MAX_TOKENS, stream=stream, sampling_params=sampling)
        )
    return "".join(p.text for p in pieces), [i for p in pieces for i in p.output_ids]


@pytest.mark.parametrize("protocol, stream", [("grpc", False), ("grpc", True), ("http", True)])
def test_our_ensembles_on_vllms_engine_answer_as_vllm_does(vllm_server, requests_and_answers, protocol, stream):
    reqs, answers = requests_and_answers
    port = vllm_server.grpc_port if protocol == "grpc" else vllm_server.http_port
    mismatches = []
    with RendererClient(f"{vllm_server.host}:{port}", protocol) as c:
        for r, want in zip(reqs, answers):
            text, ids = ask(c, r, stream)
            if ids != want["token_ids"] or text != want["text"]:
                mismatches.append({"request": r, "ours": {"ids": ids, "text": text}, "vllm": want})
    assert not mismatches, json.dumps(mismatches, ensure_ascii=False, indent=1)[:6000]


def test_the_ensemble_front_on_vllms_engine(vllm_server, requests_and_answers):
    import numpy as np

    reqs, answers = requests_and_answers
    r, want = reqs[0], answers[0]
    assert r["kind"] == "completion" and not r["sampling"]
    with RendererClient(f"{vllm_server.host}:{vllm_server.grpc_port}", "grpc") as c:
        [out] = list(
            c.stream(
                "ensemble",
                {
                    "text_input": np.array([[r["prompt"].encode()]], dtype=object),
                    "max_tokens": np.array([[MAX_TOKENS]], np.int32),
                    "exclude_input_in_output": np.array([[True]]),
                },
            )
        )
    assert out.text == want["text"]


def test_engine_refusals_are_400s(vllm_server):
    with RendererClient(f"{vllm_server.host}:{vllm_server.http_port}", "http") as c:
        with pytest.raises(RequestError) as e:
            list(c.generate("completion", prompt="hi", max_tokens=4, sampling_params={"top_p": 0}))
        assert "top_p must be in (0, 1]" in e.value.message and e.value.is_client_error
        assert c.is_ready()
