"""Fixtures the chat test files share: renderers over the reference templates, trusted or as
deployed, and those over the folders vLLM's recorded chat fixture names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from renderer.chat import ChatRenderer
from renderer.chat.template import ChatTemplateSource
from renderer.chat_stage import ChatStage

ROOT = Path(__file__).resolve().parents[2]
VLLM_FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "vllm" / "chat.json").read_text())


@pytest.fixture(scope="session")
def tokenizer_dirs(model_dir) -> dict[str, Path]:
    from model_builders.reference_tokenizers import build

    return {"smollm2": model_dir, **build(ROOT / "build" / "models" / "tokenizers")}


@pytest.fixture(scope="session")
def renderers(tokenizer_dirs) -> dict[str, ChatRenderer]:
    # Trusted: many cases send their own template (tests/unit/test_chat_templates.py covers the refusal).
    return {
        name: ChatRenderer.from_model_dir(d, trust_request_chat_template=True) for name, d in tokenizer_dirs.items()
    }


@pytest.fixture(scope="session")
def smol(renderers) -> ChatRenderer:
    return renderers["smollm2"]


@pytest.fixture(scope="module")
def vllm_renderers(model_dir) -> dict[tuple[str, bool], ChatRenderer]:
    """(template name, trusted) -> renderer, for every template the fixture covers."""
    from recorded_models import template_dirs

    out = {}
    for name, folder in template_dirs(VLLM_FIXTURE["templates"]).items():
        served = ChatStage.from_model_dir(folder).chat  # media rules as the server sets them
        for trust in (False, True):
            out[name, trust] = ChatRenderer.from_model_dir(
                folder,
                image_placeholder=served.image_placeholder,
                mm_limits=served.mm_limits,
                trust_request_chat_template=trust,
            )
    return out


@pytest.fixture(scope="module")
def trusted() -> ChatRenderer:
    """A renderer with no model template that trusts request templates."""
    return ChatRenderer(ChatTemplateSource(), trust_request_chat_template=True)


@pytest.fixture(scope="module")
def stage(model_dir) -> ChatStage:
    """chat_render as deployed by default: the model's own template, request templates refused."""
    return ChatStage.from_model_dir(model_dir)
