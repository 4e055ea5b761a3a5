"""Every Python stage's config declares exactly the tensors ``renderer/stage_tensors.py`` declares
(name, type, dims, optional, ragged), in the repository the launcher renders for a text model and
for each image family; and every ensemble's maps name tensors that exist at both ends, of one type.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fake_triton import parse_config
from tritonclient.grpc import model_config_pb2

from launcher import repository
from launcher.settings import Settings
from renderer.stage_tensors import STAGES, stage_tensors

FAMILIES = [None, "qwen2_vl", "pixtral"]


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
    s = replace(Settings(), build_dir=str(tmp_path_factory.mktemp(f"stage-{family or 'text'}")))
    repo = repository.render_repository(s, family)
    return family, {p.parent.name: parse_config(p) for p in Path(repo).glob("*/config.pbtxt")}


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
    wrong = []
    for name, config in sorted(python.items()):
        table = stage_tensors(name, family)
        wrong += [f"{name} input {d}" for d in _differences(_declared(config.input), _table(table.inputs))]
        wrong += [f"{name} output {d}" for d in _differences(_declared(config.output), _table(table.outputs))]
    assert not wrong, "\n".join(wrong)


def test_every_stage_of_the_table_is_served():
    """No entry for a model that no longer exists."""
    folders = {p.parent.name for p in Path(repository.TEMPLATES).glob("*/config*.pbtxt")}
    assert set(STAGES) <= folders, set(STAGES) - folders


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
