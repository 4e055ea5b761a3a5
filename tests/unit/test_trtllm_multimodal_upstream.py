"""The TensorRT-LLM image story in docs/ENGINES.md, held to upstream's own files.

``fixtures/trtllm/multimodal/`` keeps, unchanged and digest-checked, the upstream files the decision
rests on: the deprecation notice of TensorRT-LLM's Triton ``multimodal`` models, the
``multimodal_encoders`` and ``multimodal`` ensemble configs, and the LLM-API model's config. The C++
``tensorrt_llm`` model is ``fixtures/trtllm/interface.json``. Here, with no server:

- the fixtures are the bytes their README records, and the document names each commit;
- the ``multimodal`` path is end of life, and it takes pixels only from its own preprocessing;
- the LLM-API model takes ``text_input`` and ``image_url``, and no ids or image tensors;
- no upstream model declares an image tensor of ours (``ENGINE_IMAGE_INPUTS``), and ``tensorrt_llm``
  takes images only as a prompt table.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from renderer.engine_tensors import ENGINE_IMAGE_INPUTS

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "trtllm" / "multimodal"
NOTE = (FOLDER / "README.md").read_text()
ROWS = re.findall(
    r"^\| `([\w.]+)` \| ([\w/-]+) \| `([\w/.-]+)` \| `([0-9a-f]{40})` \| `([0-9a-f]{64})` \|$", NOTE, re.M
)
INTERFACE = json.loads((ROOT / "tests" / "fixtures" / "trtllm" / "interface.json").read_text())
DOC = (ROOT / "docs" / "ENGINES.md").read_text()
OURS = set(ENGINE_IMAGE_INPUTS)


def parse(name: str):
    """An upstream config parsed with Triton's own protobuf schema, its placeholders filled."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    text = (FOLDER / name).read_text()
    text = re.sub(r"data_type:\s*\$\{\w+\}", "data_type: TYPE_FP32", text)
    text = re.sub(r"\$\{\w+\}", "1", text)
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def names(items) -> set[str]:
    return {t.name for t in items}


def test_fixtures_are_upstreams_unchanged():
    assert len(ROWS) == 4
    assert {r[0] for r in ROWS} == {p.name for p in FOLDER.iterdir() if p.name != "README.md"}
    for name, _repo, _path, _commit, digest in ROWS:
        assert hashlib.sha256((FOLDER / name).read_bytes()).hexdigest() == digest, name


def test_document_names_each_upstream_commit():
    start = DOC.index("### Images and TensorRT-LLM")
    section = DOC[start : DOC.index("\n## ", start)]
    for name, repo, path, commit, _digest in ROWS:
        if name == "multimodal_ensemble.config.pbtxt":
            continue  # the pipeline's wiring, cited through the models it joins
        assert f"`{commit[:7]}`" in section, (name, commit)
    assert f"`{INTERFACE['source']['commit'][:7]}`" in section
    # The quotes the document makes are upstream's words.
    notice = (FOLDER / "Deprecation_notice.md").read_text()
    quotes = re.findall(r'"([^"]+)"', section[: section.index("TensorRT-LLM's Python LLM API")])
    assert len(quotes) == 3
    for quote in quotes:
        assert quote in notice, quote


def test_multimodal_path_is_end_of_life():
    notice = (FOLDER / "Deprecation_notice.md").read_text()
    assert "DEPRECATION NOTICE" in notice
    assert "is deprecated and is no longer maintained" in notice
    assert "**End of Life:** TensorRT-LLM-V1.2" in notice
    assert "Please use `PyTorch LLM backend` instead" in notice


def test_multimodal_encoders_takes_pixels_and_gives_a_prompt_table():
    cfg = parse("multimodal_encoders.config.pbtxt")
    assert cfg.name == "multimodal_encoders"
    inputs = {t.name: t for t in cfg.input}
    assert {"pixel_values", "image_grid_thw", "image_sizes", "attention_mask"} <= set(inputs)
    assert list(inputs["pixel_values"].dims) == [-1, -1, -1, -1]
    assert {"OUT_PROMPT_EMBEDDING_TABLE", "OUT_PROMPT_VOCAB_SIZE", "MROPE_ROTARY_COS_SIN", "MROPE_POSITION_DELTAS"} <= (
        names(cfg.output)
    )
    # Neither our item identities nor placeholders: its KV reuse ids come from its own preprocessing.
    assert not {"mm_hashes", "mm_placeholders"} & set(inputs)


def test_multimodal_ensemble_feeds_the_encoder_from_its_own_preprocessing():
    cfg = parse("multimodal_ensemble.config.pbtxt")
    steps = {s.model_name: s for s in cfg.ensemble_scheduling.step}
    assert list(steps) == ["preprocessing", "multimodal_encoders", "tensorrt_llm", "postprocessing"]
    assert steps["preprocessing"].output_map["PIXEL_VALUES"] == steps["multimodal_encoders"].input_map["pixel_values"]
    enc_out = {v: k for k, v in steps["multimodal_encoders"].output_map.items()}
    trt_in = steps["tensorrt_llm"].input_map
    assert enc_out[trt_in["prompt_embedding_table"]] == "OUT_PROMPT_EMBEDDING_TABLE"
    assert enc_out[trt_in["mrope_rotary_cos_sin"]] == "MROPE_ROTARY_COS_SIN"
    # Clients send images or URLs; no processed tensor enters the ensemble from outside.
    assert not {"pixel_values", "image_grid_thw"} & names(cfg.input)


def test_llmapi_model_takes_text_and_image_urls_only():
    cfg = parse("llmapi_tensorrt_llm.config.pbtxt")
    assert (cfg.name, cfg.backend) == ("tensorrt_llm", "python")
    inputs = {t.name: t for t in cfg.input}
    from tritonclient.grpc import model_config_pb2

    string = model_config_pb2.DataType.Value("TYPE_STRING")
    assert inputs["text_input"].data_type == string and not inputs["text_input"].optional
    assert inputs["image_url"].data_type == string and inputs["image_url"].optional
    assert "triton_config.multimodal" in (FOLDER / "llmapi_tensorrt_llm.config.pbtxt").read_text()
    # No token ids, no prompt table, no processed image: nothing our ensembles could hand it.
    assert not {"input_ids", "input_lengths", "prompt_embedding_table"} & set(inputs)
    assert not OURS & set(inputs)


def test_no_upstream_model_declares_our_image_tensors():
    upstream = {n for side in ("inputs", "outputs") for n in (t["name"] for t in INTERFACE["tensorrt_llm"][side])}
    for name in ("llmapi_tensorrt_llm.config.pbtxt", "multimodal_ensemble.config.pbtxt"):
        cfg = parse(name)
        upstream |= names(cfg.input) | names(cfg.output)
    assert not OURS & upstream
    # ``multimodal_encoders`` alone shares names with us, and it is the end-of-life model above;
    # its pixel_values are FP16 and per-batch-row, ours vLLM's (FP32 patches, one row per item).
    enc = {t.name: t for t in parse("multimodal_encoders.config.pbtxt").input}
    assert OURS & set(enc) == {"pixel_values", "image_grid_thw", "image_sizes"}
    assert ENGINE_IMAGE_INPUTS["pixel_values"].dtype == "TYPE_FP32"


@pytest.mark.parametrize(
    "name", ["prompt_embedding_table", "prompt_vocab_size", "mrope_rotary_cos_sin", "mrope_position_deltas"]
)
def test_tensorrt_llm_takes_images_as_embeddings(name):
    assert name in {t["name"] for t in INTERFACE["tensorrt_llm"]["inputs"]}
