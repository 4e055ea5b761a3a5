"""``ChatRenderer``: OpenAI chat messages + ``ChatParams`` -> prompt text, as vLLM renders chats.

Steps, in vLLM's order: validate the request (vLLM's request models), refuse a request template
unless trusted, settle the content format, parse the messages (collecting media items), pick the
template (request, processor, tokenizer), turn developer messages into system ones where the
template does not know the role, filter the template kwargs, render in the sandbox (or, for a plain
chat on the model's own template, on the compiled engine where it is proven equal:
``compiled_template.py``).

The model's own templates render in process. A template sent with the request (trusted, and not
the name of one of the tokenizer's templates) is size-checked here and otherwise only ever
parsed, analysed and rendered in a worker process (``template_worker.py``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import (
    ChatTemplateResolutionError,
    MultiModalLimitError,
    RenderError,
    TemplateCallArgumentError,
    UntrustedChatTemplateError,
    UntrustedMultiModalKwargsError,
)
from . import compiled_template
from .apply import apply_chat_template, resolve_template_kwargs
from .content_format import resolve_content_format
from .messages import MultiModalItem, developer_to_system, parse_messages
from .params import DEFAULT_PARAMS, ChatParams
from .plain_lane import PlainLane
from .request import validate_chat_request
from .sandbox import TemplateLimits
from .template import ChatTemplateSource, resolve_chat_template
from .template_worker import RequestTemplateLimits, TemplateWorker
from ..output_parsers.request import OutputParsing
from .tool_choice import ToolChoicePolicy

logger = logging.getLogger(__name__)

WARMUP_MESSAGES = [{"role": "user", "content": "warmup"}]
# Kwargs vLLM passes on as keyword arguments of its own template call, where they collide with its
# positional ones.
CALL_ARGUMENT_KWARGS = ("model_config", "tokenizer", "conversation")


def untrusted_mm_kwargs_message(name: str, what: str) -> str:
    """vLLM's refusal of a per-request multimodal kwargs bag, as its error response carries it."""
    return str(UntrustedMultiModalKwargsError(name, what))


UNTRUSTED_TEMPLATE_MESSAGE = str(UntrustedChatTemplateError())
"""vLLM's refusal of a request's chat template, for clients that tell it apart by its words."""


@dataclass(frozen=True)
class RenderedChat:
    """A chat rendered to prompt text."""

    prompt: str
    """The rendered prompt, to be tokenized without adding special tokens."""

    conversation: list[dict[str, Any]]
    """The parsed messages the template was given (vLLM's ``conversation``, developer messages
    turned into system ones where the template does not know the role)."""

    mm_items: tuple[MultiModalItem, ...]
    """Media items in order of appearance, for the multimodal stage."""

    content_format: str
    """The content format used: "string" or "openai"."""

    output_parsing: OutputParsing = OutputParsing()
    """What is read from the generated text (tool calls, reasoning) under the server's parsers."""


