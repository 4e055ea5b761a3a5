"""Live servers for the chat tests on templates other than the default model's.

``start_chat_server`` starts a ``render_chat``-only tritonserver for one template: the Qwen3 and
Mistral test tokenizers (served as render-only model folders) or the tiny Qwen2-VL model. Each
template has its own port block (``tests/support/ports.py``): its HTTP port, then gRPC and metrics
on the next two.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"


def port(name: str) -> int:
    """The HTTP port of ``name``'s server (gRPC and metrics take the next two)."""
    from ports import port as block_port

    return block_port(f"chat_{name}")


def tokenizer_dirs(model_dir: Path) -> dict[str, Path]:
    """Template name -> folder: the default model and the test tokenizers (built if missing)."""
    from model_builders.reference_tokenizers import build

    return {"smollm2": Path(model_dir), **build(BUILD / "models" / "tokenizers")}


def render_only_model_dir(tok_dir: Path, dst: Path) -> Path:
    """A render-only model folder: the tokenizer plus a config naming a context length."""
    shutil.copytree(tok_dir, dst)
    (dst / "config.json").write_text(json.dumps({"model_type": "render-only", "max_position_embeddings": 32768}))
    return dst


def start_chat_server(base: Any, name: str, model_dir: Path, tmp: Path, **settings: Any) -> Any:
    """Start a ``render_chat`` server for ``model_dir`` on ``name``'s ports; returns its settings
    (stop it with ``launcher.stop``). ``settings`` override the base server's."""
    from launcher import cli as launch

    http = port(name)
    s = replace(
        base,
        **{
            "openai_port": 0,
            "model_dir": str(model_dir),
            "build_dir": str(tmp / "build"),
            "models": "render_chat",
            "http_port": http,
            "grpc_port": http + 1,
            "metrics_port": http + 2,
            **settings,
        },
    )
    launch.stop(s)
    if launch.start(s) != 0:
        raise RuntimeError(f"render-only server for {name} did not start; see {s.log_file}")
    return s


def trusts_request_templates(client: Any) -> bool:
    """Whether the server renders a template sent with the request (its
    ``TRUST_REQUEST_CHAT_TEMPLATE`` setting), found by sending one."""
    from client import RequestError
    from renderer.chat import UNTRUSTED_TEMPLATE_MESSAGE

    try:
        client.render_chat([{"role": "user", "content": "x"}], chat_params={"chat_template": "{{ 'ok' }}"})
        return True
    except RequestError as e:
        if UNTRUSTED_TEMPLATE_MESSAGE in e.message:
            return False
        raise
