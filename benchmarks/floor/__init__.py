"""The Triton floor: ``tokenize`` and ``chat_render`` stand-ins that do no rendering work.

``make bench`` serves the same ensembles with these two ``model.py`` files in place of the real
ones (same configs, instances and batching) to measure what Triton and the Python backend cost
per request on this machine: each reads its inputs and answers fixed tensors of realistic size.
No server can beat this floor by making the renderer faster; the gap between ours and it is
all the renderer's own work.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
STAGES = ("tokenize", "chat_render")
"""The stages that have a stand-in here."""

PLACEHOLDER_IDS = tuple(range(1, 201))
"""The ids the ``tokenize`` stand-in answers for every prompt: what the load generator checks the
floor's responses against, so it parses and compares them as it does ours."""


def repository_with_stand_ins(dst: Path, replaced: tuple[str, ...] = STAGES) -> Path:
    """A copy of ``model_repository/`` at ``dst`` with the ``replaced`` stages' ``model.py``
    swapped for their stand-ins (every config unchanged); returns ``dst``."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(ROOT / "model_repository", dst, ignore=shutil.ignore_patterns("__pycache__"))
    for name in replaced:
        shutil.copy(Path(__file__).parent / f"{name}.py", dst / name / "1" / "model.py")
    return dst
