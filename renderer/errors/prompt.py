"""The prompt itself: its form (text, token ids, embeddings), its encoding, its length, its
encoder-decoder parts and its cache salt.
"""

from __future__ import annotations

from .base import RenderError


class PromptError(RenderError):
    """The prompt itself is unusable."""


class NoPromptError(PromptError):
    """A completion request with no prompt in any form (vLLM's words)."""

    def __init__(self) -> None:
        super().__init__("You must pass at least one prompt")


class PromptFormError(PromptError):
    """Zero or several prompt forms (text, token ids, embeds) in one request."""


class PromptTypeError(PromptError):
    """A text prompt that is not a string (vLLM's words, pointing at ``prompt_token_ids``)."""

    def __init__(self) -> None:
        super().__init__(
            "Expected prompt['prompt'] to be a string before tokenization; use 'prompt_token_ids' for token ID inputs"
        )


class InvalidUTF8Error(PromptError):
    """A text tensor's bytes are not UTF-8."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"{what} is not valid UTF-8: {detail}")


class EmptyPromptError(PromptError):
    """A prompt (or an encoder-decoder model's decoder prompt) with no text and no ids (vLLM's words)."""

    def __init__(self, prompt_type: str = "decoder") -> None:
        super().__init__(f"The {prompt_type} prompt cannot be empty")


class TokenIdError(PromptError):
    """Token ids out of the vocabulary or not integers."""


class PromptTooLongError(PromptError):
    """The prompt (plus requested output) does not fit the context length."""


class CacheSaltError(PromptError):
    """``cache_salt`` is empty or too long."""


class EmbedsError(PromptError):
    """Prompt embeddings that cannot be used (vLLM's wording)."""


class EncoderDecoderError(PromptError):
    """An encoder-decoder prompt that cannot be used."""
