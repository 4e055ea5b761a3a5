"""``ChatRenderer``: OpenAI chat messages + ``ChatParams`` -> prompt text, as vLLM renders chats.

Steps: pick the template (request, processor, tokenizer), settle the content format, parse the
messages (collecting media items), filter the template kwargs, render in the sandbox.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import ChatTemplateResolutionError, MultiModalLimitError, RenderError
from .apply import apply_chat_template, resolve_template_kwargs
from .content_format import resolve_content_format
from .messages import MultiModalItem, parse_messages
from .params import ChatParams
from .sandbox import TemplateLimits
from .template import ChatTemplateSource, resolve_chat_template

logger = logging.getLogger(__name__)

WARMUP_MESSAGES = [{"role": "user", "content": "warmup"}]


@dataclass(frozen=True)
class RenderedChat:
    """A chat rendered to prompt text."""

    prompt: str
    """The rendered prompt, to be tokenized without adding special tokens."""

    conversation: list[dict[str, Any]]
    """The parsed messages the template was given (vLLM's ``conversation``)."""

    mm_items: tuple[MultiModalItem, ...]
    """Media items in order of appearance, for the multimodal stage."""

    content_format: str
    """The content format used: "string" or "openai"."""


class ChatRenderer:
    """Renders chats for one model; thread-safe and shareable (compiled templates are cached)."""

    def __init__(
        self,
        source: ChatTemplateSource,
        *,
        limits: TemplateLimits = TemplateLimits(),
        image_placeholder: str | None = None,
        mm_limits: Mapping[str, int] | None = None,
    ) -> None:
        self.source = source
        self.limits = limits
        self.image_placeholder = image_placeholder
        # Items allowed per prompt and modality; a text-only model allows none (vLLM's limit 0).
        self.mm_limits = dict(mm_limits) if mm_limits is not None else None

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, **kwargs: Any) -> "ChatRenderer":
        """Read the templates and special tokens from a Hugging Face model folder."""
        return cls(ChatTemplateSource.from_model_dir(model_dir), **kwargs)

    def render_messages(self, messages: Any, params: ChatParams) -> RenderedChat:
        """Render OpenAI chat ``messages``; raises a ``RenderError`` naming what was wrong."""
        template = resolve_chat_template(self.source, params.chat_template, params.tools)
        content_format = resolve_content_format(params.chat_template_content_format, template)
        parsed = parse_messages(messages, content_format, image_placeholder=self.image_placeholder)
        self._check_mm_limits(parsed.mm_items)
        kwargs = resolve_template_kwargs(template, params.template_kwargs())
        prompt = apply_chat_template(
            template,
            parsed.conversation,
            special_tokens=self.source.special_tokens,
            template_kwargs=kwargs,
            tools=params.tools,
            limits=self.limits,
        )
        return RenderedChat(prompt, parsed.conversation, parsed.mm_items, content_format)

    def _check_mm_limits(self, items: tuple[MultiModalItem, ...]) -> None:
        if self.mm_limits is None:
            return
        counts: dict[str, int] = {}
        for item in items:
            counts[item.modality] = counts.get(item.modality, 0) + 1
        for modality, n in counts.items():
            limit = self.mm_limits.get(modality, 0)
            if n > limit:
                raise MultiModalLimitError(limit, modality)

    async def render_messages_async(self, messages: Any, params: ChatParams) -> RenderedChat:
        """Async twin of ``render_messages`` (rendering is CPU-bound and short; as in vLLM, it runs inline)."""
        return self.render_messages(messages, params)

    def warmup(self, params: ChatParams | None = None) -> bool:
        """Render a dummy chat once so the template is compiled before the first request.

        Returns whether it rendered; a model without a template, or a template that refuses the
        dummy chat, is logged and not fatal (vLLM's behaviour).
        """
        try:
            self.render_messages(WARMUP_MESSAGES, params or ChatParams())
            return True
        except ChatTemplateResolutionError:
            logger.debug("This model does not support chat template.")
        except RenderError:
            logger.warning("Chat template warmup failed", exc_info=True)
        return False
