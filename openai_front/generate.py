"""Triton's HTTP generate extension (``POST /v2/models/<m>[/versions/<v>]/generate`` and
``/generate_stream``), served by the front over its gRPC connection to Triton.

Triton 2.51's own endpoint does not cancel a request whose client went away, answers 500 to many
client errors and 200 (with an error body) to requests a decoupled model cannot answer once. Here a
request is one gRPC stream, left (so cancelled in Triton) when its HTTP client goes away, and every
client error is a 4xx. Valid requests get Triton's own answer, byte for byte, by Triton's rules
(server ``src/http_server.cc``, r24.10: ``HandleGenerate``, ``GenerateRequestClass``;
``docs/protocol/extension_generate.md``):

- The body is one JSON object. A key naming one of the model's inputs is that input's tensor: a
  scalar is one element, an array its (flattened) elements; the metadata's shape is filled in by
  dividing the count by the fixed dimensions, the innermost -1 taking what is left and any other
  -1 one. Any other key is a request parameter (a string, an integer that fits int64, a bool or
  any other number as a double); ``parameters`` is an object whose keys follow the same two rules
  (but no nested ``parameters``). ``id``, a string, is also the request's id.
- A response is an object of ``id`` (when the request had a non-empty one), ``model_name``,
  ``model_version``, the response's parameters and its outputs, the first of these named so
  winning, keys sorted (Triton builds a ``std::map``). An output of one element is that element, any
  other a flat array; BYTES are strings, written as rapidjson writes them (``_string``), numbers too
  (``_double``).
- ``/generate`` answers one response as ``application/json``; ``/generate_stream`` each one as a
  server-sent event ``data: <json>\\n\\n`` (``text/event-stream; charset=utf-8``), an error response
  as ``data: {"error": ...}\\n\\n``, the status taken from the first response. A request refused
  before it runs is ``{"error": ...}`` as ``application/json``.

Where Triton answers 500 (invalid JSON, ``NaN``, a number too large for a double, a wrong type for
an input), or silently truncates (an integer beyond an INT32 input's range), this answers 400
naming what was sent; a required input left out is a 400 naming it (Triton runs such a request and
may answer 200 with no response); ``/generate`` on a request that streams is a 400 saying to use
``generate_stream`` (Triton: 200 with an error body).
"""

from __future__ import annotations

import functools
import json
import math
import re
import struct
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, AsyncGenerator, AsyncIterator, Callable, Mapping, Protocol, Sequence

import anyio
import numpy as np
from starlette.responses import Response, StreamingResponse

from .protocol import FrontError
from .triton import POST_PROCESSOR, STREAM_ERRORS, InputInfo, ModelInterface, ParameterValue, Reply, Tensor

JSON_MEDIA_TYPE = "application/json"
SSE_MEDIA_TYPE = "text/event-stream; charset=utf-8"
PARAMETERS_KEY = "parameters"  # Triton's one nested schema key
ID_KEY = "id"
# Request parameters Triton's gRPC front reads as request settings (or refuses: "triton_"), where its
# generate endpoint passes them to the model as plain parameters. No model of this repository reads
# request parameters, so they are checked as any parameter and not forwarded.
GRPC_SETTINGS = frozenset({"sequence_id", "sequence_start", "sequence_end", "priority", "timeout"})
GRPC_RESERVED_PREFIX = "triton_"
# The integers each datatype takes, and the numpy type of its little-endian contents.
INT_RANGES = {
    "INT8": (-(2**7), 2**7 - 1),
    "INT16": (-(2**15), 2**15 - 1),
    "INT32": (-(2**31), 2**31 - 1),
    "INT64": (-(2**63), 2**63 - 1),
    "UINT8": (0, 2**8 - 1),
    "UINT16": (0, 2**16 - 1),
    "UINT32": (0, 2**32 - 1),
    "UINT64": (0, 2**64 - 1),
}
NUMPY_TYPES = {
    "BOOL": "u1",
    "INT8": "<i1",
    "INT16": "<i2",
    "INT32": "<i4",
    "INT64": "<i8",
    "UINT8": "u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
    "FP32": "<f4",
    "FP64": "<f8",
}
FP32_MAX = float(np.finfo(np.float32).max)
# Integers rapidjson keeps as integers; any other is parsed as a double (and so is, to Triton).
JSON_INT_RANGE = (-(2**63), 2**64 - 1)
INT64_MAX = 2**63 - 1
UNKNOWN_ID = "<id_unknown>"  # what Triton's messages say for a request without an id
MAX_CACHED_MODELS = 256


