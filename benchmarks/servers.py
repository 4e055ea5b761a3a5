"""The servers a benchmark starts: ``make bench``'s settings, and a server on other model-repository
templates (the floor's stand-in stages). Every benchmark that serves takes them from here, so none
imports the runner (``run.py``), which imports them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from benchmarks.layout import BUILD, GRPC_PORT, HTTP_PORT, METRICS_PORT, WORK


def server_settings(**overrides: Any) -> Any:
    from launcher import cli as launch

    base = launch.Settings.from_env()
    fields = dict(
        http_port=HTTP_PORT,
        grpc_port=GRPC_PORT,
        metrics_port=METRICS_PORT,
        openai_port=0,
        build_dir=str(WORK / "server"),
        models_dir=str(BUILD / "models"),
        models="render_completion,render_chat,chat",
    )
    fields.update(overrides)
    return dataclasses.replace(base, **fields)


def floor_templates() -> Path:
    """``model_repository/`` with ``tokenize`` and ``chat_render`` replaced by ``benchmarks/floor``."""
    from benchmarks.floor import repository_with_stand_ins

    return repository_with_stand_ins(WORK / "floor-templates")


def start_on(s: Any, templates: Path) -> bool:
    """Start a server with settings ``s`` on the model-repository templates ``templates`` (the
    launcher fills ``launcher.repository.TEMPLATES``); True when it is ready."""
    from unittest import mock

    from launcher import cli as launch
    from launcher import repository

    with mock.patch.object(repository, "TEMPLATES", templates):
        return launch.start(s) == 0


def start_floor(s: Any) -> bool:
    """Start a server with settings ``s`` on the floor's model repository; True when it is ready."""
    return start_on(s, floor_templates())
