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
    """A text tensor's bytes are not UTF-8, from the byte at ``position`` on."""

    def __init__(self, what: str, position: int) -> None:
        super().__init__(f"{what} is not valid UTF-8: invalid byte at position {position}")


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
    """Prompt embeddings that cannot be used (vLLM's wording). The group: each way is a subclass
    that words its own message."""


class EmbedsDisabledError(EmbedsError):
    """``prompt_embeds`` sent to a server that does not take them (vLLM's ``--enable-prompt-embeds``)."""

    def __init__(self) -> None:
        super().__init__("You must set `--enable-prompt-embeds` to input `prompt_embeds`.")


class EmbedsDetokenizeError(EmbedsError):
    """Detokenization asked of a prompt given as embeddings, which has no token ids (vLLM's words)."""

    def __init__(self) -> None:
        super().__init__("Cannot run detokenization on embeddings")


class EmbedsPaddingError(EmbedsError):
    """Token padding asked of a prompt given as embeddings (vLLM's words)."""

    def __init__(self) -> None:
        super().__init__("Cannot pad tokens for embedding inputs")


class EmbedsEncodingError(EmbedsError):
    """``prompt_embeds`` bytes that are neither a serialized tensor nor base64 text."""

    def __init__(self) -> None:
        super().__init__("`prompt_embeds` is neither a serialized tensor nor base64 text.")


class EmbedsBase64Error(EmbedsError):
    """``prompt_embeds`` base64 text that does not decode; ``reason`` is the decoder's message."""

    def __init__(self, reason: object) -> None:
        super().__init__(f"`prompt_embeds` is not valid base64: {reason}")


class EmbedsDeserializeError(EmbedsError):
    """``prompt_embeds`` bytes ``torch.load`` refuses; ``reason`` is torch's message, bounded."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"`prompt_embeds` could not be deserialized as a torch tensor: {reason}")


class EmbedsNotTensorError(EmbedsError):
    """``prompt_embeds`` that deserialize to something other than a tensor."""

    def __init__(self) -> None:
        super().__init__("`prompt_embeds` payload did not deserialize to a torch.Tensor.")


class EmbedsSparseError(EmbedsError):
    """A sparse ``prompt_embeds`` tensor whose indices torch refuses; ``reason`` is torch's message, bounded."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"`prompt_embeds` is a malformed sparse tensor: {reason}")


class EmbedsSafetensorsError(EmbedsError):
    """``prompt_embeds`` in the safetensors format that do not parse; ``reason`` is the parser's
    message, bounded."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"`prompt_embeds` could not be read as safetensors: {reason}")


class EmbedsTensorCountError(EmbedsError):
    """``prompt_embeds`` safetensors holding other than exactly one tensor."""

    def __init__(self, count: int) -> None:
        super().__init__(f"`prompt_embeds` safetensors must hold exactly one tensor, got {count}.")


class EmbedsShapeError(EmbedsError):
    """``prompt_embeds`` not of shape (seq_len, hidden_size) once a leading batch of one is dropped."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__(f"prompt_embeds must be of shape (seq_len, hidden_size); got shape {shape}.")


class EmbedsHiddenSizeError(EmbedsError):
    """``prompt_embeds`` rows of another width than the model's hidden size."""

    def __init__(self, got: int, hidden_size: int) -> None:
        super().__init__(f"`prompt_embeds` hidden_size {got} does not match the model's hidden_size {hidden_size}.")


class EmbedsDtypeError(EmbedsError):
    """``prompt_embeds`` of an integer (or other non-floating) dtype, which is not cast to the model's."""

    def __init__(self, dtype: object, model_dtype: object) -> None:
        super().__init__(
            f"`prompt_embeds` dtype {dtype} is not a floating-point type, "
            f"cannot safely cast to the model's dtype {model_dtype}."
        )


class EmbedsNonFiniteError(EmbedsError):
    """``prompt_embeds`` holding NaN or infinite values."""

    def __init__(self) -> None:
        super().__init__("`prompt_embeds` contains NaN or infinite values.")


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
