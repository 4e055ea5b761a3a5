"""Images through ``render_chat`` and ``chat`` on live servers serving the tiny Qwen2-VL and
Pixtral models: tensors equal to transformers' image processors, placeholders, hashes, the
processor cache (and its metrics), uuid rules, bad media, and generation end to end."""

from __future__ import annotations

import re
import threading
import urllib.request
from dataclasses import replace

import numpy as np
import pytest
import ports

from client import RendererClient, RequestError
from tests.support.mm_images import (
    DEVICE_PARITY_ATOL,
    IMAGES,
    PARITY_IMAGES,
    data_url,
    encode,
    png,
    png_bomb_header,
    rgb,
)

# Every test here talks to a real tritonserver.
pytestmark = pytest.mark.live

PORTS = {"qwen2_vl": ports.port("multimodal"), "pixtral": ports.port("multimodal") + 100}
CACHE_BYTES = 5_000_000  # holds the largest image but not the pool: the concurrency test runs under eviction


def image_msg(*urls: str, text: str = "Describe the image.", uuids=None):
    parts = []
    for i, u in enumerate(urls):
        part = {"type": "image_url", "image_url": {"url": u} if u else None}  # vLLM's uuid-only form
        if uuids and uuids[i]:
            part["uuid"] = uuids[i]
        parts.append(part)
    return [{"role": "user", "content": parts + [{"type": "text", "text": text}]}]


@pytest.fixture(scope="module", params=["qwen2_vl", "pixtral"])
def mm(request, server_settings, tmp_path_factory):
    """(family, settings, in-process processor) for a server on the family's tiny model."""
    from launcher import cli as launch
    from renderer.multimodal.processor import MultiModalProcessor

    family = request.param
    port = PORTS[family]
    media = tmp_path_factory.mktemp(f"media-{family}")
    (media / "ok.png").write_bytes(png("odd_333x77"))
    s = replace(
        server_settings,
        openai_port=0,
        model_dir="",
        model=family.replace("_", "-"),
        models="render_chat,chat",
        build_dir=str(tmp_path_factory.mktemp(f"mm-{family}")),
        http_port=port,
        grpc_port=port + 1,
        metrics_port=port + 2,
        mm_cache_bytes=CACHE_BYTES,
        media_dir=str(media),
        # Below vLLM's defaults (999 images, 178,956,970 pixels), so the refusals below show
        # the settings reach chat_render and mm_process.
        limit_mm_per_prompt=16,
        max_image_pixels=50_000_000,
        # The PIL processors, so the tensors are checked against transformers' *Pil classes bit for
        # bit (and the setting is shown to reach mm_process: the default "fast" differs from them).
        image_processor="slow",
    )
    assert launch.start(s) == 0, f"server for {family} did not start; see {s.log_file}"
    yield family, s, MultiModalProcessor.from_model_dir(s.resolved_model_dir, image_processor="slow")
    launch.stop(s)


@pytest.fixture(scope="module")
def hf_processor(mm):
    family, s, _ = mm
    import transformers

    cls = {"qwen2_vl": "Qwen2VLImageProcessorPil", "pixtral": "PixtralImageProcessorPil"}[family]
    return getattr(transformers, cls).from_pretrained(s.resolved_model_dir)


def client_for(s, protocol="http"):
    return RendererClient(f"{s.host}:{s.http_port if protocol == 'http' else s.grpc_port}", protocol)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tensors_equal_transformers_image_processor(mm, hf_processor, protocol):
    """Tolerance: exact (max abs diff 0) — same Pillow resample, same float operations."""
    family, s, _ = mm
    grid_name = "image_grid_thw" if family == "qwen2_vl" else "image_sizes"
    with client_for(s, protocol) as c:
        for name in PARITY_IMAGES:
            out = c.render_chat(image_msg(data_url(png(name)))).outputs
            ref = hf_processor(IMAGES[name](), return_tensors="np")
            ref_pixels = ref["pixel_values"]
            got = out["pixel_values"]
            if family == "pixtral":
                h, w = ref["image_sizes"][0]
                got, ref_pixels = got[:, :, :h, :w], ref_pixels[:, :, :h, :w]
            np.testing.assert_array_equal(got, ref_pixels, err_msg=name)
            np.testing.assert_array_equal(out[grid_name], ref[grid_name], err_msg=name)


def test_placeholders_expand_in_input_ids(mm):
    family, s, proc = mm
    with client_for(s) as c:
        r = c.render_chat(image_msg(data_url(png("rgb_640x480")), data_url(png("odd_333x77"))))
    ids = np.asarray(r.input_ids)
    ph = r.outputs["mm_placeholders"]
    assert ph.shape == (2, 2)
    if family == "qwen2_vl":
        grid = r.outputs["image_grid_thw"]
        for (off, length), thw in zip(ph, grid):
            assert length == int(np.prod(thw)) // 4  # spatial merge 2 x 2
            assert (ids[off : off + length] == proc.placeholder_token_id).all()
    else:
        for off, length in ph:
            run = ids[off : off + length]
            assert run[-1] == 13 and set(run[:-1]) <= {10, 12}  # [IMG]... [IMG_BREAK] ... [IMG_END]
    assert ph[0][0] + ph[0][1] <= ph[1][0]
    assert r.token_offsets == []  # vLLM gives offsets only without media


