"""The Triton floor: ``tokenize`` and ``chat_render`` stand-ins that do no rendering work (and, for
``benchmarks.image_floor``, ``chat_render`` and ``mm_process`` stand-ins for one-image chats).

``make bench`` serves the same ensembles with these two ``model.py`` files in place of the real
ones (same configs, instances and batching) to measure what Triton and the Python backend cost
per request on this machine: each reads its inputs and answers fixed tensors of realistic size.
No server can beat this floor by making the renderer faster; the gap between ours and it is
all the renderer's own work.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

ROOT = Path(__file__).resolve().parent.parent.parent
STAGES = ("tokenize", "chat_render")
"""The stages that have a stand-in here."""

PLACEHOLDER_IDS = tuple(range(1, 201))
"""The ids the ``tokenize`` stand-in answers for every prompt: what the load generator checks the
floor's responses against, so it parses and compares them as it does ours."""


IMAGE_STAND_INS = {"chat_render": "mm_chat_render", "tokenize": "tokenize", "mm_process": "mm_process"}
"""Stage -> stand-in module for the image floor (``benchmarks.image_floor``)."""

RECORDED = "recorded.npz"
"""The image stand-ins' answers, next to their ``model.py`` (``write_recorded``)."""


def repository_with_stand_ins(dst: Path, replaced: Iterable[str] | Mapping[str, str] = STAGES) -> Path:
    """A copy of ``model_repository/`` at ``dst`` with the ``replaced`` stages' ``model.py``
    swapped for their stand-ins (every config unchanged); returns ``dst``. ``replaced`` names the
    stages (each stand-in module named as its stage) or maps each stage to its stand-in module."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(ROOT / "model_repository", dst, ignore=shutil.ignore_patterns("__pycache__"))
    modules = replaced if isinstance(replaced, Mapping) else {name: name for name in replaced}
    for name, module in modules.items():
        shutil.copy(Path(__file__).parent / f"{module}.py", dst / name / "1" / "model.py")
    return dst


def write_recorded(path: Path, recorded: dict[int, dict[str, np.ndarray]]) -> None:
    """Save real ``render_chat`` outputs (batch dimension removed), keyed by the length of the
    chat's ``messages`` text, for the image stand-ins."""
    np.savez(path, **{f"{key}.{name}": a for key, arrays in recorded.items() for name, a in arrays.items()})


def read_recorded(model_py: str) -> dict[int, dict[str, np.ndarray]]:
    """``write_recorded``'s answers from the stand-in's own version folder."""
    out: dict[int, dict[str, np.ndarray]] = {}
    with np.load(Path(model_py).parent / RECORDED, allow_pickle=True) as z:  # our own file: BYTES outputs
        for member in z.files:
            key, name = member.split(".", 1)
            out.setdefault(int(key), {})[name] = z[member]
    return out