# --- errors: each a 4xx (or Triton's own status) answered as {"error": message} -------------------


class GenerateError(Exception):
    """A generate request answered with an error: Triton's shape, ``{"error": message}``."""

    status: int = HTTPStatus.BAD_REQUEST

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = int(status)

    def response(self) -> Response:
        return Response(error_json(self.message), status_code=self.status, media_type=JSON_MEDIA_TYPE)


class MethodNotAllowedError(GenerateError):
    """Generate takes POST only (Triton's words)."""

    status = HTTPStatus.METHOD_NOT_ALLOWED

    def __init__(self) -> None:
        super().__init__("Method Not Allowed")


class NoSuchRouteError(GenerateError):
    """A version that is not a number: Triton's route takes none (its answer)."""

    status = HTTPStatus.NOT_FOUND

    def __init__(self) -> None:
        super().__init__("Not Found")


class TritonCallError(GenerateError):
    """A call into Triton failed: its status (404 for an unknown model, 503 while Triton is away)."""

    def __init__(self, e: FrontError) -> None:
        super().__init__(e.message, e.status)


class GenerateFaultError(GenerateError):
    """A fault of the front itself: a 500."""

    status = HTTPStatus.INTERNAL_SERVER_ERROR

    def __init__(self, e: Exception) -> None:
        super().__init__(f"{type(e).__name__}: {e}")


class GenerateBodyTooLargeError(GenerateError):
    status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"The request body is {size} bytes or more, over the limit of {limit} bytes.")


class GenerateBodyNotJSONError(GenerateError):
    """The body is not one strict JSON text (Triton's parser: rapidjson)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"The request body is not valid JSON: {detail}")


class BodyNumberError(GenerateBodyNotJSONError):
    """``NaN`` / ``Infinity`` (no JSON value), or a number beyond a double's range."""

    def __init__(self, token: str, why: str) -> None:
        super().__init__(f"{token[:40]} {why}.")


class GenerateBodyNotObjectError(GenerateError):
    def __init__(self, value: Any) -> None:
        super().__init__(f"The request body must be a JSON object, got {describe(value)}.")


class RequestIdError(GenerateError):
    """``id`` must be a string (Triton: "Unable to parse 'id'")."""

    def __init__(self, value: Any) -> None:
        super().__init__(f"Unable to parse 'id': it must be a string, got {describe(value)}.")


class ParametersKeywordError(GenerateError):
    """The model has an input named ``parameters``, the keyword of Triton's nested schema."""

    def __init__(self) -> None:
        super().__init__(f"Keyword '{PARAMETERS_KEY}' for nested schema also given as input tensor name")


class ParametersNotObjectError(GenerateError):
    def __init__(self, value: Any) -> None:
        super().__init__(f"Expected JSON object for keyword: '{PARAMETERS_KEY}', got {describe(value)}.")


class InParametersError(GenerateError):
    """An error of a key inside ``parameters``, named as Triton names it."""

    def __init__(self, inner: GenerateError) -> None:
        super().__init__(f"Converting keyword: '{PARAMETERS_KEY}': {inner.message}", inner.status)


class ParameterTypeError(GenerateError):
    """A key that is no input of the model is a parameter: a string, a number or a bool."""

    def __init__(self, key: str, value: Any) -> None:
        super().__init__(
            f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'; "
            f"got {describe(value)}."
        )


class DuplicateInputError(GenerateError):
    def __init__(self, name: str) -> None:
        super().__init__(f"input '{name}' already exists in request")


class InputValueError(GenerateError):
    """A value an input's datatype cannot hold: the wrong JSON type, or out of its range."""

    def __init__(self, name: str, model: str, datatype: str, value: Any) -> None:
        super().__init__(
            f"input '{name}' of model '{model}' is {datatype}, which takes {takes(datatype)}; got {describe(value)}."
        )


class InputNestingError(GenerateError):
    """Nested arrays whose elements do not match the outer array's length (Triton reads the
    outer length as the element count)."""

    def __init__(self, name: str, count: int, leaves: int) -> None:
        super().__init__(
            f"input '{name}': the array holds {count} elements but its nested arrays {leaves} values; "
            "nest only as many values as the outer array has elements."
        )


class InputShapeError(GenerateError):
    """Triton's words: the elements do not fill the input's shape."""

    def __init__(self, name: str, count: int, shape: Sequence[int]) -> None:
        super().__init__(
            f"The schema can not convert input '{name}' to tensor with proper shape "
            f"({count} elements for shape {list(shape)})"
        )


