"""Image chat on vLLM's engine: our ``chat`` (``LLM_ENGINE=vllm MODEL=qwen2-vl``) against ``vllm serve`` alone.

The same tiny Qwen2-VL folder, dtype and context length on both, one load generator, the same
requests: one image (448 x 336 PNG) and a question, ``max_tokens`` 64 with ``ignore_eos``, greedy.
Two cache states: **miss**, every request a new image (decoded, processed and encoded every
time, on both sides), and **hit**, two images sent over and over (our ``mm_process`` cache and
vLLM's encoder cache on our side; vLLM's processor and encoder caches on its side). Each target
runs alone (the other stopped), in alternating rounds; medians over rounds. Per concurrency level:
time to first text and output tokens per second, and whether both answered the same text.

    python -m benchmarks.engine_vllm_images [--quick]    -> build/bench/engine_vllm_images.json

``make bench`` runs it when vLLM's environment has torchvision (``make engine-vllm``).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import statistics
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks import engine_vllm
from benchmarks.engine_vllm import BUILD, VllmServe, ask_ours, ask_vllm, log

QUESTIONS = ("Describe the picture.", "What colors are in it?", "What is in the top left corner?")


def data_url(seed: int) -> str:
    import numpy as np
    from PIL import Image

    px = np.random.default_rng(seed).integers(0, 256, (336, 448, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(px).save(buf, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def conversation(url: str, i: int) -> list[dict[str, Any]]:
    question = QUESTIONS[i % len(QUESTIONS)]
    return [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": question}],
        }
    ]


def closed_loop(ask: Any, convs: list[list[dict[str, Any]]], concurrency: int) -> dict[str, Any]:
    todo = list(range(len(convs)))
    lock = threading.Lock()
    ttft: list[float] = []
    texts: dict[int, str] = {}
    errors: list[str] = []

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            try:
                t, text = ask(convs[i])
                with lock:
                    ttft.append(t)
                    texts[i] = text
            except Exception as e:  # noqa: BLE001 - recorded, fails the row
                with lock:
                    errors.append(str(e)[:300])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "concurrency": concurrency,
        "requests": len(convs),
        "errors": errors,
        "wall_s": round(wall, 3),
        "output_tokens_per_s": round(len(texts) * engine_vllm.MAX_TOKENS / wall, 2),
        "ttft_p50_ms": round(statistics.median(ttft) * 1000, 1) if ttft else None,
        "texts": {str(k): v for k, v in sorted(texts.items())},
    }


def measure(name: str, ask: Any, levels: list[tuple[int, int]], rnd: int) -> list[dict[str, Any]]:
    hot = [data_url(1), data_url(2)]
    ask(conversation(hot[0], 0))  # warm-up (and the hit images' first send)
    ask(conversation(hot[1], 1))
    rows = []
    for conc, n in levels:
        for cache in ("miss", "hit"):
            # A miss gets images no target has seen in any round or level: seeds by round, level, index.
            urls = [data_url(10_000 * (rnd + 1) + 100 * conc + i) for i in range(n)] if cache == "miss" else hot
            convs = [conversation(urls[i % len(urls)], i) for i in range(n)]
            row = closed_loop(ask, convs, conc)
            log(
                f"  {name:5} {cache:4} c={conc}: {row['output_tokens_per_s']:7.1f} tok/s, TTFT p50 {row['ttft_p50_ms']} ms"
            )
            rows.append({"target": name, "cache": cache, "round": rnd, **row})
    return rows


def run(quick: bool = False) -> dict[str, Any]:
    from launcher import cli as launch
    from launcher import repository

    settings = replace(
        engine_vllm.ours_settings(""),
        model="qwen2-vl",
        models="chat",
        build_dir=str(BUILD / "bench" / "engine-vllm-images"),
    )
    model_dir = str(settings.resolved_model_dir)
    dtype = repository.template_vars(settings)["vllm_dtype"]
    levels = [(1, 4), (4, 8)] if quick else [(1, 8), (4, 16)]
    rounds = 1 if quick else 2
    rows: list[dict[str, Any]] = []
    for rnd in range(rounds):
        for target in ["ours", "vllm"] if rnd % 2 == 0 else ["vllm", "ours"]:
            log(f"images round {rnd + 1}: starting {target}")
            if target == "ours":
                if launch.start(settings) != 0:
                    raise SystemExit(f"our server did not start; see {settings.log_file}")
                try:
                    rows += measure("ours", ask_ours, levels, rnd)
                finally:
                    launch.stop(settings)
            else:
                srv = VllmServe(model_dir, dtype)
                srv.start()
                try:
                    rows += measure("vllm", ask_vllm, levels, rnd)
                finally:
                    srv.stop()
    return {
        "model": Path(model_dir).name,
        "dtype": dtype,
        "levels": levels,
        "rounds": rounds,
        "rows": rows,
        "summary": summarize(rows),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds per cache state and concurrency; ratios ours / vllm (TTFT: vllm / ours,
    so above 1 is better for both); whether both answered every request with the same text."""
    out: dict[str, Any] = {}
    same = True
    for cache in ("miss", "hit"):
        for conc in sorted({r["concurrency"] for r in rows}):

            def med(target: str, key: str) -> float | None:
                vals = [
                    r[key]
                    for r in rows
                    if (r["target"], r["cache"], r["concurrency"]) == (target, cache, conc)
                    and not r["errors"]
                    and r[key]
                ]
                return statistics.median(vals) if vals else None

            tps = med("ours", "output_tokens_per_s"), med("vllm", "output_tokens_per_s")
            ttft = med("ours", "ttft_p50_ms"), med("vllm", "ttft_p50_ms")
            out[f"{cache}_c{conc}"] = {
                "ours_tokens_per_s": tps[0],
                "vllm_tokens_per_s": tps[1],
                "tokens_per_s_ratio": round(tps[0] / tps[1], 3) if all(tps) else None,
                "ours_ttft_p50_ms": ttft[0],
                "vllm_ttft_p50_ms": ttft[1],
                "ttft_ratio": round(ttft[1] / ttft[0], 3) if all(ttft) else None,
            }
            texts = {
                (r["target"], r["round"], k): v
                for r in rows
                if (r["cache"], r["concurrency"]) == (cache, conc)
                for k, v in r["texts"].items()
            }
            same &= all(texts.get(("vllm", rnd, k)) in (None, v) for (t, rnd, k), v in texts.items() if t == "ours")
    out["same_text"] = same
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(BUILD / "bench" / "engine_vllm_images.json"))
    a = ap.parse_args(argv)
    res = run(a.quick)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1, ensure_ascii=False))
    print(json.dumps(res["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
