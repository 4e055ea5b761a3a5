"""The tensor seam: what one Triton step hands the next (an absent input, a tensor of the wrong
dtype or shape, a malformed hand-over tensor). ``renderer/`` raises these too, so they live here
rather than in ``triton_io/``, which ``renderer/`` may not import.
"""

from __future__ import annotations

from .base import RenderError


class TensorError(RenderError):
    """An input tensor has the wrong dtype, shape or batch size."""


class MissingInputError(TensorError):
    """A required input tensor is absent."""

    def __init__(self, name: str, when: str = "") -> None:
        super().__init__(f"Input '{name}' is required{' ' + when if when else ''}.", parameter=name)


class MissingMaxTokensError(MissingInputError):
    """A generation request without ``max_tokens``."""

    def __init__(self) -> None:
        super().__init__("max_tokens", "for generation")


class TensorShapeError(TensorError):
    """An input tensor of the wrong size or shape: what it must hold and what it held."""

    def __init__(self, name: str, expected: str, got: object) -> None:
        super().__init__(f"Input '{name}' must {expected}, got {got}.", parameter=name)


class InputUTF8Error(TensorError):
    """A text input tensor whose bytes are not UTF-8."""

    def __init__(self, name: str) -> None:
        super().__init__(f"Input '{name}' is not valid UTF-8.", parameter=name)


class LengthLimitError(TensorError):
    """The ``length_limit`` tensor ``tokenize`` hands on is not (max_total_tokens, max_output_tokens):
    not two values, or two that no ``TokenizeParams`` allows."""

    def __init__(self, values: list[int]) -> None:
        if len(values) != 2:
            message = (
                f"Input 'length_limit' must hold 2 values (max_total_tokens, max_output_tokens), got {len(values)}."
            )
        else:
            message = (
                "Input 'length_limit' must be (max_total_tokens >= 1 or -1, 0 <= max_output_tokens <= "
                f"max_total_tokens), got {values}."
            )
        super().__init__(message)


class OutputParsingError(TensorError):
    """The ``output_parsing`` tensor (``chat_render``'s instructions to ``detokenize``) is not one;
    ``detail`` says how. Each way is a subclass that gives the detail."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"Input 'output_parsing' {detail}.", parameter="output_parsing")


class OutputParsingJSONError(OutputParsingError):
    """An ``output_parsing`` tensor that does not parse; ``reason`` is the JSON parser's message."""

    def __init__(self, reason: object) -> None:
        super().__init__(f"is not JSON: {reason}")


class OutputParsingObjectError(OutputParsingError):
    """An ``output_parsing`` tensor whose JSON is not an object."""

    def __init__(self) -> None:
        super().__init__("must be a JSON object")


class OutputParserNameError(OutputParsingError):
    """An ``output_parsing`` tensor naming a parser (``key``: ``tool_call_parser``,
    ``reasoning_parser``) this server does not have."""

    def __init__(self, key: str, name: object) -> None:
        super().__init__(f"names no {key} this server has: {name!r}")
