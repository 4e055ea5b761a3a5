"""vLLM's own answers to a list of requests: run with vLLM's environment (``build/peer-venv``).

    build/peer-venv/bin/python tests/support/vllm_reference.py MODEL_DIR ANSWERS.json < requests.json

Each request is ``{"kind": "completion" | "chat" | "embeds", ...}``; completions go to
``LLM.generate`` as text (vLLM tokenizes), chats to ``LLM.chat`` (vLLM renders the template),
prompt embeddings to ``LLM.generate`` as an ``EmbedsPrompt``, each with its ``SamplingParams``.
The answer is vLLM's token ids, text and finish reason. ``tests/live/test_vllm_engine_live.py`` compares
the server's ``completion`` / ``chat`` with these; this file never imports the project.
"""

from __future__ import annotations

import json
import os
import sys


def main(model_dir: str, answers_path: str) -> int:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    requests = json.load(sys.stdin)
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import EmbedsPrompt

    llm = LLM(
        model=model_dir,
        max_model_len=2048,
        dtype=os.environ.get("VLLM_REFERENCE_DTYPE", "float32"),
        enforce_eager=True,
        enable_prompt_embeds=True,
    )
    answers = []
    for r in requests:
        sp = SamplingParams(**{"temperature": 0.0, **r["sampling"]})
        if r["kind"] == "chat":
            out = llm.chat(r["messages"], sp, use_tqdm=False, **r.get("chat", {}))[0]
        elif r["kind"] == "embeds":
            rows = torch.load(r["embeds_file"], weights_only=True)
            out = llm.generate(EmbedsPrompt(prompt_embeds=rows), sp, use_tqdm=False)[0]
        else:
            out = llm.generate(r["prompt"], sp, use_tqdm=False)[0]
        o = out.outputs[0]
        answers.append({"token_ids": list(o.token_ids), "text": o.text, "finish_reason": o.finish_reason})
    with open(answers_path, "w") as f:  # not stdout: vLLM logs there
        json.dump(answers, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
