"""One declaration per stage parameter (``renderer/stage_params.py``): the launcher writes every
model's ``parameters`` lines from it, every entry is read by a stage, every setting a stage reads
goes through it, and no template writes one by hand."""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import fields, replace
from pathlib import Path

import pytest

from launcher import repository
from launcher.settings import ENGINES, Settings
from renderer import stage_params as sp

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "model_repository"
KEY_CONSTANTS = {
    n: getattr(sp, n) for n in dir(sp) if n.isupper() and not n.startswith("_") and isinstance(getattr(sp, n), str)
}


def _named_keys(tree: ast.AST) -> set[str]:
    """The parameter keys a piece of code names: ``sp.<CONSTANT>``."""
    return {
        KEY_CONSTANTS[n.attr]
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "sp"
        if n.attr in KEY_CONSTANTS
    }


def _renderer_readers() -> dict[str, set[str]]:
    """Each ``from_config`` reader class under ``renderer/``: the keys it reads, its own and those
    of the readers it calls."""
    own: dict[str, set[str]] = {}
    calls: dict[str, set[str]] = {}
    for path in sorted((ROOT / "renderer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "from_config":
                    own[node.name] = _named_keys(item)
                    calls[node.name] = {
                        c.func.value.id
                        for c in ast.walk(item)
                        if isinstance(c, ast.Call)
                        and isinstance(c.func, ast.Attribute)
                        and c.func.attr == "from_config"
                        if isinstance(c.func.value, ast.Name)
                    }
    out = {}
    for name in own:
        keys, todo, seen = set(own[name]), list(calls[name]), {name}
        while todo:
            callee = todo.pop()
            if callee in own and callee not in seen:
                seen.add(callee)
                keys |= own[callee]
                todo += calls[callee]
        out[name] = keys
    return out


def _model_reads(model: str) -> set[str]:
    """The keys ``model``'s adapter reads: named in its files, or by the ``from_config`` readers it calls."""
    readers = _renderer_readers()
    keys: set[str] = set()
    for path in sorted((TEMPLATES / model / "1").glob("*.py")):
        text = path.read_text()
        keys |= _named_keys(ast.parse(text))
        keys |= {k for name, ks in readers.items() if re.search(rf"\b{name}\.from_config\(", text) for k in ks}
    return keys


@pytest.mark.parametrize("model", sorted(sp.parameter_models()))
def test_every_parameter_a_model_carries_is_read_by_it(model):
    carried = {p.key for p in sp.STAGE_PARAMS if any(m.split(":")[0] == model for m in p.models)}
    # Triton's Python backend reads EXECUTION_ENV_PATH (the stub's environment), and vllm_model.py
    # reads project_root by its literal, before the project is on its path.
    elsewhere = {sp.EXECUTION_ENV_PATH, sp.PROJECT_ROOT} if model == "llm" else set()
    assert carried - _model_reads(model) - elsewhere == set()


def test_every_key_constant_is_a_table_entry_and_entries_are_one_per_model():
    assert set(KEY_CONSTANTS.values()) == {p.key for p in sp.STAGE_PARAMS}
    for model in sp.parameter_models():
        for variant in ("", "multimodal", "vllm"):
            keys = [p.key for p in sp.stage_params(model, variant)]
            assert len(keys) == len(set(keys)), (model, variant, keys)


def test_every_value_comes_from_the_settings_or_the_launchers_computed_values(monkeypatch, tmp_path):
    s = replace(Settings(), build_dir=str(tmp_path))
    sources = {p.value_name for p in sp.STAGE_PARAMS if p.literal is None}
    computed = repository.computed_values(s, "qwen2_vl")
    assert set(computed) == sp.COMPUTED
    assert sp.COMPUTED <= sources, "a computed value no parameter carries"
    assert not [c for c in sp.COMPUTED if hasattr(s, c)], "a computed value that hides a setting"
    assert not [n for n in sources - sp.COMPUTED if not hasattr(s, n)], "a source that is no setting"


# What template_vars takes from the settings: the repository's shape, which no stage reads.
SHAPE_SETTINGS = {
    "tokenize_instances",
    "chat_render_instances",
    "llm_instances",
    "llm_decoupled",
    "max_batch_size",
    "max_queue_delay_us",
    "mm_instance_kind",
}


def test_every_setting_a_stage_reads_is_in_the_table():
    """A setting reaches a stage only as a table entry: ``template_vars`` itself reads only the
    repository's shape, and every other setting it or ``computed_values`` reads is a source."""
    settings = {f.name for f in fields(Settings)}

    def read(fn) -> set[str]:
        tree = ast.parse(inspect.getsource(fn).lstrip())
        return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}

    template = {
        a.removeprefix("resolved_") for a in read(repository.template_vars) if a.removeprefix("resolved_") in settings
    }
    assert template <= SHAPE_SETTINGS
    sources = {p.value_name.removeprefix("resolved_") for p in sp.STAGE_PARAMS}
    # Settings a stage reads under a key of its own name: each is the source of that key's entry.
    assert {p.key for p in sp.STAGE_PARAMS} & settings <= sources
    assert not SHAPE_SETTINGS & sources


def test_no_template_writes_a_parameter_by_hand():
    for path in sorted(TEMPLATES.glob("*/config*.pbtxt")):
        text = path.read_text()
        assert not re.search(r"^\s*parameters\s*\{", text, re.M), path
        variant = path.name.removeprefix("config").removesuffix(".pbtxt").removeprefix(".")
        assert ("${parameters}" in text) == bool(sp.stage_params(path.parent.name, variant)), path


CASES = {
    "text": ({"encoder_decoder": True}, None),
    "text_vllm": ({"llm_engine": "vllm"}, None),
    "qwen2_vl": ({}, "qwen2_vl"),
    "pixtral_vllm": ({"llm_engine": "vllm"}, "pixtral"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_configs_carry_exactly_the_tables_parameters(case, tmp_path):
    from tests.support.fake_triton import parse_config

    changes, family = CASES[case]
    s = replace(Settings(), mm_instance_kind="KIND_CPU", build_dir=str(tmp_path), **changes)
    repo = repository.render_repository(s, family)
    values = repository.parameter_values(s, family)
    assert repo.joinpath("llm").is_dir()
    for config in sorted(repo.glob("*/config.pbtxt")):
        model = config.parent.name
        template = repository.pick_config(TEMPLATES / model, family)
        if model == "llm":
            template = TEMPLATES / "llm" / ENGINES[s.llm_engine].config
        variant = template.name.removeprefix("config").removesuffix(".pbtxt").removeprefix(".")
        want = {
            p.key: p.literal if p.literal is not None else values[p.value_name] for p in sp.stage_params(model, variant)
        }
        got = {k: v.string_value for k, v in parse_config(config).parameters.items()}
        assert got == want, model