def test_ids_and_tensors_equal_the_in_process_processor(mm, hf_tokenizer):
    family, s, proc = mm
    from transformers import AutoTokenizer

    from renderer.chat import ChatParams, ChatRenderer

    msgs = image_msg(data_url(png("rgba_300x200")), text="What colours?")
    with client_for(s) as c:
        r = c.render_chat(msgs)
    chat = ChatRenderer.from_model_dir(s.resolved_model_dir, image_placeholder=proc.placeholder_text)
    rendered = chat.render_messages(msgs, ChatParams())
    tok = AutoTokenizer.from_pretrained(s.resolved_model_dir)
    ref = proc.process(tok(rendered.prompt, add_special_tokens=False).input_ids, rendered.mm_items)
    assert r.rendered_prompt == rendered.prompt
    assert r.input_ids == ref.input_ids
    np.testing.assert_array_equal(r.outputs["pixel_values"], ref.pixel_values)
    assert [h.decode() for h in r.outputs["mm_hashes"]] == list(ref.hashes)


def cache_metrics(s) -> tuple[float, float]:
    text = urllib.request.urlopen(f"http://{s.host}:{s.metrics_port}/metrics").read().decode()
    hits = float(re.search(r'^mm_cache_hits_total\{model="mm_process"\} (\S+)', text, re.M).group(1))
    misses = float(re.search(r'^mm_cache_misses_total\{model="mm_process"\} (\S+)', text, re.M).group(1))
    return hits, misses


def test_repeated_image_is_a_cache_hit(mm):
    _, s, _ = mm
    url = data_url(encode(rgb(400, 300, seed=77)))  # seen by no other test: its first sight is a miss
    with client_for(s) as c:
        h0, m0 = cache_metrics(s)
        first = c.render_chat(image_msg(url)).outputs
        h1, m1 = cache_metrics(s)
        second = c.render_chat(image_msg(url)).outputs
        h2, m2 = cache_metrics(s)
    assert (h1 - h0, m1 - m0) == (0, 1), "first sight must be processed"
    assert (h2 - h1, m2 - m1) == (1, 0), "a repeated image must not be processed again"
    np.testing.assert_array_equal(first["pixel_values"], second["pixel_values"])
    assert first["mm_hashes"][0] == second["mm_hashes"][0]


def test_same_pixels_other_encoding_same_hash_and_uuid_override(mm):
    _, s, _ = mm
    img = IMAGES["odd_333x77"]()
    with client_for(s) as c:
        a = c.render_chat(image_msg(data_url(encode(img, "PNG"), "PNG"))).outputs["mm_hashes"][0]
        b = c.render_chat(image_msg(data_url(encode(img, "BMP"), "BMP"))).outputs["mm_hashes"][0]
        u = c.render_chat(image_msg(data_url(encode(img, "PNG")), uuids=["user-image-42"])).outputs["mm_hashes"][0]
        # A uuid alone (no data) is resolved from the cache once the item was seen under it.
        again = c.render_chat(image_msg("", uuids=["user-image-42"])).outputs
    assert a == b
    assert u.decode() == "user-image-42"
    assert again["mm_hashes"][0].decode() == "user-image-42" and again["pixel_values"].size > 0


BAD_MEDIA = [
    (
        # vLLM 0.32 refuses it in request validation, with pydantic's words (checked against its
        # render app): only a uuid may stand in for the image.
        "empty item without uuid",
        image_msg(""),
        "image_url\n  Input should be a valid dictionary",
    ),
    ("uuid never seen", image_msg("", uuids=["never-sent-before"]), "never-sent-before"),
    ("truncated png", image_msg(data_url(png("rgb_640x480")[:2000])), "Failed to load image: image file is truncated"),
    (
        "not an image",
        image_msg("data:image/png;base64,aGVsbG8gd29ybGQ="),
        "Failed to load image: cannot identify image file <_io.BytesIO object>",
    ),
    ("bomb header", image_msg(data_url(png_bomb_header(10_000, 10_000))), "exceed the maximum of"),
    ("http not allowed", image_msg("http://example.com/cat.png"), "Fetching images from 'example.com' is not allowed"),
    ("file outside the media dir", image_msg("file:///etc/passwd"), "outside"),
    ("path traversal", image_msg("MEDIA/../../etc/passwd"), "outside"),
    (
        "too many images",
        image_msg(*[data_url(png("tiny_3x5"))] * 17),
        "At most 16 image(s) may be provided in one prompt.",
    ),
]


