"""In-process baselines on the benchmark inputs: the same work without a server, one process, one core.

For each input file it times, for about SECONDS each, in this one process:

- completions: transformers ``tokenizer(batch)`` in batches of 64, transformers ``tokenizer(prompt)``
  one request at a time, and this project's ``Renderer.render_batch`` one at a time and in batches
  of 64 (what one ``tokenize`` instance does per dynamic batch);
- chats: transformers ``apply_chat_template(tokenize=True)`` (on the parsed conversation) and this project's ``ChatRenderer``
  followed by ``Renderer.render_batch`` (the ``chat_render`` + ``tokenize`` stages, minus Triton);
- vLLM's own renderer in process (``benchmarks.vllm_inprocess`` in the peer venv's python) when
  the peer venv exists.

Run as its own process with ``TOKENIZERS_PARALLELISM=false`` and ``OMP_NUM_THREADS=1`` (set by
``main``) so batch encodes stay on one core: requests/s of a single process.

    python -m benchmarks.inprocess --seconds 3 [--expected ids.json] [--vllm-python PY] NAME ...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
BATCH = 64


def _rate(fn: Callable[[int], int], seconds: float) -> tuple[float, int]:
    """Call fn(i) (which returns how many requests it handled) repeatedly for ``seconds``."""
    n = i = 0
    t0 = time.perf_counter()
    while True:
        n += fn(i)
        i += 1
        el = time.perf_counter() - t0
        if el >= seconds:
            return n / el, n


@dataclass(frozen=True)
class _Tools:
    """What every timing loop calls: transformers' tokenizer, and our renderer and chat renderer with
    their request parameters."""

    hf: Any
    renderer: Any
    chat: Any
    cmpl_params: Any
    chat_tok_params: Any

    def ours_completion(self, batch: list[dict]) -> list[list[int]]:
        """Our ids for a batch of completion requests, one ``render_batch``."""
        from renderer.prompts import TextPrompt

        out = self.renderer.render_batch(
            [self.renderer.render_prompt(TextPrompt(r["prompt"])) for r in batch], [self.cmpl_params] * len(batch)
        )
        return [o.prompt_token_ids for o in out]

    def ours_chat(self, r: dict) -> list[int]:
        """Our ids for one chat request: ``ChatRenderer`` then ``render_batch``."""
        from renderer.chat import ChatParams
        from renderer.prompts import TextPrompt

        rendered = self.chat.render_messages(r["messages"], ChatParams.from_request(r.get("chat_params") or None))
        (out,) = self.renderer.render_batch([TextPrompt(rendered.prompt)], [self.chat_tok_params])
        return out.prompt_token_ids

    def hf_chat(self, r: dict) -> list[int]:
        """transformers' ids for one chat request, from its parsed conversation."""
        cp = r.get("chat_params") or {}
        enc = self.hf.apply_chat_template(
            r["conversation"],
            tools=cp.get("tools"),
            tokenize=True,
            add_generation_prompt=cp.get("add_generation_prompt", True),
            continue_final_message=cp.get("continue_final_message", False),
        )
        ids = enc["input_ids"] if hasattr(enc, "keys") else enc
        return list(ids)


def _row(name: str, baseline: str, rate_n: tuple[float, int], note: str = "") -> dict[str, Any]:
    """One baseline's row: requests/s and how many requests the timing counted."""
    return {"input": name, "baseline": baseline, "requests_per_s": rate_n[0], "requests": rate_n[1], "note": note}


def run(
    model_dir: str,
    names: list[str],
    seconds: float,
    expected: dict[str, list[list[int]]] | None = None,
    vllm_python: str | None = None,
) -> dict[str, Any]:
    """Every baseline on every input, our ids checked against transformers' (and the server's), then vLLM's."""
    from benchmarks.make_inputs import load

    tools = _load_tools(model_dir)
    rows: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    for name in names:
        reqs = load(name)
        timed = _time_completions if "prompt" in reqs[0] else _time_chats
        ours_ids, name_rows, check = timed(tools, name, reqs, seconds)
        rows += name_rows
        checks[name] = check
        if expected and name in expected:
            checks[name]["ours_inprocess_vs_server"] = _diff(ours_ids, expected[name])
    vllm: dict[str, Any] = {"status": "skipped", "reason": "no peer venv (make bench-peer builds it)"}
    if vllm_python and Path(vllm_python).exists():
        vllm = run_vllm(vllm_python, model_dir, names, seconds)
        rows += _vllm_rows(vllm, expected, checks)
    return {"rows": rows, "checks": checks, "vllm": {k: v for k, v in vllm.items() if k != "inputs"}}


def _load_tools(model_dir: str) -> _Tools:
    """transformers' tokenizer and our renderers on ``model_dir``, the chat renderer warmed up."""
    from transformers import AutoTokenizer

    from renderer import Renderer, RendererConfig
    from renderer.chat import ChatRenderer

    hf = AutoTokenizer.from_pretrained(model_dir)
    renderer = Renderer.from_config(RendererConfig(model_dir=model_dir))
    chat = ChatRenderer.from_model_dir(model_dir, mm_limits={})
    chat.warmup()
    return _Tools(hf, renderer, chat, renderer.request_params(None), renderer.request_params(None, chat=True))


