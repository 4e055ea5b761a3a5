"""The ``chat_render`` stage: a request's raw ``messages`` and ``chat_params`` -> prompt text and
media items, with the rules that depend on the served model.

- an absent or blank ``messages`` is refused (``EmptyMessagesError``) before any JSON parsing;
- a text-only model takes no media: its image limit is 0, so an image part gets vLLM's
  "At most 0 image(s) may be provided in one prompt." (``MultiModalLimitError``); an image model
  takes up to vLLM's ``--limit-mm-per-prompt`` default (``MediaLimits``) and writes the family's
  placeholder where each image goes;
- the request's ``mm_processor_kwargs`` / ``media_io_kwargs`` travel to ``mm_process`` as one
  JSON object (``MediaKwargs``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .chat import ChatParams, ChatRenderer, RenderedChat
from .chat.tool_choice import ToolChoicePolicy
from .errors import EmptyMessagesError, FieldTypeError, MissingInputError
from .multimodal.media import MediaLimits
from .multimodal.registry import detect_family, load_family
from .json_fields import parse_json


def chat_media_limits(family: str | None, limits: MediaLimits | None = None) -> dict[str, int]:
    """Media items one chat prompt may carry, by modality: none for a text-only model (``family``
    None, vLLM's limit 0), else ``limits``' (vLLM's per-prompt defaults when not given)."""
    return dict((limits or MediaLimits()).max_items) if family else {}


def messages_from_json(raw: str | None) -> Any:
    """The ``messages`` field as parsed JSON; an absent input is ``MissingInputError`` (Triton 2.51
    lets a request without it into the ensembles, whose inputs are optional so that this says so),
    a blank one ``EmptyMessagesError``."""
    if raw is None:
        raise MissingInputError("messages")
    if not raw.strip():
        raise EmptyMessagesError()
    return parse_json(raw, "messages")


@dataclass(frozen=True)
class MediaKwargs:
    """The chat's per-request media settings, as ``chat_render`` hands them to ``mm_process``."""

    mm_processor_kwargs: Mapping[str, Any] | None = None
    """Image-processor overrides (validated by the family in ``mm_process``)."""

    media_io_kwargs: Mapping[str, Any] | None = None
    """Media-loading options (validated in ``mm_process``)."""

    @classmethod
    def of(cls, params: ChatParams) -> "MediaKwargs":
        if params.mm_processor_kwargs is None and params.media_io_kwargs is None and cls is MediaKwargs:
            return _NO_MEDIA_KWARGS  # frozen; most requests send neither
        return cls(params.mm_processor_kwargs, params.media_io_kwargs)

    def to_json(self) -> str:
        """The ``mm_kwargs`` tensor's text."""
        return json.dumps({"mm_processor_kwargs": self.mm_processor_kwargs, "media_io_kwargs": self.media_io_kwargs})

    @classmethod
    def from_bag(cls, bag: Any) -> "MediaKwargs":
        """The inverse of ``to_json`` (after JSON parsing); None is no overrides."""
        if bag is None:
            return cls()
        if not isinstance(bag, Mapping):
            raise FieldTypeError("request", "mm_kwargs", "a JSON object", bag)
        return cls(bag.get("mm_processor_kwargs"), bag.get("media_io_kwargs"))


_NO_MEDIA_KWARGS = MediaKwargs()


@dataclass(frozen=True)
class ChatStageOutput:
    """One rendered chat, as ``chat_render`` sends it on."""

    rendered: RenderedChat
    """The prompt text and the media items, in order."""

    media_kwargs: MediaKwargs = field(default_factory=MediaKwargs)
    """The request's media settings, for ``mm_process``."""

    def mm_wire(self) -> tuple[list[str], list[bytes]]:
        """The media items as ``mm_process`` takes them: the ``mm_items`` tensor (one JSON object
        of metadata per item) and the ``mm_data`` tensor (each item's data URL, in step with it;
        ``MultiModalItem.to_wire``)."""
        wire = [item.to_wire() for item in self.rendered.mm_items]
        return [meta for meta, _ in wire], [data for _, data in wire]


def may_send_template(raw_chat_params: bytes | None) -> bool:
    """Whether a ``chat_params`` tensor may carry a request template (a render in the template
    worker, up to its deadline): a byte search, no parse; "may" errs towards yes."""
    return bool(raw_chat_params) and b"chat_template" in raw_chat_params


class ChatStage:
    """``chat_render`` for one model: the chat renderer set up for its family (or none)."""

    def __init__(self, chat: ChatRenderer, family: str | None) -> None:
        self.chat = chat
        self.family = family

    @classmethod
    def from_model_dir(
        cls,
        model_dir: str | Path,
        media_limits: MediaLimits | None = None,
        tokenizer_record: str | None = None,
        **options: Any,
    ) -> "ChatStage":
        """``media_limits``: the server's (``LIMIT_MM_PER_PROMPT``); ``tokenizer_record``: as
        ``Tokenizer.from_pretrained``'s ``record``; ``options``: further ``ChatRenderer`` settings
        (server-wide, e.g. template trust)."""
        # The server's stage checks tool_choice as vLLM's online renderer does (vLLM's defaults).
        policy = options.setdefault("tool_choice_policy", ToolChoicePolicy())
        if policy.reasoning_parser:
            from .tokenizer import Tokenizer

            policy.check_vocabulary(Tokenizer.from_pretrained(model_dir, record=tokenizer_record).hf.get_vocab())
        family = detect_family(model_dir)
        placeholder = load_family(model_dir).placeholder_text if family else None
        chat = ChatRenderer.from_model_dir(
            model_dir, image_placeholder=placeholder, mm_limits=chat_media_limits(family, media_limits), **options
        )
        return cls(chat, family)

    @property
    def multimodal(self) -> bool:
        """Whether the model takes images (its ensembles run ``mm_process``)."""
        return self.family is not None

    def warmup(self) -> bool:
        """Compile the model's template before the first request (see ``ChatRenderer.warmup``)."""
        return self.chat.warmup()

    @property
    def any_may_be_slow(self) -> bool:
        """Whether any request may render its own template in the worker: only where request
        templates are trusted. Where not, a batch needs no ordering, nor a read of its inputs."""
        return self.chat.trust_request_chat_template

    def may_be_slow(self, raw_chat_params: bytes | None) -> bool:
        """Whether a request may render its own template in the worker (up to its deadline):
        only where request templates are trusted, and ``may_send_template`` says so."""
        return self.chat.trust_request_chat_template and may_send_template(raw_chat_params)

    def close(self) -> None:
        """Stop the request-template worker process, if any."""
        self.chat.close()

    def render(self, raw_messages: str | None, chat_params: Mapping[str, Any] | None) -> ChatStageOutput:
        """One request: ``messages`` JSON text and the parsed ``chat_params`` bag."""
        messages = messages_from_json(raw_messages)
        params = ChatParams.from_request(chat_params)
        return ChatStageOutput(self.chat.render_messages(messages, params), MediaKwargs.of(params))
