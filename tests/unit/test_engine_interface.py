"""The engine seam is TensorRT-LLM's: every tensor checked against the upstream listing.

``fixtures/trtllm/interface.json`` records every input and output of TensorRT-LLM's
``tensorrt_llm`` and ``ensemble`` models at the upstream commit it names (made by
``fixtures/trtllm/make_interface.py`` from the upstream configs). Here, with no server:

- the one table of engine tensors (``renderer/engine_tensors.py``) agrees with it;
- every ``config.pbtxt`` that declares engine tensors (the stand-in ``llm`` and its variants,
  ``llm_enc_dec``, the post-processing models that forward them, the parameter models that make
  them) declares each one exactly as TensorRT-LLM does;
- the ``ensemble`` front declares exactly TensorRT-LLM's ``ensemble`` inputs;
- the ensembles wire only tensors that exist on both sides of each step.

``test_engine_live.py`` then has Triton itself load the ensembles against an engine folder named
``tensorrt_llm`` whose config is generated from the same listing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from renderer.engine_tensors import (
    ENGINE_IMAGE_INPUTS,
    ENGINE_INPUTS,
    ENGINE_OUTPUTS,
    FORWARDED,
    POSTPROCESS_INPUTS,
    decode_word_list,
    encode_word_list,
    prompt_rows,
    prompt_table_tensors,
)
from renderer.errors import EmbedsError, InvalidParamsError, TensorShapeError

ROOT = Path(__file__).resolve().parents[2]
REPO = ROOT / "model_repository"
FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "trtllm" / "interface.json").read_text())
TRT_IN = {t["name"]: t for t in FIXTURE["tensorrt_llm"]["inputs"]}
TRT_OUT = {t["name"]: t for t in FIXTURE["tensorrt_llm"]["outputs"]}
ENS_IN = {t["name"]: t for t in FIXTURE["ensemble"]["inputs"]}


# The image family a ``config.multimodal.pbtxt`` is rendered for here (any one: the checks below
# hold for every family).
MULTIMODAL_FAMILY = "qwen2_vl"


def parse_config(path: Path, family: str | None = None):
    """A config template parsed with Triton's own protobuf schema, rendered as the launcher renders
    it for ``family`` (placeholders filled, a Python model's tensors written from its table)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    from launcher.repository import render_config, template_vars
    from launcher.settings import Settings

    values = template_vars(Settings(mm_instance_kind="KIND_CPU"), family)
    text = render_config(path, path.parent.name, values, family)
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def tensors(items) -> dict[str, tuple[str, list[int]]]:
    from tritonclient.grpc import model_config_pb2

    return {t.name: (model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in items}


def test_fixture_names_its_upstream_commit():
    assert FIXTURE["source"]["repo"] == "triton-inference-server/tensorrtllm_backend"
    assert re.fullmatch(r"[0-9a-f]{40}", FIXTURE["source"]["commit"])
    assert len(TRT_IN) == 60 and len(TRT_OUT) == 19 and len(ENS_IN) == 34


def test_engine_table_is_tensorrt_llms():
    for spec in list(ENGINE_INPUTS.values()):
        up = TRT_IN.get(spec.name)
        assert up is not None, f"{spec.name} is not a tensorrt_llm input"
        assert (spec.dtype, list(spec.dims)) == (up["data_type"], up["dims"]), spec.name
    for spec in ENGINE_OUTPUTS.values():
        up = TRT_OUT[spec.name]
        assert (spec.dtype, list(spec.dims)) == (up["data_type"], up["dims"]), spec.name
    # The extensions are named apart: none of them shadows a TensorRT-LLM tensor.
    assert not set(ENGINE_IMAGE_INPUTS) & (set(TRT_IN) | set(TRT_OUT))
    assert not set(POSTPROCESS_INPUTS) & set(TRT_IN)


ENGINE_CONFIGS = sorted(str(p.relative_to(REPO)) for p in REPO.glob("llm*/config*.pbtxt"))


@pytest.mark.parametrize("name", ENGINE_CONFIGS)
def test_engine_configs_declare_tensorrt_llms_tensors(name):
    cfg = parse_config(REPO / name)
    assert cfg.max_batch_size > 0 and cfg.model_transaction_policy.decoupled
    declared_in = tensors(cfg.input)
    for tname, (dtype, dims) in declared_in.items():
        if tname in ENGINE_IMAGE_INPUTS:
            assert dtype == ENGINE_IMAGE_INPUTS[tname].dtype, tname
            continue
        up = TRT_IN.get(tname)
        assert up is not None, f"{name}: {tname} is not a tensorrt_llm input"
        assert (dtype, dims) == (up["data_type"], up["dims"]), f"{name}: {tname}"
    # Required there means required here, and the other way round.
    for t in cfg.input:
        if t.name in TRT_IN:
            assert t.optional == TRT_IN[t.name]["optional"] or t.name == "decoder_input_ids", f"{name}: {t.name}"
    assert tensors(cfg.output) == {
        n: (t["data_type"], t["dims"]) for n, t in TRT_OUT.items() if n in ("output_ids", "sequence_length")
    }


POST_CONFIGS = sorted(str(p.relative_to(REPO)) for p in REPO.glob("detokenize*/config*.pbtxt"))


@pytest.mark.parametrize("name", POST_CONFIGS)
def test_post_processing_forwards_tensorrt_llms_tensors(name):
    """What ``detokenize`` receives and forwards (or sets) to the engine is typed as TensorRT-LLM types it."""
    cfg = parse_config(REPO / name)
    declared = tensors(cfg.input)
    # Its own: vLLM's output rules, the images, prompt embeddings and chat_render's parsing.
    own = set(POSTPROCESS_INPUTS) | set(ENGINE_IMAGE_INPUTS) | {"input_embeds", "output_parsing"}
    for tname, (dtype, dims) in declared.items():
        if tname in own:
            continue
        up = TRT_IN[tname]
        assert (dtype, dims) == (up["data_type"], up["dims"]), f"{name}: {tname}"
    # Everything it may forward is declared, and is an engine input.
    forwarded = [n for n in FORWARDED if n in declared]
    assert "request_output_len" in forwarded and set(forwarded) <= set(TRT_IN)


@pytest.mark.parametrize("name", ["generation_params/config.pbtxt", "ensemble_params/config.pbtxt"])
def test_parameter_models_emit_tensorrt_llms_tensors(name):
    cfg = parse_config(REPO / name)
    for tname, (dtype, dims) in tensors(cfg.output).items():
        spec = ENGINE_INPUTS.get(tname) or POSTPROCESS_INPUTS[tname]
        assert (dtype, dims) == (spec.dtype, list(spec.dims)), f"{name}: {tname}"


def test_ensemble_front_is_tensorrt_llms_ensemble():
    cfg = parse_config(REPO / "ensemble" / "config.pbtxt")
    assert cfg.name == "ensemble" and cfg.max_batch_size > 0
    assert [t.name for t in cfg.input] == list(ENS_IN)
    for t in cfg.input:
        up = ENS_IN[t.name]
        assert (tensors([t])[t.name], t.optional) == ((up["data_type"], up["dims"]), up["optional"]), t.name
    # Every output upstream declares (its clients ask for them by name), once each, its logits
    # type filled as docs/ENGINES.md fills it.
    logits = {"${logits_datatype}": "TYPE_FP32"}
    up_out = {
        t["name"]: (logits.get(t["data_type"], t["data_type"]), t["dims"]) for t in FIXTURE["ensemble"]["outputs"]
    }
    assert tensors(cfg.output) == up_out
    assert [t.name for t in cfg.output] == list(up_out)
    # Every ensemble input reaches a step (none is accepted and dropped).
    used = {v for step in cfg.ensemble_scheduling.step for v in step.input_map.values()}
    assert set(ENS_IN) <= used


ENSEMBLES = sorted(
    str(p.relative_to(REPO)) for p in REPO.glob("*/config*.pbtxt") if 'platform: "ensemble"' in p.read_text()
)


def _family(variant: str) -> str | None:
    """The family an ensemble variant (``config.pbtxt``, ``config.multimodal.pbtxt``) is checked for."""
    return MULTIMODAL_FAMILY if variant == "config.multimodal.pbtxt" else None


def _model_config(model: str, variant: str):
    from launcher.repository import pick_config

    family = _family(variant)
    return parse_config(pick_config(REPO / model, family), family)


@pytest.mark.parametrize("name", ENSEMBLES)
def test_ensemble_steps_wire_existing_tensors_of_one_type(name):
    """Each step's input_map keys are inputs of that model and output_map keys its outputs;
    an internal tensor has one type wherever it flows (Triton checks this again at load)."""
    variant = Path(name).name
    cfg = parse_config(REPO / name, _family(variant))
    types: dict[str, str] = {t.name: tensors([t])[t.name][0] for t in cfg.input}
    for step in cfg.ensemble_scheduling.step:
        model = _model_config(step.model_name, variant)
        ins, outs = tensors(model.input), tensors(model.output)
        for key, value in step.input_map.items():
            assert key in ins, f"{name}: {key} is not an input of {step.model_name}"
            if value in types:
                assert types[value] == ins[key][0], f"{name}: {value} into {step.model_name}.{key}"
        for key, value in step.output_map.items():
            assert key in outs, f"{name}: {key} is not an output of {step.model_name}"
            types[value] = outs[key][0]


def test_word_list_is_tensorrt_llms_format():
    arr = encode_word_list([[5, 6], [7], []])
    assert arr.dtype == np.int32 and arr.tolist() == [[5, 6, 7], [2, 3, -1]]
    assert decode_word_list(arr) == [(5, 6), (7,)]
    assert encode_word_list([]).tolist() == [[0], [-1]]  # what TensorRT-LLM's preprocessing sends
    assert decode_word_list(encode_word_list([])) == []
    with pytest.raises(TensorShapeError, match=r"shape \[2, L\]") as e:
        decode_word_list(np.zeros((3, 2), np.int32))
    assert e.value.parameter == "stop_words_list"
    with pytest.raises(InvalidParamsError, match="offsets must increase") as e:
        decode_word_list(np.array([[1, 2], [2, 1]], np.int32), "bad_words_list")
    assert e.value.parameter == "bad_words_list"


def test_prompt_table_uses_fake_ids_past_the_vocabulary():
    embeds = np.arange(12, dtype=np.float32).reshape(3, 4) / 8
    t = prompt_table_tensors(embeds, vocab_size=100)
    assert t["input_ids"].tolist() == [100, 101, 102]
    assert t["prompt_vocab_size"].tolist() == [3] and t["input_lengths"].tolist() == [3]
    assert t["prompt_embedding_table"].dtype == np.float16
    assert np.array_equal(t["prompt_embedding_table"].astype(np.float32), embeds)
    rows = prompt_rows([102, 100], t["prompt_embedding_table"], 100)
    assert np.array_equal(rows, t["prompt_embedding_table"][[2, 0]])
    assert prompt_rows([1, 2], t["prompt_embedding_table"], 100) is None
    with pytest.raises(InvalidParamsError, match="mixes vocabulary ids and prompt-table ids"):
        prompt_rows([1, 100], t["prompt_embedding_table"], 100)
    with pytest.raises(InvalidParamsError, match="row 3, but the table has 3 rows"):
        prompt_rows([103], t["prompt_embedding_table"], 100)
    with pytest.raises(EmbedsError, match="FP16 prompt table"):
        prompt_table_tensors(np.full((1, 4), 1e6, np.float32), vocab_size=100)


def test_client_scripts_are_upstreams_unchanged():
    """The TensorRT-LLM client scripts the live test runs are upstream's bytes, at the pinned commit."""
    import hashlib

    folder = ROOT / "tests" / "fixtures" / "trtllm" / "client"
    note = (folder / "README.md").read_text()
    assert FIXTURE["source"]["commit"] in note
    recorded = dict(re.findall(r"^\| `([\w.]+\.py)` \| `[^`]+` \| `([0-9a-f]{64})` \|$", note, re.M))
    assert set(recorded) == {p.name for p in folder.glob("*.py")}
    for name, digest in recorded.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