@pytest.mark.parametrize("name, msgs, message", BAD_MEDIA, ids=[b[0] for b in BAD_MEDIA])
def test_bad_media_is_a_400_and_server_stays_ready(mm, name, msgs, message):
    _, s, _ = mm
    msgs = _with_media_dir(msgs, s.media_dir)
    with client_for(s) as c:
        with pytest.raises(RequestError) as e:
            c.render_chat(msgs)
        assert e.value.is_client_error, e.value.message
        assert message in e.value.message
        assert c.is_ready()
        assert c.render_chat(image_msg(data_url(png("tiny_3x5")))).input_ids


def _with_media_dir(msgs, media_dir):
    import json

    return json.loads(json.dumps(msgs).replace("MEDIA/", media_dir + "/"))


def test_files_inside_the_media_dir_load(mm):
    _, s, _ = mm
    with client_for(s) as c:
        by_path = c.render_chat(image_msg(f"{s.media_dir}/ok.png")).outputs
        by_url = c.render_chat(image_msg(data_url(png("odd_333x77")))).outputs
    np.testing.assert_array_equal(by_path["pixel_values"], by_url["pixel_values"])


def test_concurrent_repeated_images_under_eviction(mm):
    """Four clients, a small pool of images repeated in shuffled orders, a cache too small to
    hold them: every response must carry exactly its own image's tensors."""
    _, s, proc = mm
    names = ["rgb_640x480", "tall_20x2000", "gray_L_257x129", "odd_333x77", "rgba_300x200", "palette_P_200x150"]
    urls = {n: data_url(png(n)) for n in names}
    with client_for(s) as c:
        expected = {n: c.render_chat(image_msg(urls[n])).outputs for n in names}
    failures: list[str] = []
    h0, m0 = cache_metrics(s)

    def worker(seed: int):
        rng = np.random.default_rng(seed)
        with client_for(s, "grpc" if seed % 2 else "http") as c:
            for _ in range(12):
                n = names[rng.integers(len(names))]
                out = c.render_chat(image_msg(urls[n])).outputs
                if not (
                    np.array_equal(out["pixel_values"], expected[n]["pixel_values"])
                    and out["mm_hashes"][0] == expected[n]["mm_hashes"][0]
                    and np.array_equal(out["input_ids"], expected[n]["input_ids"])
                ):
                    failures.append(n)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    h1, m1 = cache_metrics(s)
    assert not failures, f"responses carried the wrong image's tensors: {failures}"
    assert h1 - h0 + m1 - m0 == 48
    assert m1 - m0 > 0, "no eviction happened: the cache held every image, so nothing was stressed"


def test_chat_with_an_image_answers_like_transformers(mm):
    family, s, proc = mm
    import torch
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from renderer.chat import ChatParams, ChatRenderer

    msgs = image_msg(data_url(png("rgb_640x480")))
    with client_for(s, "grpc") as c:
        [whole] = list(c.generate("chat", messages=msgs, max_tokens=6))
        pieces = list(c.generate("chat", messages=msgs, max_tokens=6, stream=True))
    assert "".join(p.text for p in pieces) == whole.text
    chat = ChatRenderer.from_model_dir(s.resolved_model_dir, image_placeholder=proc.placeholder_text)
    rendered = chat.render_messages(msgs, ChatParams())
    tok = AutoTokenizer.from_pretrained(s.resolved_model_dir)
    out = proc.process(tok(rendered.prompt, add_special_tokens=False).input_ids, rendered.mm_items)
    model = AutoModelForImageTextToText.from_pretrained(s.resolved_model_dir, dtype=torch.float32)
    ids = torch.tensor([out.input_ids])
    # Copies: the cache's arrays are read-only.
    extra = {k: torch.from_numpy(np.array(v)) for k, v in out.tensors().items()}
    if family == "qwen2_vl":
        extra["mm_token_type_ids"] = (ids == proc.placeholder_token_id).long()
    ref = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False, **extra
    )[0, ids.shape[1] :].tolist()
    assert whole.output_ids == ref


def test_gpu_path_matches_cpu(mm):
    import torch

    if not torch.cuda.is_available():
        pytest.skip(
            f"torch {torch.__version__} sees no CUDA device, so mm_process runs KIND_CPU here; runs on a host "
            "with a CUDA GPU and a CUDA build of torch (torch.cuda.is_available()), where the launcher picks "
            "KIND_GPU. The same torch kernels run on the CPU against numba, on these images and to this "
            "tolerance, in tests/unit/test_mm_unit.py::test_torch_path_on_cpu_matches_numba"
        )
    from renderer.multimodal.processor import MultiModalProcessor

    family, s, cpu = mm
    gpu = MultiModalProcessor.from_model_dir(s.resolved_model_dir, device="cuda")
    for name in PARITY_IMAGES:
        item_prompt = [cpu.placeholder_token_id]
        from renderer.chat.messages import MultiModalItem

        item = [MultiModalItem("image", "image_url", data_url(png(name)), None, 0, 0)]
        a = cpu.process(item_prompt, item).pixel_values
        b = gpu.process(item_prompt, item).pixel_values
        b = b.cpu().numpy() if hasattr(b, "cpu") else b
        np.testing.assert_allclose(b, a, atol=DEVICE_PARITY_ATOL, err_msg=name)
