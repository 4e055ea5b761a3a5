"""The benchmark's floor stand-ins answer exactly the outputs of the models they replace.

``make bench`` swaps ``tokenize`` / ``chat_render`` for ``benchmarks/floor`` to measure Triton's
own per-request cost; if a stage gains or renames an output, a stale stand-in would fail every
floor request (or measure less work than the contract). This keeps them in step without a server.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def config_outputs(model: str, family: str | None = None) -> set[str]:
    """The outputs ``model``'s rendered config declares (its stage table) for ``family``."""
    from renderer.stage_tensors import stage_tensors

    return {t.name for t in stage_tensors(model, family).outputs}


def stand_in_outputs(module: str) -> set[str]:
    tree = ast.parse((ROOT / "benchmarks" / "floor" / f"{module}.py").read_text())
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "Tensor"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


@pytest.mark.parametrize("model", ["tokenize", "chat_render"])
def test_floor_stand_in_answers_every_output_of_the_real_model(model):
    want = config_outputs(model)
    assert want, f"no outputs declared for {model}"
    assert stand_in_outputs(model) == want


def test_image_floor_chat_render_answers_every_output_of_the_multimodal_config():
    """``benchmarks.image_floor``'s ``chat_render`` stand-in serves the multimodal ensemble."""
    want = config_outputs("chat_render", "qwen2_vl")
    assert {"mm_items", "mm_data", "mm_kwargs"} <= want
    assert stand_in_outputs("mm_chat_render") == want


def test_image_floor_recorded_answers_round_trip_with_their_keys(tmp_path):
    """The image stand-ins answer what ``write_recorded`` saved, per chat length, BYTES included."""
    import numpy as np

    from benchmarks.floor import RECORDED, read_recorded, write_recorded

    recorded = {
        1_090_123: {
            "rendered_prompt": np.array([b"<|vision_start|><|image_pad|>"], dtype=np.object_),
            "mm_hashes": np.array([b"ab" * 32], dtype=np.object_),
            "pixel_values": np.arange(12, dtype=np.float32).reshape(3, 4),
            "image_grid_thw": np.array([[1, 2, 3]], dtype=np.int64),
        },
        77: {"input_ids": np.array([1, 2, 3], dtype=np.int32)},
    }
    write_recorded(tmp_path / RECORDED, recorded)
    back = read_recorded(str(tmp_path / "model.py"))
    assert set(back) == set(recorded)
    for key, arrays in recorded.items():
        assert set(back[key]) == set(arrays)
        for name, a in arrays.items():
            assert back[key][name].dtype == a.dtype and np.array_equal(back[key][name], a), (key, name)


def test_image_floor_replaces_the_three_stages(tmp_path):
    from benchmarks.floor import IMAGE_STAND_INS, repository_with_stand_ins

    dst = repository_with_stand_ins(tmp_path / "repo", IMAGE_STAND_INS)
    for stage, module in IMAGE_STAND_INS.items():
        assert (dst / stage / "1" / "model.py").read_text() == (
            ROOT / "benchmarks" / "floor" / f"{module}.py"
        ).read_text()
    assert (dst / "mm_process" / "config.multimodal.pbtxt").exists()


def test_floor_templates_replace_only_the_two_stages(tmp_path, monkeypatch):
    from benchmarks import servers

    monkeypatch.setattr(servers, "WORK", tmp_path)
    dst = servers.floor_templates()
    for model in ("tokenize", "chat_render"):
        assert (dst / model / "1" / "model.py").read_text() == (
            ROOT / "benchmarks" / "floor" / f"{model}.py"
        ).read_text()
    assert (dst / "render_chat" / "config.pbtxt").read_text() == (
        ROOT / "model_repository" / "render_chat" / "config.pbtxt"
    ).read_text()
    assert (dst / "detokenize" / "1" / "model.py").read_text() == (
        ROOT / "model_repository" / "detokenize" / "1" / "model.py"
    ).read_text()


@pytest.mark.parametrize("replaced", [("chat_render",), ("tokenize",)])
def test_a_half_floor_replaces_one_stage_and_keeps_the_other_real(tmp_path, replaced):
    """A half floor: the stages named are their stand-ins, the other stays the real one."""
    from benchmarks.floor import STAGES, repository_with_stand_ins

    dst = repository_with_stand_ins(tmp_path / "repo", replaced)
    for model in STAGES:
        source = (
            ROOT / "benchmarks" / "floor" / f"{model}.py"
            if model in replaced
            else ROOT / "model_repository" / model / "1" / "model.py"
        )
        assert (dst / model / "1" / "model.py").read_text() == source.read_text(), model


def test_floor_server_is_rendered_from_the_stand_in_repository(tmp_path, monkeypatch):
    """``start_on`` must swap the templates where the launcher reads them: after the launcher's
    layout split, patching the wrong module left the floor unable to start at all."""
    from benchmarks import servers
    from benchmarks.floor import repository_with_stand_ins
    from launcher import cli as launch
    from launcher import repository

    s = servers.server_settings(build_dir=str(tmp_path / "server"), models="render_chat")
    monkeypatch.setattr(servers, "floor_templates", lambda: repository_with_stand_ins(tmp_path / "templates"))
    monkeypatch.setattr(launch, "start", lambda settings: repository.render_repository(settings) and 0)
    assert servers.start_floor(s)
    served = (s.repository / "chat_render" / "1" / "model.py").read_text()
    assert served == (ROOT / "benchmarks" / "floor" / "chat_render.py").read_text()
