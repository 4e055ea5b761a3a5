"""The errors only the Triton seam raises: what a request's tensors are refused for before any
stage reads them. The seam's errors that ``renderer/`` raises too (``TensorError``,
``MissingInputError``, ``TensorShapeError``, ...) are in ``renderer/errors/tensors.py``, since
``renderer/`` may not import this package."""

from __future__ import annotations

from renderer.errors import TensorError


class InputTooLargeError(TensorError):
    """An input tensor larger than the seam's byte limit (``MAX_INPUT_BYTES``), refused before it
    is decoded."""

    def __init__(self, name: str, size: int, limit: int) -> None:
        super().__init__(f"Input '{name}' is {size} bytes, more than the limit of {limit} bytes.", parameter=name)
