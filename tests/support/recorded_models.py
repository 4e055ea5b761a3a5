"""The model folders vLLM's recorded fixtures name, built where missing.

A fixture (``tests/fixtures/vllm/*.json``) names each template's folder under ``build/models``: the
default model, the reference tokenizers and the tiny image models. Each is built offline by its
model builder, which lets concurrent builders (pytest-xdist workers) take turns, so no test relies
on another having built it first.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = "tiny-"


def built(folder: str | Path) -> Path:
    """``folder`` (relative to the repository, as the fixtures write it), built if missing."""
    from model_builders import default_model, reference_tokenizers, vlm_model

    path = ROOT / folder
    models = ROOT / "build" / "models"
    if path.parent == models / "tokenizers":
        reference_tokenizers.build(path.parent)
    elif path.name.startswith(TINY):
        tokenizers = reference_tokenizers.build(models / "tokenizers")
        family = path.name[len(TINY) :]
        vlm_model.build(path, tokenizers[vlm_model.TOKENIZER_OF_FAMILY[family]], family=family)
    elif path.parent == models:
        default_model.build(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{folder}: no builder makes this folder")
    return path


def template_dirs(templates: dict[str, str]) -> dict[str, Path]:
    """A fixture's ``templates`` (name -> folder), each folder built."""
    return {name: built(folder) for name, folder in templates.items()}
