"""Every Python stage's tensors come from ``renderer/stage_tensors.py`` only: no committed config
template declares them by hand, and the repository the launcher renders (for a text model with the
encoder-decoder models, and for each image family) carries exactly the tables' tensors (name, type,
dims, optional, ragged), each one's ``doc`` as a comment; every ensemble's maps (written by hand)
name tensors that exist at both ends, of one type.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from fake_triton import parse_config
from tritonclient.grpc import model_config_pb2

from launcher import repository
from launcher.settings import Settings
from renderer.stage_tensors import STAGES, stage_tensors

FAMILIES = [None, "qwen2_vl", "pixtral"]

PYTHON_TEMPLATES = sorted(
    str(p.relative_to(repository.TEMPLATES))
    for p in repository.TEMPLATES.glob("*/config*.pbtxt")
    if 'backend: "python"' in p.read_text()
)


def _declared(tensors) -> dict[str, tuple]:
    return {
        t.name: (
            model_config_pb2.DataType.Name(t.data_type),
            tuple(t.dims),
            bool(getattr(t, "optional", False)),
            bool(getattr(t, "allow_ragged_batch", False)),
        )
        for t in tensors
    }


def _table(specs) -> dict[str, tuple]:
    return {s.name: (s.dtype, s.dims, s.optional, s.ragged) for s in specs}


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda f: f or "text")
def rendered(request, tmp_path_factory) -> tuple[str | None, dict[str, object]]:
    family = request.param
    s = replace(Settings(), build_dir=str(tmp_path_factory.mktemp(f"stage-{family or 'text'}")), encoder_decoder=True)
    repo = repository.render_repository(s, family)
    return family, {p.parent.name: parse_config(p) for p in Path(repo).glob("*/config.pbtxt")}


@pytest.mark.parametrize("name", PYTHON_TEMPLATES)
def test_no_python_template_declares_its_tensors_by_hand(name):
    """A Python model's ``input`` / ``output`` blocks are written from its table (``${tensors}``),
    so a hand-written one could only drift from it."""
    text = (repository.TEMPLATES / name).read_text()
    assert not re.search(r"^\s*(input|output)\s*\[", text, re.M), f"{name} declares tensors by hand"
    assert "${tensors}" in text, name


def test_a_python_template_without_its_tensors_is_refused(tmp_path):
    """Rendering stops, naming the template, rather than serving a stage without its tensors."""
    template = tmp_path / "tokenize" / "config.pbtxt"
    template.parent.mkdir()
    template.write_text('name: "tokenize"\nbackend: "python"\n')
    with pytest.raises(ValueError, match=r"declares no \$\{tensors\}"):
        repository.render_config(template, "tokenize", {}, None)


def _differences(declared: dict[str, tuple], table: dict[str, tuple]) -> list[str]:
    out = [f"{n}: config only" for n in declared.keys() - table.keys()]
    out += [f"{n}: table only" for n in table.keys() - declared.keys()]
    out += [
        f"{n}: config {declared[n]} != table {table[n]}"
        for n in declared.keys() & table.keys()
        if declared[n] != table[n]
    ]
    return sorted(out)


def test_every_python_stage_declares_the_tables_tensors(rendered):
    family, configs = rendered
    python = {name: c for name, c in configs.items() if c.backend == "python"}
    assert python, "no Python model rendered"
    assert {"tokenize_enc_dec", "llm_enc_dec", "detokenize_enc_dec"} <= set(python)
    wrong = []
    for name, config in sorted(python.items()):
        table = stage_tensors(name, family)
        wrong += [f"{name} input {d}" for d in _differences(_declared(config.input), _table(table.inputs))]
        wrong += [f"{name} output {d}" for d in _differences(_declared(config.output), _table(table.outputs))]
        # In the table's order too: the config is written from it.
        assert [t.name for t in config.input] == [t.name for t in table.inputs], name
        assert [t.name for t in config.output] == [t.name for t in table.outputs], name
    assert not wrong, "\n".join(wrong)


def test_every_tensors_doc_is_a_comment_of_the_rendered_config(rendered, tmp_path):
    """A reader of the rendered ``config.pbtxt`` sees why each tensor is there."""
    family, configs = rendered
    s = replace(Settings(), build_dir=str(tmp_path), encoder_decoder=True)
    values = repository.template_vars(s, family)
    missing = []
    for name in sorted(n for n, c in configs.items() if c.backend == "python"):
        template = repository.pick_config(repository.TEMPLATES / name, family)
        if name == "llm":
            template = repository.TEMPLATES / "llm" / "config.pbtxt"
        text = repository.render_config(template, name, values, family)
        comments = " ".join(
            line.strip().removeprefix("#").strip() for line in text.splitlines() if line.strip().startswith("#")
        )
        table = stage_tensors(name, family)
        for t in (*table.inputs, *table.outputs):
            for paragraph in t.doc.splitlines():
                if " ".join(paragraph.split()) not in comments:
                    missing.append(f"{name}.{t.name}: {paragraph!r}")
    assert not missing, "\n".join(missing)


def test_every_stage_of_the_table_is_served():
    """No entry for a model that no longer exists, and a table for every Python model."""
    folders = {p.parent.name for p in Path(repository.TEMPLATES).glob("*/config*.pbtxt")}
    assert set(STAGES) <= folders, set(STAGES) - folders
    python = {Path(name).parent.name for name in PYTHON_TEMPLATES}
    assert python - {"mm_process"} == set(STAGES), python ^ set(STAGES)


def test_every_ensemble_map_joins_tensors_of_one_type(rendered):
    family, configs = rendered
    wrong = []
    for name, ens in sorted(configs.items()):
        if ens.platform != "ensemble":
            continue
        # What each name carries in this ensemble: its own inputs, then each step's outputs.
        types = {t.name: model_config_pb2.DataType.Name(t.data_type) for t in ens.input}
        for step in ens.ensemble_scheduling.step:
            model = configs[step.model_name]
            ins = _declared(model.input)
            outs = _declared(model.output)
            for key, value in step.input_map.items():
                if key not in ins:
                    wrong.append(f"{name}: {step.model_name} has no input {key!r}")
                elif value not in types:
                    wrong.append(f"{name}: {value!r} feeds {step.model_name} before any step makes it")
                elif types[value] != ins[key][0]:
                    wrong.append(f"{name}: {value!r} is {types[value]}, {step.model_name}.{key} takes {ins[key][0]}")
            for key, value in step.output_map.items():
                if key not in outs:
                    wrong.append(f"{name}: {step.model_name} has no output {key!r}")
                else:
                    types.setdefault(value, outs[key][0])
                    if types[value] != outs[key][0]:
                        wrong.append(f"{name}: {value!r} is {types[value]} and {step.model_name}.{key} {outs[key][0]}")
        for t in ens.output:
            want = model_config_pb2.DataType.Name(t.data_type)
            if types.get(t.name) != want:
                wrong.append(f"{name}: output {t.name!r} is declared {want}, made {types.get(t.name)}")
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_a_drift(rendered):
    """The comparison this module relies on notices a changed type and a missing name."""
    family, _ = rendered
    table = _table(stage_tensors("tokenize", family).outputs)
    drifted = dict(table)
    drifted["input_ids"] = ("TYPE_INT64",) + table["input_ids"][1:]
    del drifted["length_limit"]
    assert _differences(drifted, table) == [
        "input_ids: config ('TYPE_INT64', (-1,), False, False) != table ('TYPE_INT32', (-1,), False, False)",
        "length_limit: table only",
    ]


# --- tensors made once and sent by many responses (triton_io.tensors.StageOutputs) --------------


def test_constant_and_shared_outputs_are_made_once_and_typed_by_the_table():
    import numpy as np
    from fake_triton import installed

    with installed():
        from triton_io import tensors as io

        out = io.StageOutputs("tokenize")
        empty = out.empty("token_offsets", (0, 2))
        first = out.constant("token_offsets", empty)
        assert out.constant("token_offsets", empty) is first
        assert first.as_numpy().shape == (1, 0, 2) and first.as_numpy().dtype == np.int32
        # Another array of the same output is another constant, never the first one's tensor.
        other = out.empty("token_offsets", (0, 2))
        assert out.constant("token_offsets", other) is not first
        seven = out.shared("input_lengths", 7)
        assert out.shared("input_lengths", 7) is seven and out.shared("input_lengths", 8) is not seven
        assert seven.as_numpy().tolist() == [[7]] and seven.as_numpy().dtype == np.int32
        big = io.SHARED_VALUES + 1
        assert out.shared("input_lengths", big) is not out.shared("input_lengths", big)  # not kept
        assert out.shared("input_lengths", big).as_numpy().tolist() == [[big]]


def test_the_tensors_made_once_are_freed_before_the_stubs_teardown():
    """The 2.51 stub segfaults at its stop when a backend tensor outlives ``finalize``."""
    from fake_triton import installed

    with installed():
        from triton_io import tensors as io

        out = io.StageOutputs("tokenize")
        empty = out.empty("token_offsets", (0, 2))
        first, seven = out.constant("token_offsets", empty), out.shared("input_lengths", 7)
        io.release_before_teardown()
        assert out.constant("token_offsets", empty) is not first
        assert out.shared("input_lengths", 7) is not seven


def test_echo_sends_a_bytes_input_back_as_it_came_and_nothing_else():
    import numpy as np
    from fake_triton import installed

    with installed():
        from triton_io import tensors as io

        out = io.StageOutputs("tokenize")
        arr = np.array([b"caf\xc3\xa9"], dtype=np.object_)  # an input as ``io.get`` returns it
        sent = out.echo("rendered_prompt", arr).as_numpy()
        assert sent.shape == (1, 1) and sent.tolist() == [[b"caf\xc3\xa9"]]
        with pytest.raises(TypeError, match="input_ids"):
            out.echo("input_ids", arr)  # an INT32 output
        with pytest.raises(TypeError, match="int32"):
            out.echo("rendered_prompt", np.array([1], dtype=np.int32))