class UnsupportedDatatypeError(GenerateError):
    """FP16 and BF16 do not travel as JSON (Triton's words)."""

    def __init__(self, name: str, datatype: str) -> None:
        super().__init__(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data format for input {name}"
        )


class MissingInputsError(GenerateError):
    """Required inputs left out, in the words of Triton's own check (which misses them when the
    count of inputs is in range: a ``completion`` without ``max_tokens`` then ran, and answered
    nothing)."""

    def __init__(
        self, model: str, client_id: str, given: Sequence[str], missing: Sequence[str], required: int, total: int
    ) -> None:
        got = f"Got input(s) {_names(given)}, but missing required input(s) {_names(missing)}."
        if required <= len(given) <= total:
            head = f"missing required input(s) for model '{model}'. {got}"
        else:
            expected = f"{total} inputs" if required == total else f"number of inputs between {required} and {total}"
            head = f"expected {expected} but got {len(given)} inputs for model '{model}'. {got}"
        super().__init__(f"[request id: {client_id or UNKNOWN_ID}] {head} Please provide all required input(s).")


class ModelRefusedError(GenerateError):
    """The model's error response: its message, a 4xx for the client's mistake (the stages'
    refusals, Triton's request checks), a 5xx for a fault (``client.stream_error_kind``)."""

    def __init__(self, message: str) -> None:
        from client import stream_error_kind

        super().__init__(message, STREAM_ERRORS[stream_error_kind(message)])


class OutputNotJSONError(GenerateError):
    """An FP16 / BF16 output, which Triton does not write as JSON either (its words)."""

    def __init__(self, datatype: str) -> None:
        super().__init__(
            f"sending {datatype} data via JSON is not supported. Please use the binary data format for output"
        )


class UseGenerateStreamError(GenerateError):
    """More than one response on ``/generate`` (Triton answers 200 with an error body)."""

    def __init__(self, model: str) -> None:
        super().__init__(
            f"model '{model}' sent more than one response to this request; generate answers exactly one: "
            "use generate_stream (or ask the model not to stream)"
        )


class NoResponseError(GenerateError):
    def __init__(self, model: str) -> None:
        super().__init__(
            f"model '{model}' sent no response to this request; generate answers exactly one: use generate_stream"
        )


def _names(names: Sequence[str]) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def describe(value: Any) -> str:
    """A JSON value as a message names it: its JSON type, and the value when short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"integer {value}" if len(str(value)) <= 40 else "an integer of more than 40 digits"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"string {json.dumps(shown)}"
    if isinstance(value, Pairs):
        return "object"
    return "array"


def takes(datatype: str) -> str:
    """What an input of ``datatype`` takes, as a message says it."""
    if datatype in INT_RANGES:
        low, high = INT_RANGES[datatype]
        return f"integers from {low} to {high}"
    if datatype == "BOOL":
        return "true or false"
    if datatype in ("FP32", "FP64"):
        return "numbers" if datatype == "FP64" else f"numbers of magnitude up to {FP32_MAX!r}"
    if datatype == "BYTES":
        return "strings"
    return f"no JSON value (datatype {datatype})"


# --- the body as JSON, with rapidjson's reading of numbers ---------------------------------------


class Pairs(list[tuple[str, Any]]):
    """A JSON object's members in order, duplicates kept (rapidjson keeps them too; Triton reads
    the first of a parameter, and an input given twice is an error)."""

    def first(self) -> dict[str, Any]:
        """Each key's first value (what rapidjson's ``Find`` returns)."""
        out: dict[str, Any] = {}
        for key, value in self:
            out.setdefault(key, value)
        return out


def _refuse_constant(token: str) -> Any:
    raise BodyNumberError(token, "is not a JSON value")


def _float(token: str) -> float:
    value = float(token)
    if math.isinf(value):
        raise BodyNumberError(token, "is too large for a double")
    return value


def _int(token: str) -> int | float:
    value = int(token)
    if JSON_INT_RANGE[0] <= value <= JSON_INT_RANGE[1]:
        return value
    # rapidjson reads an integer beyond 64 bits as a double: an input then refuses it, a
    # parameter is that double.
    return _float(token)


def parse_body(raw: bytes) -> Pairs:
    """The request body as the members of one JSON object; a ``GenerateError`` naming what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise GenerateBodyNotJSONError(f"it is not UTF-8 ({e})") from None
    if not text.strip():
        raise GenerateBodyNotJSONError("the body is empty; a JSON object is expected")
    try:
        body = json.loads(
            text, object_pairs_hook=Pairs, parse_constant=_refuse_constant, parse_float=_float, parse_int=_int
        )
    except RecursionError:
        raise GenerateBodyNotJSONError("it nests arrays and objects too deeply") from None
    except json.JSONDecodeError as e:
        near = text[max(0, e.pos - 10) : e.pos + 10]
        raise GenerateBodyNotJSONError(f"{e.msg} at character {e.pos} (near {json.dumps(near)})") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise GenerateBodyNotJSONError(str(e)) from None
    if not isinstance(body, Pairs):
        raise GenerateBodyNotObjectError(body)
    if "\\u" in text:  # only an escape can bring a lone surrogate in
        _refuse_lone_surrogates(body)
    return body


