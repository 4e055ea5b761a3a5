"""The multimodal stage in process and through Triton against the HF ``*ImageProcessorPil``
classes, on the same images, in one run; ratios and the cache-hit latency.

    python -m benchmarks.bench_mm [--repeat 5]        (writes benchmarks/results/mm.json)

For each family and image size:
- HF: the PIL image processor on an already-decoded image (resize + rescale + normalize + layout);
- ours in process, cold: ``MultiModalProcessor.process`` with the cache off (decode + resize +
  kernels + placeholder expansion); warm: the same image again with the cache on (a hit);
- through Triton: ``render_chat`` over HTTP on a server for the family's tiny model, a new image
  each time (a miss: chat_render + tokenize + mm_process + the transfer of the data URL and the
  tensors), and the same image again (a hit: the cache-hit latency a client sees);
- the ``chat`` path on that hit: the same chat generating one token on the family's tiny model in
  the same server (render, mm_process and the model's prefill; the image tensors never leave it);
- vLLM's Python render server on the same tiny model, where ``make engine-vllm`` built its
  environment: the same chats to its ``/v1/chat/completions/render``, miss and hit, each of its
  requests alternating with ours, both servers up (it returns ``pixel_values`` as uint8 patches
  in msgpack, normalized later by the model; ``render_chat`` returns them normalized, float32).
Builds the tiny model folders under ``build/models`` if missing. Loopback only.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    """Median ms of ``fn`` over ``repeat`` calls after a warm-up (numba cache load, Pillow plugin import)."""
    return alternating_ms([fn], repeat)[0]


SIZES = ((640, 480), (1280, 720), (4000, 3000))
"""The image sizes measured (width, height)."""

PROMPTS = {"qwen2_vl": [1, 151652, 151655, 151653, 2], "pixtral": [1, 10, 2]}
"""Per family, token ids holding one image placeholder, for the processor in process."""


def bench_image(w: int, h: int) -> bytes:
    """The PNG measured at a size (blocks of 8 pixels past 4 MP, so the file stays realistic)."""
    from tests.support.mm_images import encode, rgb

    return encode(rgb(w, h, block=8 if w * h > 4_000_000 else 1))


def family_settings(family: str, models: str, build_dir: Path, port: int, device_normalize: bool = False) -> Any:
    """Launcher settings serving ``models`` on the family's tiny model, on ``port`` to ``port + 2``
    (``device_normalize``: ``MM_DEVICE_DO_NORMALIZE``)."""
    from dataclasses import replace

    from launcher import cli as launch

    return replace(
        launch.Settings(),
        openai_port=0,
        model=family.replace("_", "-"),
        models=models,
        build_dir=str(build_dir),
        http_port=port,
        grpc_port=port + 1,
        metrics_port=port + 2,
        mm_device_do_normalize=device_normalize,
    )


def alternating_ms(fns: list[Callable[[], Any]], repeat: int) -> list[float]:
    """Median ms of each of ``fns``, called in turn ``repeat`` times after one warm-up call each, so
    that every one sees the same stretch of a shared machine."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, t in zip(fns, times):
            start = time.perf_counter()
            fn()
            t.append(time.perf_counter() - start)
    return [statistics.median(t) * 1000 for t in times]


class VllmRender:
    """One keep-alive HTTP connection to vLLM's render server's chat endpoint."""

    def __init__(self, port: int, model: str) -> None:
        import http.client

        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.model = model

    def render_chat(self, messages: list[dict]) -> None:
        import http.client

        body = json.dumps({"model": self.model, "messages": messages})
        try:
            self.conn.request("POST", "/v1/chat/completions/render", body, {"Content-Type": "application/json"})
            r = self.conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # uvicorn closes a connection idle for 5 s (while the in-process figures were taken):
            # once more on a new one (the first call of each series is its warm-up, not timed).
            self.conn.close()
            self.conn.request("POST", "/v1/chat/completions/render", body, {"Content-Type": "application/json"})
            r = self.conn.getresponse()
        data = r.read()
        if r.status != 200 or b'"mm_hashes"' not in data:  # an image chat it did not render is no time
            raise RuntimeError(f"vLLM's render server answered {r.status}: {data[:300]!r}")

    def close(self) -> None:
        self.conn.close()


def inprocess_hit_ms(processor: Any, family: str, png: bytes, repeat: int) -> float:
    """Median ms of ``processor.process`` on the same image again (a cache hit): target 4's base."""
    from renderer.chat.messages import MultiModalItem
    from tests.support.mm_images import data_url

    items = [MultiModalItem("image", "image_url", data_url(png), None, 0, 0)]
    processor.process(PROMPTS[family], items)
    return median_ms(lambda: processor.process(PROMPTS[family], items), repeat)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    result = measure(a.repeat)
    if "error" in result:
        print(result["error"], file=sys.stderr)
        return 1
    out = ROOT / "benchmarks" / "results" / "mm.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    return 0


