"""Why Triton answered a 500 to an HTTP ``/infer`` request: the client's error, named.

Triton 2.51 answers ``/v2/models/<model>/infer`` with a 500 whenever its JSON reader fails: a body
that is not JSON (``1e400``, ``NaN``, truncated), not an object, or a member of the wrong JSON type
(``inputs`` that is not an array, an input without ``shape``, a ``null`` in a BYTES input's
``data``, a float in an INT32 one). These are the client's errors. The edge keeps ``/infer`` on
Triton (no cost for valid requests) and sends only the requests Triton answered with a 500 here
(``launcher/edge.py``): ``diagnose`` reads the body again and names what is wrong, a 400 in
Triton's error shape; a body it finds well-formed was a fault of the server, and stays a 500.

The order of the checks is the order of Triton's reading: the JSON text, ``id``, ``parameters``,
``inputs`` (each: ``name``, ``datatype``, ``shape``, ``data``), ``outputs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .generate import (
    INT_RANGES,
    GenerateError,
    Pairs,
    describe,
    parse_body,
    takes,
)

# The binary tensor extension: the JSON is the body's first N bytes.
HEADER_LENGTH = "inference-header-content-length"
JSON_DATATYPES = frozenset({*INT_RANGES, "BOOL", "FP32", "FP64", "BYTES"})


class InferFieldError(GenerateError):
    """A member of the request of the wrong JSON type, or missing: named by its path."""

    def __init__(self, path: str, wants: str, value: Any = ...) -> None:
        got = "it is missing" if value is ... else f"got {describe(value)}"
        super().__init__(f"Unable to parse '{path}': it must be {wants}; {got}.")


class InferHeaderLengthError(GenerateError):
    def __init__(self, value: str, size: int) -> None:
        super().__init__(f"Inference-Header-Content-Length {value!r} is not a length within the body of {size} bytes.")


class InferServerFaultError(GenerateError):
    """Triton's 500 to a request whose JSON is well-formed: a fault of the server, said as one."""

    status = 500

    def __init__(self) -> None:
        super().__init__(
            "tritonserver failed this request, whose JSON is well-formed: an internal error (see the server's log)."
        )


def diagnose(raw: bytes, header_length: str | None) -> GenerateError:
    """What is wrong with an ``/infer`` body Triton refused with a 500 (``InferServerFaultError``
    where nothing is)."""
    try:
        check(json_part(raw, header_length))
    except GenerateError as e:
        return e
    return InferServerFaultError()


def json_part(raw: bytes, header_length: str | None) -> bytes:
    if header_length is None:
        return raw
    try:
        n = int(header_length)
    except ValueError:
        n = -1
    if not 0 <= n <= len(raw):
        raise InferHeaderLengthError(header_length, len(raw))
    return raw[:n]


def check(text: bytes) -> None:
    """Raises the ``GenerateError`` naming the first fault of the request's JSON, if any."""
    body = parse_body(text).first()
    if "id" in body and not isinstance(body["id"], str):
        raise InferFieldError("id", "a string", body["id"])
    _check_parameters("parameters", body)
    inputs = body.get("inputs", ...)
    if not _array(inputs):
        raise InferFieldError("inputs", "an array of input objects", inputs)
    for i, spec in enumerate(inputs):
        _check_input(f"inputs[{i}]", spec)
    if "outputs" in body:
        outputs = body["outputs"]
        if not _array(outputs):
            raise InferFieldError("outputs", "an array of output objects", outputs)
        for i, spec in enumerate(outputs):
            _check_output(f"outputs[{i}]", spec)


def _array(value: Any) -> bool:
    """A JSON array (an object is a ``Pairs``, a list too)."""
    return isinstance(value, list) and not isinstance(value, Pairs)


def _check_parameters(path: str, owner: dict[str, Any]) -> dict[str, Any]:
    params = owner.get("parameters", Pairs())
    if not isinstance(params, Pairs):
        raise InferFieldError(path, "an object", params)
    return params.first()


def _object(path: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Pairs):
        raise InferFieldError(path, "an object", value)
    return value.first()


def _string(path: str, owner: dict[str, Any], key: str) -> str:
    value = owner.get(key, ...)
    if not isinstance(value, str):
        raise InferFieldError(f"{path}.{key}", "a string", value)
    return value


def _check_input(path: str, value: Any) -> None:
    spec = _object(path, value)
    _string(path, spec, "name")
    datatype = _string(path, spec, "datatype")
    shape = spec.get("shape", ...)
    if not _array(shape):
        raise InferFieldError(f"{path}.shape", "an array of non-negative integers", shape)
    for k, dim in enumerate(shape):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise InferFieldError(f"{path}.shape[{k}]", "a non-negative integer", dim)
    _check_parameters(f"{path}.parameters", spec)
    if "data" not in spec or datatype not in JSON_DATATYPES:
        return  # binary or shared-memory data, or a datatype Triton refuses with a 400 itself
    data = spec["data"]
    if not _array(data):
        raise InferFieldError(f"{path}.data", "an array", data)
    for k, leaf in _leaves(data):
        if not _holds(datatype, leaf):
            raise InferFieldError(f"{path}.data{k}", f"one of the {takes(datatype)} a {datatype} input takes", leaf)


def _leaves(data: list[Any], at: str = "") -> Sequence[tuple[str, Any]]:
    """Each value of (possibly nested) ``data`` with its index path."""
    out: list[tuple[str, Any]] = []
    stack = [(f"{at}[{k}]", v) for k, v in reversed(list(enumerate(data)))]
    while stack:
        where, v = stack.pop()
        if _array(v):
            stack.extend((f"{where}[{k}]", x) for k, x in reversed(list(enumerate(v))))
        else:
            out.append((where, v))
    return out


def _holds(datatype: str, value: Any) -> bool:
    """Whether Triton's reader takes ``value`` for ``datatype`` (its range is checked after, a 400)."""
    if datatype == "BYTES":
        return isinstance(value, str)
    if datatype == "BOOL":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if datatype in INT_RANGES:
        low, _ = INT_RANGES[datatype]
        return isinstance(value, int) and (low < 0 or value >= 0)
    return isinstance(value, int | float)


def _check_output(path: str, value: Any) -> None:
    spec = _object(path, value)
    _string(path, spec, "name")
    params = _check_parameters(f"{path}.parameters", spec)
    if "binary_data" in params and not isinstance(params["binary_data"], bool):
        raise InferFieldError(f"{path}.parameters.binary_data", "true or false", params["binary_data"])
    if "classification" in params and (
        isinstance(params["classification"], bool) or not isinstance(params["classification"], int)
    ):
        raise InferFieldError(f"{path}.parameters.classification", "an integer", params["classification"])