class ChatRenderer:
    """Renders chats for one model; thread-safe and shareable (compiled templates are cached)."""

    def __init__(
        self,
        source: ChatTemplateSource,
        *,
        limits: TemplateLimits = TemplateLimits(),
        image_placeholder: str | None = None,
        mm_limits: Mapping[str, int] | None = None,
        trust_request_chat_template: bool = False,
        request_template_limits: RequestTemplateLimits = RequestTemplateLimits(),
        trust_request_mm_kwargs: bool = False,
        tool_choice_policy: ToolChoicePolicy | None = None,
        template_engine: str = "auto",
    ) -> None:
        if template_engine not in compiled_template.ENGINES:
            raise ValueError(f"template_engine must be one of {compiled_template.ENGINES}, not {template_engine!r}")
        self.source = source
        self.limits = limits
        # vLLM's --trust-request-chat-template: off, a request's own template is refused; on, it
        # renders in a worker process under kernel-enforced limits (and the sandbox's).
        self.trust_request_chat_template = trust_request_chat_template
        self.request_template_limits = request_template_limits
        self.template_worker = TemplateWorker(request_template_limits) if trust_request_chat_template else None
        """Renders request templates; None when they are refused."""
        # vLLM's --trust-request-mm-kwargs: off, per-request processor and media-loading kwargs
        # are refused (they change what preprocessing costs).
        self.trust_request_mm_kwargs = trust_request_mm_kwargs
        # vLLM's online renderer refuses tool choices it cannot parse; its in-process renderer
        # (None here) does not check.
        self.tool_choice_policy = tool_choice_policy
        self.image_placeholder = image_placeholder
        # Items allowed per prompt and modality; a text-only model allows none (vLLM's limit 0).
        self.mm_limits = dict(mm_limits) if mm_limits is not None else None
        self.template_engine = template_engine
        """``auto``: chats on the model's template render on minijinja where proven equal (``compiled_template``)."""
        self._compiled: compiled_template.CompiledChatTemplate | None = None
        self._engine_choice: compiled_template.EngineChoice | None = None
        self._plain_lane: PlainLane | None = None
        """Plain chats under the default parameters (``plain_lane.py``); built by ``warmup``."""

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, **kwargs: Any) -> "ChatRenderer":
        """Read the templates and special tokens from a Hugging Face model folder."""
        return cls(ChatTemplateSource.from_model_dir(model_dir), **kwargs)

    def render_messages(self, messages: Any, params: ChatParams) -> RenderedChat:
        """Render OpenAI chat ``messages``; raises a ``RenderError`` naming what was wrong."""
        lane = self._plain_lane
        if lane is not None and params is DEFAULT_PARAMS:
            plain = lane.render(messages)
            if plain is not None:
                return RenderedChat(plain[0], plain[1], (), "string", lane.output_parsing)
        request = validate_chat_request(messages, params.tools, params.documents, params.tool_choice)
        if self.tool_choice_policy is not None:  # before the template's trust, as in vLLM
            self.tool_choice_policy.check(request.tool_choice)
        self._check_trust(params)
        self._check_mm_kwargs(params)
        if self._is_request_template(params.request_template):
            self.request_template_limits.check_size(params.request_template)
        # Request kwargs may carry the tools the template sees (vLLM's merge lets them override).
        kw_tools = params.chat_template_kwargs.get("tools")
        tools = kw_tools if kw_tools is not None else request.tools
        # One deadline for all of a request template's jobs in the worker (analysis, render).
        content_format, worker_s = self._content_format(params, tools)
        parsed = parse_messages(request.messages, content_format, image_placeholder=self.image_placeholder)
        self._check_mm_limits(parsed.mm_items)
        self._check_call_arguments(params)
        template = resolve_chat_template(self.source, params.request_template, tools)
        conversation = developer_to_system(parsed.conversation, template)
        kwargs = params.template_kwargs(request.documents)
        if self._is_request_template(params.request_template):
            prompt = self._worker().render(
                template,
                conversation,
                special_tokens=self.source.special_tokens,
                template_kwargs=kwargs,
                tools=tools,
                limits=self.limits,
                timeout_s=self.request_template_limits.timeout_s - worker_s,
            )
        else:
            resolved = resolve_template_kwargs(template, kwargs)
            prompt = self._render_compiled(template, conversation, resolved, tools, request.documents)
            if prompt is None:
                prompt = apply_chat_template(
                    template,
                    conversation,
                    special_tokens=self.source.special_tokens,
                    template_kwargs=resolved,
                    tools=tools,
                    limits=self.limits,
                )
        parsing = (
            self.tool_choice_policy.output_parsing(request.tools, request.tool_choice)
            if self.tool_choice_policy is not None
            else OutputParsing()
        )
        return RenderedChat(prompt, conversation, parsed.mm_items, content_format, parsing)

    def _render_compiled(
        self, template: str, conversation: list[dict[str, Any]], kwargs: Mapping[str, Any], tools: Any, documents: Any
    ) -> str | None:
        """The prompt from the compiled engine, for a chat on the model's default template that it
        serves (``CompiledChatTemplate.conversation_for``); None when the sandbox renders it
        (anything else, or whatever minijinja fails on)."""
        compiled = self.engine()[0]
        if compiled is None or template is not compiled.source and template != compiled.source:
            return None
        agp = compiled_template.plain_kwargs(kwargs)
        served = None if agp is None else compiled.conversation_for(conversation, tools, documents)
        if served is None:
            return None
        return compiled.render(served, agp)

    def engine(self) -> tuple[compiled_template.CompiledChatTemplate | None, compiled_template.EngineChoice]:
        """The compiled template for the chats it serves (None: all render in the sandbox) and why; chosen
        once, on first use (``warmup``), by the load-time probe."""
        if self._engine_choice is None:
            try:
                default = resolve_chat_template(self.source, None, None)
            except ChatTemplateResolutionError:
                default = None
            self._compiled, self._engine_choice = compiled_template.choose(
                self.template_engine, default, self.source.special_tokens, self.limits
            )
            logger.info(
                "chat template engine for the model's template: %s (%s)",
                self._engine_choice.engine,
                self._engine_choice.reason,
            )
        return self._compiled, self._engine_choice

    def _build_plain_lane(self) -> PlainLane | None:
        """The plain-chat lane, when the full path's parameter-dependent steps, run once here for
        the default parameters, leave a plain chat's render to the compiled template alone: the
        tool choice "none" allowed, no template kwarg but ``add_generation_prompt``, the "string"
        content format, the model's template served by minijinja. Held to the full path on the
        warm-up chat before it serves; None (every chat takes the full path) otherwise."""
        compiled = self.engine()[0]
        params = DEFAULT_PARAMS
        if compiled is None or params.chat_template_kwargs or params.request_template is not None:
            return None
        try:
            request = validate_chat_request(WARMUP_MESSAGES, params.tools, params.documents, params.tool_choice)
            if request.tools is not None or request.documents is not None:
                return None
            if self.tool_choice_policy is not None:
                self.tool_choice_policy.check(request.tool_choice)
            self._check_trust(params)
            self._check_mm_kwargs(params)
            if self._content_format(params, None)[0] != "string":
                return None
            template = resolve_chat_template(self.source, None, None)
            if template is not compiled.source and template != compiled.source:
                return None
            agp = compiled_template.plain_kwargs(resolve_template_kwargs(template, params.template_kwargs(None)))
            if agp is None:
                return None
            parsing = (
                self.tool_choice_policy.output_parsing(None, request.tool_choice)
                if self.tool_choice_policy is not None
                else OutputParsing()
            )
            lane = PlainLane(compiled, agp, parsing)
            served = lane.render(WARMUP_MESSAGES)
            # A ChatParams() equal to, not the same object as, the defaults: the full path.
            full = self.render_messages(WARMUP_MESSAGES, ChatParams())
        except RenderError:
            return None
        if served is None or RenderedChat(served[0], served[1], (), "string", parsing) != full:
            logger.warning("plain-chat lane off: it renders the warm-up chat unlike the full path")
            return None
        return lane

    def _is_request_template(self, chat_template: str | None) -> bool:
        """Whether ``chat_template`` is the request's own text, not absent and not the name of one
        of the tokenizer's named templates (those are the model's)."""
        if chat_template is None:
            return False
        named = self.source.tokenizer_template
        return not (isinstance(named, Mapping) and chat_template in named)

    def _worker(self) -> TemplateWorker:
        # _check_trust refused the request before any request template gets here untrusted.
        assert self.template_worker is not None
        return self.template_worker

    def _check_trust(self, params: ChatParams) -> None:
        if params.sends_template and not self.trust_request_chat_template:
            raise UntrustedChatTemplateError()

    def _check_mm_kwargs(self, params: ChatParams) -> None:
        # vLLM checks right after the template's trust, before parsing the messages; an empty
        # object asks for nothing and passes.
        if self.trust_request_mm_kwargs:
            return
        for name, what in (("mm_processor_kwargs", "preprocessing"), ("media_io_kwargs", "media loading")):
            if getattr(params, name):
                raise UntrustedMultiModalKwargsError(name, what)

    @staticmethod
    def _check_call_arguments(params: ChatParams) -> None:
        for name in params.chat_template_kwargs:
            if name in CALL_ARGUMENT_KWARGS:
                raise TemplateCallArgumentError("safe_apply_chat_template", name)

    def _content_format(self, params: ChatParams, tools: Any) -> tuple[str, float]:
        """The content format, and the seconds a request template's worker spent finding it."""
        # vLLM detects the format from the request's ``chat_template`` or the model's, never from
        # a template inside the kwargs; with neither, "auto" means "string".
        if params.chat_template_content_format != "auto":
            return params.chat_template_content_format, 0.0
        if self._is_request_template(params.chat_template):
            analysis = self._worker().analyze(params.chat_template)
            return analysis.content_format, analysis.seconds
        try:
            template = resolve_chat_template(self.source, params.chat_template, tools)
        except ChatTemplateResolutionError:
            return "string", 0.0
        return resolve_content_format("auto", template), 0.0

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

    def close(self) -> None:
        """Stop the request-template worker, if any (a later request template starts another)."""
        if self.template_worker is not None:
            self.template_worker.close()

    def warmup(self, params: ChatParams | None = None) -> bool:
        """Render a dummy chat once so the template is compiled before the first request, and
        start the request-template worker when request templates are trusted.

        Returns whether it rendered; a model without a template, or a template that refuses the
        dummy chat, is logged and not fatal (vLLM's behaviour). A worker that cannot start raises
        ``TemplateWorkerStartError``.
        """
        if self.template_worker is not None:
            self.template_worker.start()
        self.engine()
        try:
            self.render_messages(WARMUP_MESSAGES, params or ChatParams())
            self._plain_lane = self._build_plain_lane()
            return True
        except ChatTemplateResolutionError:
            logger.debug("This model does not support chat template.")
        except RenderError:
            logger.warning("Chat template warmup failed", exc_info=True)
        return False
