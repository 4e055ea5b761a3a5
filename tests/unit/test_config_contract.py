"""One source of truth per tensor: every model's rendered ``config.pbtxt``.

With no server, every model of the repository the launcher renders (for a text model and for
each image family) runs in-process behind a stand-in of the Python backend's utilities
(``tests/support/fake_triton.py``), and every ensemble is walked step by step as Triton schedules it.
Each response any adapter sends (the engine's, through the post-processor's BLS calls, included)
must carry exactly the outputs its config declares, with the declared data types and shapes, and
each step must receive what its config declares. An adapter whose literal dtype or tensor drifts
from its config fails here, not in a live server.

Also here: the per-family variants of a config come from one template.
"""

from __future__ import annotations

import gc
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.support import fake_triton
from tests.support.fake_triton import ContractError, InferenceResponse, InProcessRepository, Tensor, output_problems
from tests.support.mm_images import data_url, png

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "model_repository"
BUILTIN = {"text": "smollm2", "qwen2_vl": "qwen2-vl", "pixtral": "pixtral"}


def strings(*values: str) -> np.ndarray:
    return np.array([v.encode() for v in values], dtype=np.object_)


def ints(*values: int) -> np.ndarray:
    return np.array(values, np.int32)


def chat_messages(family: str) -> np.ndarray:
    content: list = [{"type": "text", "text": "What is this?"}]
    if family != "text":
        content.insert(0, {"type": "image_url", "image_url": {"url": data_url(png("odd_333x77"))}})
    return strings(json.dumps([{"role": "user", "content": content}]))


def requests_for(family: str) -> dict[str, dict[str, np.ndarray]]:
    """One request to every ensemble the family's repository serves (generation kept to 2
    tokens). An image family runs only the chat ensembles: the others use the same models as
    the text family's run, with the same configs."""
    chats = {
        "render_chat": {"messages": chat_messages(family)},
        "chat": {"messages": chat_messages(family), "max_tokens": ints(2)},
    }
    if family != "text":
        return chats
    return {
        **chats,
        "render_completion": {"prompt": strings("The capital of France is")},
        "completion": {"prompt": strings("The capital of France is"), "max_tokens": ints(2)},
        "ensemble": {"text_input": strings("The capital of France is"), "max_tokens": ints(2)},
        "render_encoder_decoder": {"encoder_prompt": strings("translate this"), "decoder_prompt": strings("Le")},
        "encoder_decoder_completion": {"encoder_prompt": strings("translate this"), "max_tokens": ints(2)},
    }


# What a chat with images reaches: the image family's own configs of these are checked.
IMAGE_PATH = {"chat_render", "tokenize", "mm_process", "generation_params", "detokenize", "llm"}


@pytest.fixture(scope="module")
def stub_backend():
    with fake_triton.installed():
        yield


@pytest.fixture(scope="module", params=list(BUILTIN))
def repository(request, stub_backend, tmp_path_factory):
    """(family, the launcher's rendered repository for the family's built-in model, run in-process)."""
    from launcher import cli as launch

    family = request.param
    s = replace(
        launch.Settings(),
        model=BUILTIN[family],
        build_dir=str(tmp_path_factory.mktemp(f"contract-{family}")),
        mm_instance_kind="KIND_CPU",
        openai_port=0,
        encoder_decoder=True,
    )
    launch.prepare(s)
    repo = InProcessRepository(s.repository)
    yield family, repo
    repo.finalize()
    del repo
    gc.collect()


def test_every_model_answers_as_its_config_declares(repository):
    family, repo = repository
    for ensemble, inputs in requests_for(family).items():
        out = repo.infer(ensemble, inputs)
        assert out, ensemble
    python_models = {name for name, cfg in repo.configs.items() if cfg.backend == "python"}
    if family == "text":
        assert "mm_process" not in python_models
        assert python_models - set(repo.seen) == set(), "models no request reached: nothing was checked for them"
    else:
        assert repo.infer("render_chat", {"messages": chat_messages(family)})["pixel_values"].size > 0
        assert IMAGE_PATH - set(repo.seen) == set(), "models no request reached: nothing was checked for them"