_Timed = tuple[list[list[int]], list[dict[str, Any]], dict[str, Any]]


def _time_completions(t: _Tools, name: str, reqs: list[dict], seconds: float) -> _Timed:
    """Completions: transformers batched and one at a time, ours one at a time and batched; our ids and
    their check against transformers'."""
    prompts = [r["prompt"] for r in reqs]
    batches = [reqs[i : i + BATCH] for i in range(0, len(reqs), BATCH)]
    pbatches = [prompts[i : i + BATCH] for i in range(0, len(prompts), BATCH)]
    ours_ids = [ids for b in batches for ids in t.ours_completion(b)]
    hf_ids = [list(x) for x in t.hf(prompts)["input_ids"]]
    check = {"ours_inprocess_vs_transformers": _diff(ours_ids, hf_ids)}
    rows = [
        _row(
            name,
            "transformers tokenizer(batch of 64)",
            _rate(lambda i: len(t.hf(pbatches[i % len(pbatches)])["input_ids"]), seconds),
        ),
        _row(
            name,
            "transformers tokenizer(prompt), one at a time",
            _rate(lambda i: (t.hf(prompts[i % len(prompts)]), 1)[1], seconds),
        ),
        _row(
            name,
            "ours Renderer.render_batch, one at a time",
            _rate(lambda i: len(t.ours_completion([reqs[i % len(reqs)]])), seconds),
        ),
        _row(
            name,
            "ours Renderer.render_batch(batch of 64)",
            _rate(lambda i: len(t.ours_completion(batches[i % len(batches)])), seconds),
        ),
    ]
    return ours_ids, rows, check


def _time_chats(t: _Tools, name: str, reqs: list[dict], seconds: float) -> _Timed:
    """Chats: transformers' ``apply_chat_template`` and ours, one at a time; our ids and their check
    against transformers'."""
    from renderer.chat import ChatParams

    # transformers gets the parsed conversation (vLLM's parse step: e.g. a tool-call turn
    # without "content" gets one), as vLLM hands it to apply_chat_template.
    for r in reqs:
        r["conversation"] = t.chat.render_messages(
            r["messages"], ChatParams.from_request(r.get("chat_params") or None)
        ).conversation
    ours_ids = [t.ours_chat(r) for r in reqs]
    hf_ids = [t.hf_chat(r) for r in reqs]
    check = {"ours_inprocess_vs_transformers": _diff(ours_ids, hf_ids)}
    rows = [
        _row(
            name,
            "transformers apply_chat_template(tokenize=True)",
            _rate(lambda i: (t.hf_chat(reqs[i % len(reqs)]), 1)[1], seconds),
        ),
        _row(
            name,
            "ours ChatRenderer + Renderer, one at a time",
            _rate(lambda i: (t.ours_chat(reqs[i % len(reqs)]), 1)[1], seconds),
        ),
    ]
    return ours_ids, rows, check


def _vllm_rows(
    vllm: dict[str, Any], expected: dict[str, list[list[int]]] | None, checks: dict[str, Any]
) -> list[dict[str, Any]]:
    """vLLM's in-process rows; its ids checked against the server's into ``checks`` (and dropped)."""
    rows = []
    for name, res in vllm.get("inputs", {}).items():
        rows.append(
            _row(
                name,
                "vLLM renderer in process (render_cmpl / render_chat), one at a time",
                (res["requests_per_s"], res["requests"]),
            )
        )
        if expected and name in expected:
            checks.setdefault(name, {})["vllm_inprocess_vs_server"] = _diff(res.pop("ids"), expected[name])
        else:
            res.pop("ids", None)
    return rows


def run_vllm(python: str, model_dir: str, names: list[str], seconds: float) -> dict[str, Any]:
    env = dict(
        os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1"
    )
    proc = subprocess.run(
        [python, "-m", "benchmarks.vllm_inprocess", model_dir, str(seconds), *names],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        return {"status": "failed", "reason": proc.stderr[-2000:]}
    return {"status": "ran", "inputs": json.loads(proc.stdout)}


def _diff(a: list[list[int]], b: list[list[int]]) -> dict[str, int]:
    return {"checked": len(b), "mismatched": sum(1 for x, y in zip(a, b) if list(x) != list(y)) + abs(len(a) - len(b))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="+")
    ap.add_argument("--model-dir", default=str(ROOT / "build" / "models" / "smollm2-135m-instruct"))
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--expected", help="JSON {input: [ids per request]} from our server, to check against")
    ap.add_argument("--vllm-python", help="the peer venv's python, for vLLM's renderer in process")
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    expected = json.loads(Path(a.expected).read_text()) if a.expected else None
    out = run(a.model_dir, a.names, a.seconds, expected, a.vllm_python)
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    # One core: no Rust-side parallel batch encode, one BLAS thread (set before the imports).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
