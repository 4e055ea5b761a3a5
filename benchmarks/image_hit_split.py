"""Where a served image cache hit spends its time: per model of the ensemble, from Triton's own
statistics, beside the client's wall time and the same chat stage in process.

One qwen2_vl tiny-model server (``render_chat`` and ``chat``), one 640x480 PNG chat (a 1.09 MB data
URL) sent ``--requests`` times over HTTP, one at a time, after a warm-up. For each path the delta
of ``/v2/models/stats`` over those requests gives, per model, the mean of ``queue``,
``compute_input``, ``compute_infer`` and ``compute_output`` (a decoupled model's infer time stops
when ``execute`` returns, not when it responds). In process: ``ChatStage.render`` + ``mm_wire``
(what ``chat_render`` does per request), ``json.loads`` of the messages alone, and the two digests
the processor's index keys can use over the data URL's text.

    python -m benchmarks.image_hit_split [--requests 20]   (prints; writes nothing)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
PORT = 19600
PARTS = ("success", "queue", "compute_input", "compute_infer", "compute_output")


def _mean_ms(fn: Callable[[], Any], n: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1000


def _stats(port: int) -> dict[str, dict[str, tuple[int, int]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/stats") as r:
        body = json.load(r)
    return {
        m["name"]: {k: (m["inference_stats"][k]["count"], m["inference_stats"][k]["ns"]) for k in PARTS}
        for m in body["model_stats"]
    }


def in_process(messages: str, n: int) -> None:
    from renderer.chat_stage import ChatStage
    from renderer.multimodal.media import MediaLimits

    stage = ChatStage.from_model_dir(
        ROOT / "build" / "models" / "tiny-qwen2_vl", media_limits=MediaLimits.from_config({})
    )
    stage.warmup()
    url = json.loads(messages)[0]["content"][0]["image_url"]["url"].encode()
    print(f"in process, {len(messages)} bytes of messages:")
    print(f"  ChatStage.render + mm_wire  {_mean_ms(lambda: stage.render(messages, None).mm_wire(), n):6.2f} ms")
    print(f"  json.loads alone            {_mean_ms(lambda: json.loads(messages), n):6.2f} ms")
    for name in ("blake2b", "sha256"):
        print(f"  {name} of the data URL     {_mean_ms(lambda: hashlib.new(name, url).digest(), n):6.2f} ms")


def served(chat: list[dict], n: int) -> None:
    from client import RendererClient
    from launcher import cli as launch

    s = replace(
        launch.Settings(),
        openai_port=0,
        model="qwen2-vl",
        models="render_chat,chat",
        build_dir=str(ROOT / "build" / "bench-mm-qwen2_vl"),
        http_port=PORT,
        grpc_port=PORT + 1,
        metrics_port=PORT + 2,
    )
    if launch.start(s) != 0:
        raise SystemExit(f"the server did not start; see {s.log_file}")
    try:
        with RendererClient(f"127.0.0.1:{PORT}") as c:
            paths = {
                "render_chat": lambda: c.render_chat(chat),
                "chat (1 token)": lambda: list(c.generate("chat", messages=chat, max_tokens=1)),
            }
            for path, fn in paths.items():
                for _ in range(3):
                    fn()
                before = _stats(PORT)
                wall = _mean_ms(fn, n)
                after = _stats(PORT)
                print(f"served {path}: client wall {wall:.2f} ms per request; per model, ms per request:")
                for m in sorted(after):
                    done = after[m]["success"][0] - before[m]["success"][0]
                    if done <= 0:
                        continue
                    ms = {k: (after[m][k][1] - before[m][k][1]) / done / 1e6 for k in PARTS}
                    print(
                        f"  {m:18} total {ms['success']:6.2f}  queue {ms['queue']:5.2f}  in {ms['compute_input']:5.2f}"
                        f"  infer {ms['compute_infer']:6.2f}  out {ms['compute_output']:5.2f}"
                    )
    finally:
        launch.stop(s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20)
    a = ap.parse_args(argv)
    from benchmarks.bench_mm import _chat
    from model_builders import vlm_model
    from tests.support.mm_images import data_url, encode, rgb

    vlm_model.build(ROOT / "build" / "models" / "tiny-qwen2_vl", family="qwen2_vl")
    chat = _chat(data_url(encode(rgb(640, 480))))
    in_process(json.dumps(chat), a.requests)
    served(chat, a.requests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