def test_the_check_refuses_a_drift():
    """The check this module relies on catches each kind of drift from a config."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    cfg = text_format.Parse(
        'name: "m" output [ { name: "ids" data_type: TYPE_INT32 dims: [ -1, 2 ] },'
        ' { name: "text" data_type: TYPE_STRING dims: [ 1 ] } ]',
        model_config_pb2.ModelConfig(),
    )

    def problems(**tensors):
        return output_problems(cfg, InferenceResponse([Tensor(k, v) for k, v in tensors.items()]))

    good = {"ids": np.zeros((1, 3, 2), np.int32), "text": np.array([[b"x"]], object)}
    assert problems(**good) == []
    assert "ids is int64" in problems(**{**good, "ids": np.zeros((1, 3, 2), np.int64)})[0]
    assert "its config says [1] + [-1, 2]" in problems(**{**good, "ids": np.zeros((1, 3, 3), np.int32)})[0]
    assert "its config says [1] + [-1, 2]" in problems(**{**good, "ids": np.zeros((1, 6), np.int32)})[0]
    assert "does not declare" in problems(**good, extra=np.zeros((1, 1), np.int32))[0]
    assert problems(ids=good["ids"]) == ["m: does not send its declared output 'text'"]


def test_an_adapter_that_drifts_fails(stub_backend, tmp_path):
    """A config edited away from its adapter (mm_kwargs' type, here via chat_render's text
    config) is caught by walking the ensemble."""
    from launcher import cli as launch

    s = replace(launch.Settings(), build_dir=str(tmp_path), mm_instance_kind="KIND_CPU", openai_port=0)
    launch.prepare(s)
    cfg_path = s.repository / "chat_render" / "config.pbtxt"
    text = cfg_path.read_text()
    drifted = text.replace(
        '{ name: "mm_placeholders" data_type: TYPE_INT32', '{ name: "mm_placeholders" data_type: TYPE_INT64'
    )
    assert drifted != text
    cfg_path.write_text(drifted)
    repo = InProcessRepository(s.repository)
    with pytest.raises(ContractError, match="mm_placeholders is int32, its config says TYPE_INT64"):
        repo.infer("render_chat", {"messages": chat_messages("text")})


def test_vllm_engine_declares_the_stand_ins_tensors(tmp_path):
    """vLLM's engine adapter runs only in vLLM's environment (not here): its config must declare
    exactly the stand-in's tensors, which the in-process run above checks against the adapter."""
    from launcher import cli as launch
    from launcher import repository
    from tests.support.fake_triton import parse_config

    s = replace(launch.Settings(), build_dir=str(tmp_path), mm_instance_kind="KIND_CPU")
    standin = parse_config(repository.render_repository(s) / "llm" / "config.pbtxt")
    vllm = parse_config(repository.render_repository(replace(s, llm_engine="vllm")) / "llm" / "config.pbtxt")
    assert list(vllm.output) == list(standin.output)
    assert list(vllm.input) == list(standin.input)


def test_family_variants_come_from_one_template():
    from renderer.multimodal.tensors import FAMILY_IMAGE_TENSORS

    for model in sorted(p for p in TEMPLATES.iterdir() if p.is_dir()):
        variants = [
            f"config.{family}.pbtxt" for family in FAMILY_IMAGE_TENSORS if (model / f"config.{family}.pbtxt").exists()
        ]
        assert variants == [], (
            f"{model.name}: per-family copies {variants}; use config.multimodal.pbtxt and the family vars"
        )
    for model in ("chat", "render_chat", "mm_process"):
        assert (TEMPLATES / model / "config.multimodal.pbtxt").exists(), model


@pytest.mark.parametrize("device_normalize", [False, True])
@pytest.mark.parametrize("family", ["qwen2_vl", "pixtral"])
def test_one_template_renders_each_familys_image_tensors(tmp_path, family, device_normalize):
    """Every config that carries a family's image tensors declares them as its table does; with
    MM_DEVICE_DO_NORMALIZE, Qwen2-VL's pixel_values are uint8 in all of them (the engine's input
    included) and Pixtral's stay float32, as vLLM treats the two."""
    from tritonclient.grpc import model_config_pb2

    from launcher import cli as launch
    from launcher import repository
    from renderer.multimodal.tensors import image_tensors, raw_pixels
    from tests.support.fake_triton import parse_config

    s = replace(
        launch.Settings(), build_dir=str(tmp_path), mm_instance_kind="KIND_CPU", mm_device_do_normalize=device_normalize
    )
    repo = repository.render_repository(s, family)
    want = {t.name: (t.dtype, list(t.dims)) for t in image_tensors(family, raw_pixels(family, device_normalize))}
    expected = "TYPE_UINT8" if device_normalize and family == "qwen2_vl" else "TYPE_FP32"
    assert want["pixel_values"][0] == expected

    def declared(model: str, kind: str) -> dict:
        config = parse_config(repo / model / "config.pbtxt")
        return {t.name: (model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in getattr(config, kind)}

    for model in ("mm_process", "render_chat"):
        outputs = declared(model, "output")
        assert {n: outputs.get(n) for n in want} == want, model
    for model in ("llm", "detokenize"):
        inputs = declared(model, "input")
        assert {n: inputs.get(n) for n in want} == want, model
    chat = parse_config(repo / "chat" / "config.pbtxt")
    detokenize = next(step for step in chat.ensemble_scheduling.step if step.model_name == "detokenize")
    assert set(want) | {"mm_identifiers", "mm_placeholders"} <= set(detokenize.input_map)


# Settings only an image model's stages read.
IMAGE_ONLY_PARAMETERS = {"limit_mm_per_prompt"}


@pytest.mark.parametrize(
    "model",
    sorted(p.parent.name for p in TEMPLATES.glob("*/config.multimodal.pbtxt") if (p.parent / "config.pbtxt").exists()),
)
def test_a_models_two_configs_take_the_same_parameters(tmp_path, model):
    """A model with a text-only and a multimodal config reads the same settings in either, but
    for the image-only ones: a parameter added to one and not the other would reach that stage
    on one kind of model only."""
    from launcher import cli as launch
    from launcher import repository
    from tests.support.fake_triton import parse_config

    s = replace(launch.Settings(), mm_instance_kind="KIND_CPU")
    text = parse_config(
        repository.render_repository(replace(s, build_dir=str(tmp_path / "text"))) / model / "config.pbtxt"
    )
    image = parse_config(
        repository.render_repository(replace(s, build_dir=str(tmp_path / "image")), "qwen2_vl") / model / "config.pbtxt"
    )
    assert set(text.parameters) == set(image.parameters) - IMAGE_ONLY_PARAMETERS