def _refuse_lone_surrogates(value: Any) -> None:
    """rapidjson refuses a lone UTF-16 surrogate escape; Python's parser keeps it."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                bad = v[e.start : e.end].encode("unicode_escape").decode()
                raise GenerateBodyNotJSONError(f"{describe(v)} holds a lone UTF-16 surrogate ({bad})") from None
        elif isinstance(v, Pairs):
            stack.extend(k for k, _ in v)
            stack.extend(x for _, x in v)
        elif isinstance(v, list):
            stack.extend(v)


# --- JSON -> the request's tensors and parameters ------------------------------------------------


@dataclass(frozen=True)
class GenerateRequest:
    """One generate request, ready for Triton."""

    model: ModelInterface
    """The model it names."""

    version: str
    """The version it names ("" for Triton's choice)."""

    inputs: tuple[Tensor, ...]
    """Its tensors, in the body's order."""

    parameters: Mapping[str, ParameterValue]
    """Its request parameters (``GRPC_SETTINGS`` and "triton_" ones left out)."""

    client_id: str
    """Its ``id``: "" when none."""


def convert(model: ModelInterface, version: str, body: Pairs) -> GenerateRequest:
    """A parsed body as the request Triton's generate would make of it (see the module's rules)."""
    first = body.first()
    client_id = first.get(ID_KEY, "")
    if not isinstance(client_id, str):
        raise RequestIdError(client_id)
    inputs = {i.name: i for i in model.inputs}
    tensors: dict[str, Tensor] = {}
    parameters: dict[str, ParameterValue] = {}
    _convert_members(model, inputs, body, tensors, parameters, nested_schema=True)
    missing = model.missing(tensors)
    if missing:
        # the given ones in the body's order
        raise MissingInputsError(model.name, client_id, list(tensors), missing, model.required, len(model.inputs))
    forwarded = {
        k: v for k, v in parameters.items() if k not in GRPC_SETTINGS and not k.startswith(GRPC_RESERVED_PREFIX)
    }
    return GenerateRequest(model, version, tuple(tensors.values()), forwarded, client_id)


def _convert_members(
    model: ModelInterface,
    inputs: Mapping[str, InputInfo],
    members: Pairs,
    tensors: dict[str, Tensor],
    parameters: dict[str, ParameterValue],
    *,
    nested_schema: bool,
) -> None:
    first = members.first()
    for key, _ in members:
        if nested_schema and key == PARAMETERS_KEY:
            if key in inputs:
                raise ParametersKeywordError()
            nested = first[key]
            if not isinstance(nested, Pairs):
                raise ParametersNotObjectError(nested)
            try:
                _convert_members(model, inputs, nested, tensors, parameters, nested_schema=False)
            except GenerateError as e:
                raise InParametersError(e) from None
        elif key in inputs:
            if key in tensors:
                raise DuplicateInputError(key)
            tensors[key] = to_tensor(model.name, inputs[key], first[key])
        else:
            parameters.setdefault(key, to_parameter(key, first[key]))


def to_parameter(key: str, value: Any) -> ParameterValue:
    """A value as Triton's generate sets a parameter: a string, an int64, a bool, else a double."""
    if isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value if value <= INT64_MAX else float(value)  # rapidjson: not an Int64, a number
    if isinstance(value, float):
        return value
    raise ParameterTypeError(key, value)


def to_tensor(model: str, spec: InputInfo, value: Any) -> Tensor:
    """A JSON value as the tensor Triton's generate makes of it for input ``spec``."""
    if spec.datatype in ("FP16", "BF16"):
        raise UnsupportedDatatypeError(spec.name, spec.datatype)
    count = len(value) if isinstance(value, list) and not isinstance(value, Pairs) else 1
    leaves = _leaves(value)
    shape = fill_shape(spec.name, spec.shape, count)
    if len(leaves) != count:
        raise InputNestingError(spec.name, count, len(leaves))
    return Tensor(spec.name, spec.datatype, shape, _contents(model, spec, leaves))


def _leaves(value: Any) -> list[Any]:
    """The values of nested arrays, in order (no recursion: the parser takes deeper nesting than
    Python's stack)."""
    if not isinstance(value, list) or isinstance(value, Pairs):
        return [value]
    out: list[Any] = []
    stack = [iter(value)]
    while stack:
        v = next(stack[-1], stack)  # the stack itself: this iterator is done
        if v is stack:
            stack.pop()
        elif isinstance(v, list) and not isinstance(v, Pairs):
            stack.append(iter(v))
        else:
            out.append(v)
    return out


def fill_shape(name: str, dims: Sequence[int], count: int) -> tuple[int, ...]:
    """Triton's two passes: the fixed dimensions divide ``count``; the innermost -1 takes the rest,
    any other -1 is 1."""
    shape = list(dims)
    left = count
    for d in reversed(shape):
        if d != -1:
            if d <= 0 or left % d:
                raise InputShapeError(name, count, dims)
            left //= d
    for i in reversed(range(len(shape))):
        if shape[i] == -1:
            shape[i], left = left, 1
    if left != 1:
        raise InputShapeError(name, count, dims)
    return tuple(shape)


def _contents(model: str, spec: InputInfo, leaves: list[Any]) -> bytes:
    dt = spec.datatype

    def refuse(v: Any) -> InputValueError:
        return InputValueError(spec.name, model, dt, v)

    if dt == "BYTES":
        parts = []
        for v in leaves:
            if not isinstance(v, str):
                raise refuse(v)
            b = v.encode("utf-8")
            parts.append(struct.pack("<I", len(b)) + b)
        return b"".join(parts)
    if dt == "BOOL":
        if any(not isinstance(v, bool) for v in leaves):
            raise refuse(next(v for v in leaves if not isinstance(v, bool)))
        return bytes(1 if v else 0 for v in leaves)
    if dt in INT_RANGES:
        low, high = INT_RANGES[dt]
        for v in leaves:
            if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
                raise refuse(v)
        return np.array(leaves, dtype=NUMPY_TYPES[dt]).tobytes()
    if dt in ("FP32", "FP64"):
        for v in leaves:
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise refuse(v)
            if dt == "FP32" and abs(float(v)) > FP32_MAX:
                raise refuse(v)
        return np.array([float(v) for v in leaves], dtype=NUMPY_TYPES[dt]).tobytes()
    raise UnsupportedDatatypeError(spec.name, dt)


# --- responses as Triton writes them ---------------------------------------------------------------

_ESCAPED = re.compile(rb'[\x00-\x1f"\\]')
_SHORT_ESCAPES = {0x08: b"\\b", 0x09: b"\\t", 0x0A: b"\\n", 0x0C: b"\\f", 0x0D: b"\\r", 0x22: b'\\"', 0x5C: b"\\\\"}


def _escape(m: re.Match[bytes]) -> bytes:
    c = m.group()[0]
    return _SHORT_ESCAPES.get(c) or b"\\u00%02X" % c


def _string(raw: bytes) -> bytes:
    """A JSON string as rapidjson's writer makes it: control characters, ``"`` and ``\\`` escaped
    (\\uXXXX in upper case), every other byte as it is."""
    return b'"' + _ESCAPED.sub(_escape, raw) + b'"'


# rapidjson writes a double with Grisu2 (Loitsch 2010): digits that read back, not always the
# shortest (Python's repr) nor the closest; Triton's answers hold its exact digits, so they are made
# the same way here: 64-bit fixed-point arithmetic against a cached power of ten.
_U64 = (1 << 64) - 1


def _power_of_ten(k: int) -> tuple[int, int]:
    """10**k as (f, e): f * 2**e, f a 64-bit integer with its top bit set, rounded to nearest."""
    num, den = (10**k, 1) if k >= 0 else (1, 10**-k)
    e = num.bit_length() - den.bit_length() - 64
    while True:
        n, d = (num, den << e) if e >= 0 else (num << -e, den)
        f = (2 * n + d) // (2 * d)
        if f >= 1 << 64:
            e += 1
        elif f < 1 << 63:
            e -= 1
        else:
            return f, e


_POWERS = [_power_of_ten(-348 + 8 * i) for i in range(87)]  # 10**-348, 10**-340, ..., 10**340


def _mul(af: int, ae: int, bf: int, be: int) -> tuple[int, int]:
    """The upper 64 bits of a 128-bit product, rounded half up."""
    return ((af * bf + (1 << 63)) >> 64) & _U64, ae + be + 64


def _grisu2(x: float) -> tuple[str, int]:
    """Digits and exponent (x ~ digits * 10**k) of a positive finite double."""
    bits = struct.unpack("<Q", struct.pack("<d", x))[0]
    biased, significand = (bits >> 52) & 0x7FF, bits & ((1 << 52) - 1)
    f, e = (significand | 1 << 52, biased - 1075) if biased else (significand, -1074)
    # The interval of values that read back as x: its upper bound with its top bit at bit 63 ...
    plus_f, plus_e = (f << 1) + 1, e - 1
    while not plus_f & (1 << 53):
        plus_f, plus_e = plus_f << 1, plus_e - 1
    plus_f, plus_e = plus_f << 10, plus_e - 10
    # ... and its lower bound (closer below a power of two) on the same exponent.
    minus_f, minus_e = ((f << 2) - 1, e - 2) if f == 1 << 52 else ((f << 1) - 1, e - 1)
    minus_f <<= minus_e - plus_e
    shift = 64 - f.bit_length()
    v_f, v_e = f << shift, e - shift
    # The cached power that brings the upper bound's exponent into [-60, -32].
    k = 355 - (((61 + plus_e) * 78913) >> 18)
    c_f, c_e = _POWERS[k // 8]
    big_k = 348 - (k & ~7)
    w_f, _ = _mul(v_f, v_e, c_f, c_e)
    hi_f, hi_e = _mul(plus_f, plus_e, c_f, c_e)
    lo_f, _ = _mul(minus_f, plus_e, c_f, c_e)
    hi_f, lo_f = hi_f - 1, lo_f + 1
    return _digits(w_f, hi_f, hi_e, (hi_f - lo_f) & _U64, big_k)


def _digits(w_f: int, hi_f: int, hi_e: int, delta: int, big_k: int) -> tuple[str, int]:
    """Grisu2's digit generation: the digits of the upper bound, until what is left fits in the
    interval (``delta``), the last one then stepped toward the value."""
    one = 1 << -hi_e
    dist = (hi_f - w_f) & _U64  # upper bound minus the value
    p1, p2 = hi_f >> -hi_e, hi_f & (one - 1)
    kappa = min(len(str(p1)), 9)
    out: list[int] = []
    while kappa > 0:
        d, p1 = divmod(p1, 10 ** (kappa - 1))
        if d or out:
            out.append(d)
        kappa -= 1
        rest = ((p1 << -hi_e) + p2) & _U64
        if rest <= delta:
            _round_down(out, delta, rest, ((10**kappa) << -hi_e) & _U64, dist)
            return "".join(map(str, out)), big_k + kappa
    while True:
        p2, delta = (p2 * 10) & _U64, (delta * 10) & _U64
        d = p2 >> -hi_e
        if d or out:
            out.append(d)
        p2 &= one - 1
        kappa -= 1
        if p2 < delta:
            scale = 10**-kappa if -kappa < 9 else 0  # rapidjson's table of 32-bit powers ends there
            _round_down(out, delta, p2, one, (dist * scale) & _U64)
            return "".join(map(str, out)), big_k + kappa


def _round_down(out: list[int], delta: int, rest: int, ten_kappa: int, dist: int) -> None:
    while (
        rest < dist
        and (delta - rest) & _U64 >= ten_kappa
        and ((rest + ten_kappa) & _U64 < dist or (dist - rest) & _U64 > (rest + ten_kappa - dist) & _U64)
    ):
        out[-1] -= 1
        rest = (rest + ten_kappa) & _U64


def _double(x: float) -> bytes:
    """A double as rapidjson's writer makes it (``kWriteNanAndInfFlag``): Grisu2's digits, laid
    out as ``1.0``, ``0.001``, ``1e21``, ``1.5e-7``."""
    if math.isnan(x):
        return b"NaN"
    if math.isinf(x):
        return b"Infinity" if x > 0 else b"-Infinity"
    sign = b"-" if math.copysign(1.0, x) < 0 else b""
    return sign + (b"0.0" if x == 0 else _positive_double(abs(x)))


@functools.lru_cache(maxsize=1 << 16)  # a model's floats repeat (bfloat16 has 65,536 values)
def _positive_double(x: float) -> bytes:
    digits, k = _grisu2(x)
    n = len(digits)
    kk = n + k  # 10**(kk-1) <= x < 10**kk
    if 0 <= k and kk <= 21:
        text = digits + "0" * k + ".0"
    elif 0 < kk <= 21:
        text = digits[:kk] + "." + digits[kk:]
    elif -6 < kk <= 0:
        text = "0." + "0" * -kk + digits
    elif kk < -324:
        text = "0.0"
    elif n == 1:
        text = f"{digits}e{kk - 1}"
    else:
        text = f"{digits[0]}.{digits[1:]}e{kk - 1}"
    return text.encode()


def _scalar(value: ParameterValue) -> bytes:
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return _double(value)
    return _string(value.encode("utf-8"))


def _elements(t: Tensor) -> list[bytes]:
    count = math.prod(t.shape)
    if t.datatype == "BYTES":
        out, offset = [], 0
        for _ in range(count):
            (n,) = struct.unpack_from("<I", t.data, offset)
            out.append(_string(t.data[offset + 4 : offset + 4 + n]))
            offset += 4 + n
        return out
    if t.datatype in ("FP16", "BF16"):
        raise OutputNotJSONError(t.datatype)
    values = np.frombuffer(t.data, dtype=NUMPY_TYPES[t.datatype], count=count)
    if t.datatype == "BOOL":
        return [b"true" if v else b"false" for v in values.tolist()]
    if t.datatype in ("FP32", "FP64"):
        return [_double(float(v)) for v in values.tolist()]
    return [str(v).encode() for v in values.tolist()]


def _tensor_json(t: Tensor) -> bytes:
    elements = _elements(t)
    # Triton: "if only 1 element, strip out the array"
    return elements[0] if len(elements) == 1 else b"[" + b",".join(elements) + b"]"


def response_json(reply: Reply, client_id: str) -> bytes:
    """One response as Triton's generate writes it (see the module's rules)."""
    fields: dict[str, bytes] = {}
    if client_id:
        fields[ID_KEY] = _string(client_id.encode("utf-8"))
    fields["model_name"] = _string(reply.model_name.encode("utf-8"))
    fields["model_version"] = _string(reply.model_version.encode("utf-8"))
    for key, value in reply.parameters:
        fields.setdefault(key, _scalar(value))
    for t in reply.outputs:
        if t.name not in fields:
            fields[t.name] = _tensor_json(t)
    keys = sorted(fields, key=lambda k: k.encode("utf-8"))  # std::map<std::string>: byte order
    return b"{" + b",".join(_string(k.encode("utf-8")) + b":" + fields[k] for k in keys) + b"}"


def error_json(message: str) -> bytes:
    return b'{"error":' + _string(message.encode("utf-8", "replace")) + b"}"


def sse(body: bytes) -> bytes:
    return b"data: " + body + b"\n\n"


# --- the service ---------------------------------------------------------------------------------


class GenerateBackend(Protocol):
    """What generate needs of Triton (``triton.Ensembles``, or a fake in tests)."""

    async def model_interface(self, model: str, version: str = "") -> ModelInterface: ...

    def stream(
        self,
        model: str,
        version: str,
        inputs: Sequence[Tensor],
        parameters: Mapping[str, ParameterValue],
        rid: str,
        *,
        stop_post_processor: bool = False,
    ) -> AsyncGenerator[Reply, None]: ...


async def read_raw(chunks: AsyncIterator[bytes], declared_length: str | None, limit: int) -> bytes:
    """The body's bytes, under ``limit`` (a declared length over it is refused before reading)."""
    if declared_length is not None and declared_length.strip().isdigit() and int(declared_length) > limit:
        raise GenerateBodyTooLargeError(int(declared_length), limit)
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise GenerateBodyTooLargeError(size, limit)
        parts.append(chunk)
    return b"".join(parts)


class GenerateService:
    """Triton's generate and generate_stream, over a ``GenerateBackend``."""

    def __init__(self, backend: Callable[[], GenerateBackend]) -> None:
        self._backend = backend
        self._models: dict[tuple[str, str], ModelInterface] = {}

    async def model(self, model: str, version: str) -> ModelInterface:
        """The model's interface, asked of Triton once and kept; Triton away forgets them all (it
        may come back with another repository)."""
        if version and not re.fullmatch("[0-9]+", version):
            raise NoSuchRouteError()
        key = (model, version)
        if key not in self._models:
            try:
                found = await self._backend().model_interface(model, version)
            except FrontError as e:
                if e.status == HTTPStatus.SERVICE_UNAVAILABLE:
                    self._models.clear()
                raise TritonCallError(e) from None
            if len(self._models) >= MAX_CACHED_MODELS:
                self._models.clear()
            self._models[key] = found
        return self._models[key]

    async def prepare(self, model: str, version: str, raw: bytes) -> GenerateRequest:
        """The request, checked as Triton checks it: the model first, then the body."""
        interface = await self.model(model, version)
        return convert(interface, version, parse_body(raw))

    def _replies(self, req: GenerateRequest) -> tuple[str, AsyncGenerator[Reply, None]]:
        rid = f"front-{uuid.uuid4().hex}"
        replies = self._backend().stream(
            req.model.name,
            req.version,
            req.inputs,
            req.parameters,
            rid,
            stop_post_processor=req.model.runs(POST_PROCESSOR),
        )
        return rid, replies

    async def whole(self, req: GenerateRequest) -> Response:
        """``/generate``: the one response, or the error that stands for it."""
        rid, replies = self._replies(req)
        answers = _answers(req, replies)
        got: Reply | None = None
        try:
            async for reply in answers:
                if got is not None:
                    raise UseGenerateStreamError(req.model.name)  # leaving cancels the request
                got = reply
        finally:
            # Also when cancelled (the client went away): the stream's clean-up cancels the
            # request in Triton and stops the engine.
            await _close(answers, replies)
        if got is None:
            raise NoResponseError(req.model.name)
        return Response(_body(req, rid, got), media_type=JSON_MEDIA_TYPE)

    async def stream(self, req: GenerateRequest) -> Response:
        """``/generate_stream``: each response an event, the status the first one's (read before
        any byte is sent, as Triton does)."""
        rid, replies = self._replies(req)
        answers = _answers(req, replies)
        try:
            first = await anext(answers, None)
        except BaseException:  # a failed call, or the client went away meanwhile
            await _close(answers, replies)
            raise
        status, head = HTTPStatus.OK, b""
        if first is not None:
            try:
                head = sse(_body(req, rid, first))
            except GenerateError as e:
                status, head = e.status, sse(error_json(e.message))
        events = self._events(req, rid, head, answers, replies)
        return StreamingResponse(events, status_code=status, media_type=SSE_MEDIA_TYPE)

    async def _events(
        self,
        req: GenerateRequest,
        rid: str,
        head: bytes,
        answers: AsyncGenerator[Reply, None],
        replies: AsyncGenerator[Reply, None],
    ) -> AsyncIterator[bytes]:
        """The events after the first one's: an error response is an error event and the stream
        goes on, as Triton's does; a failed call ends it with one."""
        try:
            if head:
                yield head
            while True:
                try:
                    reply = await anext(answers, None)
                except GenerateError as e:  # the call failed: Triton went away mid-stream
                    yield sse(error_json(e.message))
                    return
                if reply is None:
                    return
                try:
                    event = sse(_body(req, rid, reply))
                except GenerateError as e:
                    event = sse(error_json(e.message))
                yield event
        finally:
            # Also when the client went away (starlette cancels this task): the stream's
            # clean-up cancels the request in Triton.
            await _close(answers, replies)


async def _close(answers: AsyncGenerator[Reply, None], replies: AsyncGenerator[Reply, None]) -> None:
    """Ends a request's streams, even inside a cancelled task (the shield lets the clean-up run)."""
    with anyio.CancelScope(shield=True):
        await answers.aclose()
        await replies.aclose()


async def _answers(req: GenerateRequest, replies: AsyncGenerator[Reply, None]) -> AsyncGenerator[Reply, None]:
    """The responses Triton's generate would see: a decoupled model's flag-only end is none, and
    a failed call is Triton's status."""
    while True:
        try:
            reply = await anext(replies)
        except StopAsyncIteration:
            return
        except FrontError as e:
            raise TritonCallError(e) from None
        if req.model.decoupled and reply.flag_only:
            continue
        yield reply


def _body(req: GenerateRequest, rid: str, reply: Reply) -> bytes:
    """A response's JSON, or the ``GenerateError`` it stands for."""
    if reply.error:
        # Triton's own checks name the request by its id: the client's, not the front's.
        raise ModelRefusedError(reply.error.replace(rid, req.client_id or UNKNOWN_ID))
    return response_json(reply, req.client_id)
