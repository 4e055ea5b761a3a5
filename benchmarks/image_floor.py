"""How close a served image cache hit can come to the in-process hit: ours against the image floor.

Target 4 of issue 26 asks for an image chat through ``render_chat`` on a cache hit at most 3x
the in-process processor's hit (``benchmarks.bench_mm``'s ratio, worst over its families and
sizes). This serves, per family, the ``render_chat`` ensemble twice at once: as it is, and as the
image floor, where all three stages are stand-ins (``benchmarks/floor``): ``chat_render`` hands
the messages on as ``mm_data`` without parsing or rendering them, ``tokenize`` answers fixed ids
and ``mm_process`` answers, from memory, the outputs recorded from our own server for that chat.
So the floor carries exactly what a hit must carry (the 1 MB-and-up request in, the data to
``mm_process``, ``pixel_values`` and the rest out, the same ensemble, client and settings) and
does no work. Nothing built as this ensemble (three Python-backend stages, the same tensors out,
the same client) answers a hit faster than it does.

Both servers are measured with ``bench_mm``'s client call (``RendererClient.render_chat`` over
HTTP, the same chat again), in alternating rounds; the in-process hit is ``bench_mm``'s
(``MultiModalProcessor.process`` with the cache on, the same image again). The floor's answers
are checked equal to ours before any timing.

    python -m benchmarks.image_floor [--rounds 3] [--repeat 5]

Writes ``benchmarks/results/image_floor.json``: per family and size, median ms of ours, of the
floor and in process, and the ratios ``ours / in process`` (target 4's), ``floor / in process``
(the least any server built as this ensemble can show) and ``ours / floor``; their worst and best
over the rows. ``make bench`` runs it too (``measure``), beside ``bench_mm``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

from benchmarks.bench_mm import SIZES, bench_image, family_settings, image_chat, inprocess_hit_ms, median_ms
from benchmarks.layout import ROOT, WORK

OUT = ROOT / "benchmarks" / "results" / "image_floor.json"
BASE_PORT = 19700
FAMILIES = ("qwen2_vl", "pixtral")


def record(client: Any, chats: dict[str, str]) -> dict[int, dict[str, np.ndarray]]:
    """Our server's full answer to each chat, keyed by the length of its messages text (what the
    floor's ``chat_render`` stand-in keys on)."""
    from client.triton_client import chat_inputs

    out = {}
    for text in chats.values():
        key = len(text.encode())
        if key in out:
            raise RuntimeError("two chats of one length: the floor could not tell them apart")
        out[key] = client.infer("render_chat", chat_inputs(text))
    return out


def differing_outputs(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> list[str]:
    """The outputs that differ between two answers (the floor's ``input_embeds`` is its own)."""
    return [n for n in a if n != "input_embeds" and not np.array_equal(a[n], b.get(n))]


def measure_family(family: str, rounds: int, repeat: int, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    from benchmarks.floor import IMAGE_STAND_INS, RECORDED, repository_with_stand_ins, write_recorded
    from benchmarks.servers import start_on
    from client import RendererClient
    from client.triton_client import chat_inputs
    from launcher import cli as launch
    from model_builders import vlm_model
    from renderer.multimodal import MultiModalProcessor
    from tests.support.mm_images import data_url

    model_dir = vlm_model.build(ROOT / "build" / "models" / f"tiny-{family}", family=family)
    pngs = {f"{w}x{h}": bench_image(w, h) for w, h in SIZES}
    chats = {size: json.dumps(image_chat(data_url(png))) for size, png in pngs.items()}
    processor = MultiModalProcessor.from_model_dir(model_dir)
    inproc = {size: inprocess_hit_ms(processor, family, png, repeat) for size, png in pngs.items()}

    ours = family_settings(family, "render_chat", WORK / f"image-floor-ours-{family}", BASE_PORT)
    floor = family_settings(family, "render_chat", WORK / f"image-floor-floor-{family}", BASE_PORT + 10)
    servers = {"ours": ours, "floor": floor}
    rows: list[dict[str, Any]] = []
    try:
        if launch.start(ours) != 0:
            raise RuntimeError(f"our {family} server did not start; see {ours.log_file}")
        with RendererClient(f"127.0.0.1:{ours.http_port}") as c:
            recorded = record(c, chats)
        templates = repository_with_stand_ins(WORK / f"image-floor-templates-{family}", IMAGE_STAND_INS)
        for stage in ("chat_render", "mm_process"):
            write_recorded(templates / stage / "1" / RECORDED, recorded)
        if not start_on(floor, templates):
            raise RuntimeError(f"the {family} floor did not start; see {floor.log_file}")
        clients = {name: RendererClient(f"127.0.0.1:{s.http_port}") for name, s in servers.items()}
        try:
            for size, text in chats.items():
                got = clients["floor"].infer("render_chat", chat_inputs(text))
                differ = differing_outputs(recorded[len(text.encode())], got)
                if differ:
                    raise RuntimeError(f"the floor's answer differs from ours for {family} {size}: {differ}")
            times: dict[tuple[str, str], list[float]] = {}
            for r in range(rounds):
                order = list(clients) if r % 2 == 0 else list(reversed(clients))
                for size, text in chats.items():
                    for name in order:
                        client = clients[name]
                        times.setdefault((name, size), []).append(
                            median_ms(lambda: client.render_chat(text), repeat)  # noqa: B023 (called at once)
                        )
        finally:
            for client in clients.values():
                client.close()
    finally:
        for s in servers.values():
            launch.stop(s)
    for size in chats:
        o = statistics.median(times[("ours", size)])
        f = statistics.median(times[("floor", size)])
        i = inproc[size]
        rows.append(
            {
                "family": family,
                "size": size,
                "ours_hit_ms": round(o, 2),
                "floor_hit_ms": round(f, 2),
                "inprocess_hit_ms": round(i, 2),
                "ours_over_inprocess": round(o / i, 2),
                "floor_over_inprocess": round(f / i, 2),
                "ours_over_floor": round(o / f, 2),
                "rounds_ms": {name: [round(t, 2) for t in times[(name, size)]] for name in servers},
            }
        )
        log(
            f"{family:9} {size:>10}  ours {o:7.1f} ms  floor {f:7.1f} ms  in process {i:6.2f} ms  "
            f"ours/in process {o / i:5.1f}  floor/in process {f / i:5.1f}  ours/floor {o / f:4.2f}"
        )
    return rows


def measure(
    rounds: int, repeat: int, families: tuple[str, ...] = FAMILIES, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Every family's rows, and the worst and best ratios over them."""
    rows = [row for family in families for row in measure_family(family, rounds, repeat, log)]
    ratios = ("ours_over_inprocess", "floor_over_inprocess", "ours_over_floor")
    return {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rounds": rounds,
        "repeat": repeat,
        "worst": {k: max(r[k] for r in rows) for k in ratios},
        "best": {k: min(r[k] for r in rows) for k in ratios},
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5, help="requests per round and server (median)")
    ap.add_argument("--family", choices=FAMILIES, action="append", help="default: both")
    a = ap.parse_args(argv)
    result = {
        "command": "python -m benchmarks.image_floor " + " ".join(sys.argv[1:] if argv is None else argv),
        **measure(a.rounds, a.repeat, tuple(a.family or FAMILIES)),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"worst over families and sizes: {result['worst']}; best: {result['best']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
