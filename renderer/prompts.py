"""Prompt forms a request may carry, and what each becomes after tokenization.

Mirrors vLLM's ``TextPrompt`` / ``TokensPrompt`` and its engine input, as frozen dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence, Union

from .errors import CacheSaltLengthError, EmptyCacheSaltError, InvalidUTF8Error, PromptFormError, PromptTypeError

MAX_CACHE_SALT_CHARS = 1024


@dataclass(frozen=True)
class TextPrompt:
    """A prompt given as text."""

    prompt: str
    """The text to tokenize."""

    cache_salt: str | None = None
    """Isolates prefix-cache entries between tenants."""


@dataclass(frozen=True)
class TokensPrompt:
    """A prompt given as token ids."""

    prompt_token_ids: list[int]
    """The ids, used as they are (after validation)."""

    prompt: str | None = None
    """Text the ids came from, when known."""

    cache_salt: str | None = None
    """Isolates prefix-cache entries between tenants."""


@dataclass(frozen=True)
class EmbedsBytesPrompt:
    """Prompt embeddings as sent: bytes, loaded (safely) in step 1."""

    raw: bytes
    """``torch.save`` or safetensors bytes, raw or base64."""

    cache_salt: str | None = None
    """Isolates prefix-cache entries between tenants."""


@dataclass(frozen=True)
class EmbedsPrompt:
    """Prompt embeddings after step 1: a (seq_len, hidden_size) tensor in the model dtype."""

    prompt_embeds: Any
    """The ``torch.Tensor``; each row counts as one token."""

    cache_salt: str | None = None
    """Isolates prefix-cache entries between tenants."""


Prompt = Union[TextPrompt, TokensPrompt, EmbedsPrompt]
RawPrompt = Union[TextPrompt, TokensPrompt, EmbedsBytesPrompt]


@dataclass(frozen=True)
class TokenizedPrompt:
    """A prompt after step 2 (tokenize): the ids the engine will see."""

    prompt_token_ids: list[int]
    """Final ids: tokenized, padded, truncated, length-checked."""

    prompt: str | None = None
    """The text (given, or decoded when ``needs_detokenization``)."""

    token_offsets: list[tuple[int, int]] | None = None
    """Per-token character spans into ``prompt``, when asked for and available."""

    cache_salt: str | None = None
    """Carried through from the request."""

    prompt_embeds: Any = None
    """(seq_len, hidden_size) tensor for embeds prompts; ``prompt_token_ids`` is then empty."""

    extras: dict = field(default_factory=dict)
    """Prompt extras merged in step 3 (``mm_processor_kwargs`` and the like)."""

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_embeds) if self.prompt_embeds is not None else len(self.prompt_token_ids)


@dataclass(frozen=True)
class EngineInput:
    """A prompt after step 4: what the downstream model consumes."""

    prompt_token_ids: list[int]
    """Token ids for the model (an int32 numpy array where ``render_batch`` was asked for one)."""

    prompt: str | None
    """Prompt text, when known."""

    token_offsets: list[tuple[int, int]] | None
    """Per-token character spans, when asked for."""

    cache_salt: str | None
    """Prefix-cache salt."""

    prompt_embeds: Any
    """(seq_len, hidden_size) tensor for embeds prompts, else None."""

    arrival_time: float
    """When the request reached the renderer (``time.time()``)."""


def decode_utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidUTF8Error(what, e.start) from None


def validate_cache_salt(salt: str | None) -> str | None:
    if salt is None:
        return None
    if not isinstance(salt, str) or not salt:
        raise EmptyCacheSaltError()
    if len(salt) > MAX_CACHE_SALT_CHARS:
        raise CacheSaltLengthError(len(salt), MAX_CACHE_SALT_CHARS)
    return salt


def completion_prompt(
    *,
    text: bytes | str | None = None,
    token_ids: Sequence[int] | None = None,
    embeds: bytes | None = None,
    cache_salt: bytes | str | None = None,
) -> RawPrompt:
    """Step 1 for one completion request: exactly one prompt form, decoded and checked."""
    given = [
        n for n, v in (("prompt", text), ("prompt_token_ids", token_ids), ("prompt_embeds", embeds)) if v is not None
    ]
    if not given:
        raise PromptFormError(given)
    if len(given) > 1:
        raise PromptFormError(given)
    if isinstance(cache_salt, bytes):
        cache_salt = decode_utf8(cache_salt, "cache_salt")
    salt = validate_cache_salt(cache_salt)
    if embeds is not None:
        return EmbedsBytesPrompt(raw=embeds, cache_salt=salt)
    if text is not None:
        if isinstance(text, bytes):
            text = decode_utf8(text, "prompt")
        if not isinstance(text, str):
            raise PromptTypeError()
        return TextPrompt(prompt=text, cache_salt=salt)
    return TokensPrompt(prompt_token_ids=[int(i) for i in token_ids], cache_salt=salt)
