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
    """Zero or several prompt forms (text, token ids, embeds) in one request; ``given`` names the
    forms sent (none, or more than one)."""

    def __init__(self, given: list[str]) -> None:
        if not given:
            super().__init__("Either prompt, prompt_token_ids or prompt_embeds must be provided.")
        else:
            super().__init__(
                f"Exactly one of prompt, prompt_token_ids or prompt_embeds may be provided, got {' and '.join(given)}."
            )


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
    """Token ids out of the vocabulary or not integers. The group: each way is a subclass that
    words its own message."""


class TokenIdTypeError(TokenIdError):
    """A token id that is not an integer (a bool is not one either)."""

    def __init__(self, value: object) -> None:
        super().__init__(f"Token ids must be integers, got {type(value).__name__} {value!r}.")


class TokenIdRangeError(TokenIdError):
    """A token id outside the vocabulary, ``0`` to ``max_id``."""

    def __init__(self, token_id: int, max_id: int) -> None:
        super().__init__(f"Token id {token_id} is out of vocabulary (valid ids are 0 to {max_id}).")


class PromptTooLongError(PromptError):
    """The prompt (plus requested output) does not fit the context length, in vLLM's words;
    ``at_least`` when the prompt was counted only until it was too long."""

    def __init__(
        self, max_total_tokens: int, max_output_tokens: int, prompt_tokens: int, at_least: bool = False
    ) -> None:
        more = "at least " if at_least else ""
        super().__init__(
            f"This model's maximum context length is {max_total_tokens} tokens. However, "
            f"you requested {max_output_tokens} output tokens and your prompt contains "
            f"{more}{prompt_tokens} input tokens, for a total of "
            f"{more}{max_output_tokens + prompt_tokens} tokens. Please reduce the length of the "
            f"input prompt or the number of requested output tokens."
        )


class PromptCharsTooLongError(PromptTooLongError):
    """A text prompt longer, in characters, than the most tokens it may have could spell
    (``max_input_tokens`` times the tokenizer's longest token): refused before tokenizing, in
    vLLM's words."""

    def __init__(
        self, chars: int, max_output_tokens: int, max_total_tokens: int, max_input_tokens: int, max_chars: int
    ) -> None:
        # Its own words, not the token count's: the prompt was never tokenized.
        RenderError.__init__(
            self,
            f"You passed {chars} input characters and requested "
            f"{max_output_tokens} output tokens. However, the model's context "
            f"length is only {max_total_tokens} tokens, resulting in a maximum "
            f"input length of {max_input_tokens} tokens (at most {max_chars} characters). "
            f"Please reduce the length of the input prompt.",
        )


class CacheSaltError(PromptError):
    """``cache_salt`` is empty or too long. The group: each way is a subclass that words its own
    message."""


class EmptyCacheSaltError(CacheSaltError):
    """``cache_salt`` is not a string, or an empty one."""

    def __init__(self) -> None:
        super().__init__("cache_salt must be a non-empty string.")


class CacheSaltLengthError(CacheSaltError):
    """``cache_salt`` longer than ``limit`` characters."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"cache_salt must be at most {limit} characters, got {length}.")


class EmbedsError(PromptError):
    """Prompt embeddings that cannot be used (vLLM's wording)."""


class EncoderDecoderError(PromptError):
    """An encoder-decoder prompt that cannot be used. The group: each way is a subclass that
    words its own message."""


class EncoderPromptMissingError(EncoderDecoderError):
    """An encoder-decoder request with neither an encoder prompt nor its token ids."""

    def __init__(self) -> None:
        super().__init__("Either encoder_prompt or encoder_prompt_token_ids must be provided.")


class EncoderDecoderFormsError(EncoderDecoderError):
    """Both forms (text and token ids) of one side, ``"encoder"`` or ``"decoder"``, of the prompt."""

    def __init__(self, side: str) -> None:
        super().__init__(f"Only one of {side}_prompt or {side}_prompt_token_ids may be provided.")


class DecoderStartTokenError(EncoderDecoderError):
    """A model with neither a decoder start token nor ``<BOS>`` to begin the decoder prompt (vLLM's words)."""

    def __init__(self) -> None:
        super().__init__("Cannot find decoder start token id or <BOS>")