VARIANTS = (("qwen2_vl", False), ("qwen2_vl", True), ("pixtral", False))
"""(family, ``MM_DEVICE_DO_NORMALIZE``) served: Qwen2-VL both ways, since vLLM's render server sends
its uint8 pixels by default (the like-for-like row) and this project float32 by default; Pixtral
float32 (vLLM's Llava cannot normalize on the device)."""


@dataclass(frozen=True)
class _Family:
    """One family's measuring tools: its processors in process (cache off and on), Hugging Face's PIL
    processor, our server's client, and vLLM's render server where the peer is installed."""

    name: str
    device_normalize: bool
    cold: Any
    warm: Any
    hf: Any
    client: Any
    vllm: VllmRender | None


@dataclass(frozen=True)
class _Served:
    """Served medians (ms) of one size: ours on a miss and a hit, vLLM's where it ran."""

    miss: float
    hit: float
    vllm_miss: float | None
    vllm_hit: float | None


def measure(repeat: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Each family and size: HF PIL, ours in process (miss and hit) and through Triton (miss and hit)."""
    from model_builders import vlm_model

    models = ROOT / "build" / "models"
    dirs = {f: vlm_model.build(models / f"tiny-{f}", family=f) for f in ("qwen2_vl", "pixtral")}
    rows: list[dict[str, Any]] = []
    log(
        f"{'family':9} {'pixels':>7} {'size':>10} {'HF PIL ms':>10} {'ours cold':>10} {'ours warm':>10} "
        f"{'triton miss':>12} {'triton hit':>11} {'chat hit':>9} {'HF/ours':>8} {'HF/triton':>10}"
    )
    from benchmarks import peer

    for i, (fam, device_normalize) in enumerate(VARIANTS):
        family_rows = _measure_family(fam, dirs[fam], 19500 + 10 * i, repeat, log, device_normalize)
        if isinstance(family_rows, dict):
            return family_rows
        rows += family_rows
    return {"repeat": repeat, "rows": rows, "vllm_peer": peer.version() if peer.installed() else None}


def _measure_family(
    fam: str, d: Path, port: int, repeat: int, log: Callable[[str], None], device_normalize: bool = False
) -> list[dict[str, Any]] | dict[str, Any]:
    """One family's rows, every size, with its server (and vLLM's) up; an error dict where ours did not start."""
    from client import RendererClient
    from launcher import cli as launch
    from benchmarks import peer

    s = family_settings(fam, "render_chat,chat", ROOT / "build" / f"bench-mm-{fam}", port, device_normalize)
    if launch.start(s) != 0:
        return {"error": f"the {fam} server did not start; see {s.log_file}"}
    client = RendererClient(f"127.0.0.1:{port}")
    # The model's own context, as ours serves it (an image of 4000x3000 takes thousands of tokens).
    vllm_server = peer.PeerServer(
        str(d), port=port + 5, log=ROOT / "build" / "bench" / f"vllm-render-{fam}.log", max_model_len=4096
    )
    vllm: VllmRender | None = None
    try:
        if peer.installed():
            vllm_server.start()
            vllm = VllmRender(vllm_server.port, str(d))
        tools = _family_tools(fam, d, client, vllm, device_normalize)
        return [_measure_size(tools, w, h, repeat, log) for w, h in SIZES]
    finally:
        client.close()
        if vllm is not None:
            vllm.close()
        vllm_server.stop()
        launch.stop(s)


def _family_tools(fam: str, d: Path, client: Any, vllm: VllmRender | None, device_normalize: bool) -> _Family:
    """The family's processors in process (cache off, cache on) and Hugging Face's PIL processor."""
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from renderer.multimodal import MultiModalProcessor

    cold = MultiModalProcessor.from_model_dir(d, cache_bytes=0, mm_device_do_normalize=device_normalize)
    warm = MultiModalProcessor.from_model_dir(d, mm_device_do_normalize=device_normalize)
    if fam == "qwen2_vl":
        f = cold.family
        hf = Qwen2VLImageProcessorPil(min_pixels=f.min_pixels, max_pixels=f.max_pixels)
    else:
        hf = PixtralImageProcessorPil()
    return _Family(fam, device_normalize, cold, warm, hf, client, vllm)


def _measure_size(t: _Family, w: int, h: int, repeat: int, log: Callable[[str], None]) -> dict[str, Any]:
    """One size five ways: HF PIL, ours in process on a miss and a hit, served on a miss and a hit (and vLLM)."""
    from PIL import Image

    from renderer.chat.messages import MultiModalItem
    from tests.support.mm_images import data_url

    png = bench_image(w, h)
    items = [MultiModalItem("image", "image_url", data_url(png), None, 0, 0)]
    t_cold = median_ms(lambda: t.cold.process(PROMPTS[t.name], items), repeat)
    t_warm = inprocess_hit_ms(t.warm, t.name, png, repeat)
    pil = Image.open(io.BytesIO(png))
    pil.load()
    t_hf = median_ms(lambda: t.hf(images=[pil], return_tensors="np"), repeat)
    same = image_chat(data_url(png))
    served = _served_ms(t, w, h, same, repeat)
    t_chat = median_ms(lambda: list(t.client.generate("chat", messages=same, max_tokens=1)), repeat)
    row = _size_row(t.name, w, h, t_hf, t_cold, t_warm, t_chat, served)
    row.update(pixel_values=pixel_dtype(t.name, t.device_normalize), as_vllm_sends=as_vllm_sends(t))
    log(
        f"{t.name:9} {row['pixel_values']:>7} {row['size']:>10} {t_hf:10.1f} {t_cold:10.1f} {t_warm:10.1f} {served.miss:12.1f} "
        f"{served.hit:11.1f} {t_chat:9.1f} {row['hf_over_ours_cold']:8.2f} {row['hf_over_triton_miss']:10.2f}"
    )
    return row


def _fresh_urls(w: int, h: int, seed: int, repeat: int) -> list[str]:
    """``repeat + 1`` images of the size, new pixels each (seeds from ``seed``), as data URLs."""
    from tests.support.mm_images import data_url, encode, rgb

    return [data_url(encode(rgb(w, h, seed=seed + k, block=8 if w * h > 4_000_000 else 1))) for k in range(repeat + 1)]


def _served_ms(t: _Family, w: int, h: int, same: list[dict], repeat: int) -> _Served:
    """Through Triton: fresh pixels every call for the miss, one image repeated for the hit; vLLM's
    render server alternating with ours where it is up."""
    fresh = iter(_fresh_urls(w, h, 100, repeat))
    client, vllm = t.client, t.vllm
    if vllm is None:
        t_miss = median_ms(lambda: client.render_chat(image_chat(next(fresh))), repeat)
        client.render_chat(same)
        t_hit = median_ms(lambda: client.render_chat(same), repeat)
        return _Served(t_miss, t_hit, None, None)
    # The same fresh images for both servers, each new to both caches.
    urls = _fresh_urls(w, h, 300, repeat)
    ours, theirs = iter(urls), iter(urls)
    t_miss, v_miss = alternating_ms(
        [
            lambda: client.render_chat(image_chat(next(ours))),
            lambda: vllm.render_chat(image_chat(next(theirs))),
        ],
        repeat,
    )
    t_hit, v_hit = alternating_ms([lambda: client.render_chat(same), lambda: vllm.render_chat(same)], repeat)
    return _Served(t_miss, t_hit, v_miss, v_hit)


def _size_row(
    fam: str, w: int, h: int, t_hf: float, t_cold: float, t_warm: float, t_chat: float, served: _Served
) -> dict[str, Any]:
    """One size's row of ``mm.json``: the medians and their ratios, vLLM's columns where it ran."""
    t_miss, t_hit = served.miss, served.hit
    row = {
        "family": fam,
        "size": f"{w}x{h}",
        "hf_pil_ms": round(t_hf, 2),
        "ours_cold_ms": round(t_cold, 2),
        "ours_warm_ms": round(t_warm, 2),
        "triton_miss_ms": round(t_miss, 2),
        "triton_hit_ms": round(t_hit, 2),
        "chat_hit_1_token_ms": round(t_chat, 2),
        "hf_over_ours_cold": round(t_hf / t_cold, 2),
        "hf_over_triton_miss": round(t_hf / t_miss, 2),
        "served_over_inprocess_hit": round(t_hit / t_warm, 2),
        "served_over_inprocess_miss": round(t_miss / t_cold, 2),
    }
    if served.vllm_miss is not None and served.vllm_hit is not None:
        row.update(
            vllm_miss_ms=round(served.vllm_miss, 2),
            vllm_hit_ms=round(served.vllm_hit, 2),
            miss_over_vllm=round(t_miss / served.vllm_miss, 2),
            hit_over_vllm=round(t_hit / served.vllm_hit, 2),
        )
    return row


def pixel_dtype(family: str, device_normalize: bool) -> str:
    """The dtype of the ``pixel_values`` a variant serves."""
    from renderer.multimodal.tensors import raw_pixels

    return "uint8" if raw_pixels(family, device_normalize) else "float32"


def as_vllm_sends(t: _Family) -> bool:
    """Whether ours sends the form vLLM's render server sends by default (its
    ``mm_device_do_normalize`` is on wherever the model can normalize): the like-for-like row."""
    return pixel_dtype(t.name, t.device_normalize) == pixel_dtype(t.name, True)


def image_chat(url: str) -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": url}},
                {"type": "text", "text": "Describe the image."},
            ],
        }
    ]


if __name__ == "__main__":
    sys.exit(main())
