"""A Triton model folder named ``tensorrt_llm`` with the config TensorRT-LLM's upstream repository
declares (every input and output of ``tests/fixtures/trtllm/interface.json``), served by a Python
``model.py`` of the test's choosing: how the live tests put an engine behind ``ENGINE_MODEL_DIR``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INTERFACE = json.loads((ROOT / "tests" / "fixtures" / "trtllm" / "interface.json").read_text())


def trtllm_config(model_dir: Path) -> str:
    """``tensorrt_llm``'s config as upstream declares it, its ``model_dir`` parameter ``model_dir``."""
    fill = {"${logits_datatype}": "TYPE_FP32", "${encoder_input_features_data_type}": "TYPE_FP16"}

    def tensor(t: dict, is_input: bool) -> str:
        s = f'  {{ name: "{t["name"]}" data_type: {fill.get(t["data_type"], t["data_type"])} dims: {t["dims"]}'
        if is_input and t["optional"]:
            s += " optional: true"
        if is_input and t["ragged"]:
            s += " allow_ragged_batch: true"
        return s + " }"

    ins = ",\n".join(tensor(t, True) for t in INTERFACE["tensorrt_llm"]["inputs"])
    outs = ",\n".join(tensor(t, False) for t in INTERFACE["tensorrt_llm"]["outputs"])
    return (
        f'name: "tensorrt_llm"\nbackend: "python"\nmax_batch_size: 64\n'
        f"model_transaction_policy {{ decoupled: true }}\ninput [\n{ins}\n]\noutput [\n{outs}\n]\n"
        f"instance_group [ {{ count: 1 kind: KIND_CPU }} ]\n"
        f'parameters {{ key: "model_dir" value: {{ string_value: "{model_dir}" }} }}\n'
    )


def engine_folder(parent: Path, model_dir: Path, model_py: Path) -> Path:
    """``parent/tensorrt_llm``: the upstream config over ``model_dir``, served by ``model_py``."""
    engine = parent / "tensorrt_llm"
    (engine / "1").mkdir(parents=True)
    (engine / "config.pbtxt").write_text(trtllm_config(model_dir))
    shutil.copy(model_py, engine / "1" / "model.py")
    return engine
