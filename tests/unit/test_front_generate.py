"""Triton's generate extension as the front serves it (``openai_front/generate.py``), without a
server: the body -> tensors and parameters by Triton's rules, every client error a 4xx naming what
was sent, responses written byte for byte as Triton writes them, and the service's handling of the
model's responses (one on ``generate``, events on ``generate_stream``, cancellation) over a fake of
Triton's gRPC side."""

from __future__ import annotations

import asyncio
import json
import math
import struct
from typing import Any, AsyncGenerator, Callable, Iterable, Mapping, Sequence

import numpy as np
import pytest
from fastapi.testclient import TestClient
from test_openai_front_serving import CARD

from openai_front import generate as g
from openai_front.api_router import create_app
from openai_front.protocol import FrontError
from openai_front.triton import InputInfo, ModelInterface, ParameterValue, Reply, Tensor

# A generation ensemble's interface, as Triton's metadata and config give it (the batch dimension first).
COMPLETION = ModelInterface(
    name="completion",
    inputs=(
        InputInfo("prompt", "BYTES", (-1, 1), True),
        InputInfo("prompt_token_ids", "INT32", (-1, -1), True),
        InputInfo("max_tokens", "INT32", (-1, 1), False),
        InputInfo("stream", "BOOL", (-1, 1), True),
        InputInfo("sampling_params", "BYTES", (-1, 1), True),
    ),
    decoupled=True,
    steps=("tokenize", "generation_params", "detokenize"),
)
# One of each datatype, shapes without a batch dimension.
TYPED = ModelInterface(
    name="typed",
    inputs=(
        InputInfo("i8", "INT8", (1,), True),
        InputInfo("i32", "INT32", (-1,), True),
        InputInfo("i64", "INT64", (1,), True),
        InputInfo("u8", "UINT8", (1,), True),
        InputInfo("u64", "UINT64", (1,), True),
        InputInfo("f32", "FP32", (-1,), True),
        InputInfo("f64", "FP64", (1,), True),
        InputInfo("flag", "BOOL", (1,), True),
        InputInfo("words", "INT32", (2, -1), True),
        InputInfo("text", "BYTES", (-1,), True),
        InputInfo("half", "FP16", (1,), True),
    ),
    decoupled=False,
)
RENDER = ModelInterface("render_completion", (InputInfo("prompt", "BYTES", (-1, 1), False),), decoupled=False)
ALL_REQUIRED = ModelInterface(
    "pair", (InputInfo("a", "INT32", (1,), False), InputInfo("b", "INT32", (1,), False)), decoupled=False
)
WITH_PARAMETERS_INPUT = ModelInterface("odd", (InputInfo("parameters", "BYTES", (1,), True),), decoupled=False)
MODELS = {m.name: m for m in (COMPLETION, TYPED, RENDER, ALL_REQUIRED, WITH_PARAMETERS_INPUT)}
SEQUENCE = (("sequence_end", False), ("sequence_id", 0), ("sequence_start", False))


def body(text: str | bytes) -> g.Pairs:
    return g.parse_body(text.encode() if isinstance(text, str) else text)


def request(model: ModelInterface, text: str) -> g.GenerateRequest:
    return g.convert(model, "", body(text))


def tensor(req: g.GenerateRequest, name: str) -> Tensor:
    [t] = [t for t in req.inputs if t.name == name]
    return t


def strings(data: bytes) -> list[bytes]:
    out, offset = [], 0
    while offset < len(data):
        (n,) = struct.unpack_from("<I", data, offset)
        out.append(data[offset + 4 : offset + 4 + n])
        offset += 4 + n
    return out


def bytes_tensor(name: str, *values: bytes, shape: tuple[int, ...] | None = None) -> Tensor:
    data = b"".join(struct.pack("<I", len(v)) + v for v in values)
    return Tensor(name, "BYTES", shape or (1, len(values)), data)


def array_tensor(name: str, datatype: str, values: Sequence[Any], shape: tuple[int, ...]) -> Tensor:
    return Tensor(name, datatype, shape, np.array(values, dtype=g.NUMPY_TYPES[datatype]).tobytes())


# --- the body --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "error", "names"),
    [
        (b"", g.GenerateBodyNotJSONError, "empty"),
        (b"  \n", g.GenerateBodyNotJSONError, "empty"),
        (b"[]", g.GenerateBodyNotObjectError, "got array"),
        (b'"text"', g.GenerateBodyNotObjectError, 'got string "text"'),
        (b"null", g.GenerateBodyNotObjectError, "got null"),
        (b'{"max_tokens": 1e400}', g.BodyNumberError, "1e400 is too large"),
        (b'{"max_tokens": -1e400}', g.BodyNumberError, "-1e400"),
        (b'{"max_tokens": NaN}', g.BodyNumberError, "NaN is not a JSON value"),
        (b'{"max_tokens": Infinity}', g.BodyNumberError, "Infinity is not a JSON value"),
        (b'{"max_tokens": -Infinity}', g.BodyNumberError, "-Infinity"),
        (b'{"prompt": "x", "max_tokens": 3', g.GenerateBodyNotJSONError, "Expecting ',' delimiter at character 31"),
        (b'{"prompt": "x",}', g.GenerateBodyNotJSONError, "Expecting property name"),
        (b"\xff\xfe{}", g.GenerateBodyNotJSONError, "not UTF-8"),
        (b'{"prompt": "a\\ud800b"}', g.GenerateBodyNotJSONError, "lone UTF-16 surrogate (\\ud800)"),
        (b'{"\\udfff": 1}', g.GenerateBodyNotJSONError, "lone UTF-16 surrogate"),
        (b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", g.GenerateBodyNotJSONError, "too deeply"),
        (b'{"x": ' + b"9" * 5000 + b"}", g.GenerateBodyNotJSONError, ""),
    ],
)
def test_a_body_that_is_no_json_object_is_a_400_naming_what_was_sent(raw, error, names):
    with pytest.raises(error) as e:
        g.parse_body(raw)
    assert e.value.status == 400 and names in e.value.message


def test_numbers_are_read_as_rapidjson_reads_them():
    # Integers in int64 or uint64 range stay integers; beyond, a double (Triton's parameters then
    # carry a double); a float token is always a double.
    got = body('{"a": -9223372036854775808, "b": 18446744073709551615, "c": 18446744073709551616, "d": 1.0}')
    assert got.first() == {"a": -(2**63), "b": 2**64 - 1, "c": float(2**64), "d": 1.0}
    assert isinstance(got.first()["c"], float) and isinstance(got.first()["d"], float)


def test_a_valid_surrogate_pair_is_one_character():
    assert body('{"prompt": "\\ud83d\\ude00"}').first() == {"prompt": "\U0001f600"}


# --- JSON -> tensors and parameters ---------------------------------------------------------------


def test_inputs_become_tensors_of_the_metadata_shape_and_the_rest_parameters():
    req = request(
        COMPLETION,
        '{"prompt": "Hi", "max_tokens": 7, "stream": true, "id": "42", "temperature": 0.5, "top_k": 3,'
        ' "label": "x", "flag": false}',
    )
    assert [t.name for t in req.inputs] == ["prompt", "max_tokens", "stream"]  # the body's order
    assert tensor(req, "prompt") == Tensor("prompt", "BYTES", (1, 1), struct.pack("<I", 2) + b"Hi")
    assert tensor(req, "max_tokens") == Tensor("max_tokens", "INT32", (1, 1), np.int32(7).tobytes())
    assert tensor(req, "stream") == Tensor("stream", "BOOL", (1, 1), b"\x01")
    # ``id`` is also a parameter, as Triton sets it
    assert dict(req.parameters) == {"id": "42", "temperature": 0.5, "top_k": 3, "label": "x", "flag": False}
    assert req.client_id == "42"


def test_a_list_fills_the_innermost_dynamic_dimension():
    req = request(COMPLETION, '{"prompt_token_ids": [19556, 905, 30], "max_tokens": 1}')
    t = tensor(req, "prompt_token_ids")
    assert t.shape == (1, 3) and np.frombuffer(t.data, "<i4").tolist() == [19556, 905, 30]


@pytest.mark.parametrize(
    ("value", "shape", "values"),
    [
        ("[[1], [2]]", (1, 2), [1, 2]),  # nested arrays count as their outer length (Triton's rule)
        ("[]", (1, 0), []),
        ("5", (1, 1), [5]),
    ],
)
def test_prompt_token_ids_shapes(value, shape, values):
    t = tensor(request(COMPLETION, f'{{"prompt_token_ids": {value}, "max_tokens": 1}}'), "prompt_token_ids")
    assert t.shape == shape and np.frombuffer(t.data, "<i4").tolist() == values


def test_several_prompts_are_a_batch_as_triton_makes_it():
    # Triton's generate turns [-1, 1] and two strings into a batch of 2; the ensemble then refuses it.
    t = tensor(request(COMPLETION, '{"prompt": ["a", "bc"], "max_tokens": 1}'), "prompt")
    assert t.shape == (2, 1) and strings(t.data) == [b"a", b"bc"]


def test_fixed_dimensions_divide_the_count():
    assert tensor(request(TYPED, '{"words": [1, 2, 3, 4]}'), "words").shape == (2, 2)
    with pytest.raises(g.InputShapeError, match=r"input 'words' to tensor with proper shape \(3 elements"):
        request(TYPED, '{"words": [1, 2, 3]}')
    assert g.fill_shape("x", (-1, 3, -1), 6) == (1, 3, 2)


@pytest.mark.parametrize(
    ("text", "datatype", "data"),
    [
        ('{"i8": -128}', "<i1", [-128]),
        ('{"i32": [2147483647, -2147483648]}', "<i4", [2**31 - 1, -(2**31)]),
        ('{"i64": 9223372036854775807}', "<i8", [2**63 - 1]),
        ('{"u8": 255}', "u1", [255]),
        ('{"u64": 18446744073709551615}', "<u8", [2**64 - 1]),
        ('{"f32": [1, 0.5, -2.25]}', "<f4", [1.0, 0.5, -2.25]),
        ('{"f64": 1e300}', "<f8", [1e300]),
    ],
)
def test_numbers_take_their_datatype(text, datatype, data):
    [t] = request(TYPED, text).inputs
    assert np.frombuffer(t.data, datatype).tolist() == data


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ('{"i32": 1.5}', ["'i32'", "INT32", "number 1.5"]),
        ('{"i32": 1.0}', ["'i32'", "number 1.0"]),
        ('{"i32": 2147483648}', ["'i32'", "integer 2147483648", "-2147483648 to 2147483647"]),
        ('{"i32": [1, 4294967297]}', ["integer 4294967297"]),
        ('{"i32": true}', ["'i32'", "boolean true"]),
        ('{"i32": "3"}', ["'i32'", 'string "3"']),
        ('{"i32": null}', ["'i32'", "null"]),
        ('{"i32": {"a": 1}}', ["'i32'", "object"]),
        ('{"i64": 9223372036854775808}', ["'i64'", "integer 9223372036854775808"]),
        ('{"i64": 18446744073709551616}', ["'i64'", "number 1.8446744073709552e+19"]),
        ('{"i8": 128}', ["'i8'", "integer 128"]),
        ('{"u8": -1}', ["'u8'", "integer -1"]),
        ('{"u64": -1}', ["'u64'", "integer -1"]),
        ('{"flag": 1}', ["'flag'", "BOOL", "integer 1"]),
        ('{"flag": "true"}', ["'flag'", 'string "true"']),
        ('{"f32": 1e39}', ["'f32'", "number 1e+39"]),
        ('{"f32": false}', ["'f32'", "boolean false"]),
        ('{"text": null}', ["'text'", "BYTES", "null"]),
        ('{"text": ["a", 1]}', ["'text'", "integer 1"]),
        ('{"text": [{"a": "b"}]}', ["'text'", "object"]),
    ],
)
def test_a_value_its_input_cannot_hold_is_a_400_naming_the_input_and_value(text, names):
    with pytest.raises(g.InputValueError) as e:
        request(TYPED, text)
    assert e.value.status == 400 and "model 'typed'" in e.value.message
    for name in names:
        assert name in e.value.message


def test_nested_arrays_must_hold_as_many_values_as_the_outer_one():
    with pytest.raises(g.InputNestingError, match="holds 1 elements but its nested arrays 2 values"):
        request(TYPED, '{"i32": [[1, 2]]}')


def test_fp16_does_not_travel_as_json():
    with pytest.raises(g.UnsupportedDatatypeError, match="receiving FP16 data via JSON is not supported.*input half"):
        request(TYPED, '{"half": 1.0}')


def test_an_input_given_twice_is_refused_and_a_parameter_keeps_its_first_value():
    with pytest.raises(g.DuplicateInputError, match="input 'prompt' already exists in request"):
        request(RENDER, '{"prompt": "a", "prompt": "b"}')
    assert dict(request(RENDER, '{"prompt": "a", "x": 1, "x": null}').parameters) == {"x": 1}


def test_parameters_hold_inputs_and_parameters():
    req = request(COMPLETION, '{"prompt": "a", "parameters": {"max_tokens": 4, "temperature": 0, "stream": false}}')
    assert [t.name for t in req.inputs] == ["prompt", "max_tokens", "stream"]
    assert dict(req.parameters) == {"temperature": 0}


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ('{"prompt": "a", "parameters": 3}', g.ParametersNotObjectError, "keyword: 'parameters', got integer 3"),
        ('{"prompt": "a", "parameters": [1]}', g.ParametersNotObjectError, "got array"),
        (
            '{"parameters": {"prompt": "a", "x": null}}',
            g.InParametersError,
            "Converting keyword: 'parameters': parameter 'x' has invalid type",
        ),
        ('{"prompt": "a", "parameters": {"parameters": {}}}', g.InParametersError, "parameter 'parameters'"),
        (
            '{"prompt": "a", "parameters": {"prompt": "b"}}',
            g.InParametersError,
            "Converting keyword: 'parameters': input 'prompt' already exists",
        ),
        ('{"prompt": "a", "x": null}', g.ParameterTypeError, "parameter 'x' has invalid type"),
        ('{"prompt": "a", "x": [1]}', g.ParameterTypeError, "got array"),
        ('{"prompt": "a", "x": {"y": 1}}', g.ParameterTypeError, "got object"),
        ('{"prompt": "a", "id": 5}', g.RequestIdError, "Unable to parse 'id': it must be a string, got integer 5"),
        ('{"prompt": "a", "id": null}', g.RequestIdError, "got null"),
    ],
)
def test_keys_that_are_no_input_must_be_parameters(text, error, message):
    with pytest.raises(error) as e:
        request(RENDER, text)
    assert e.value.status == 400 and message in e.value.message


def test_a_model_with_an_input_named_parameters_cannot_be_given_it():
    with pytest.raises(g.ParametersKeywordError, match="Keyword 'parameters' for nested schema also given"):
        request(WITH_PARAMETERS_INPUT, '{"parameters": "x"}')


def test_what_grpc_reads_as_request_settings_is_not_forwarded():
    req = request(
        RENDER,
        '{"prompt": "a", "priority": 1, "timeout": "x", "sequence_id": "s", "sequence_start": 3,'
        ' "sequence_end": true, "triton_x": 1, "big": 18446744073709551615, "kept": 1}',
    )
    # Triton's generate passes these to the model as plain parameters, which gRPC cannot carry
    # (it reads them as the request's priority, timeout, sequence; refuses "triton_").
    assert dict(req.parameters) == {"big": float(2**64 - 1), "kept": 1}


def test_a_missing_required_input_is_named_in_tritons_words():
    with pytest.raises(g.MissingInputsError) as e:
        request(COMPLETION, '{"prompt": "a"}')
    assert e.value.message == (
        "[request id: <id_unknown>] missing required input(s) for model 'completion'. Got input(s) ['prompt'], "
        "but missing required input(s) ['max_tokens']. Please provide all required input(s)."
    )
    with pytest.raises(g.MissingInputsError) as e:
        request(RENDER, '{"id": "7"}')
    assert e.value.message == (
        "[request id: 7] expected 1 inputs but got 0 inputs for model 'render_completion'. Got input(s) [], "
        "but missing required input(s) ['prompt']. Please provide all required input(s)."
    )
    with pytest.raises(g.MissingInputsError, match=r"expected 2 inputs but got 0 .* \['a','b'\]"):
        request(ALL_REQUIRED, "{}")
    given = r"Got input\(s\) \['stream','prompt'\], but missing required input\(s\) \['max_tokens'\]"
    with pytest.raises(g.MissingInputsError, match=given):
        request(COMPLETION, '{"stream": true, "prompt": "a"}')
    with pytest.raises(g.MissingInputsError, match=r"expected number of inputs between 1 and 5 but got 0"):
        request(COMPLETION, "{}")


# --- responses as Triton writes them --------------------------------------------------------------


def reply(*outputs: Tensor, params: Iterable[tuple[str, ParameterValue]] = SEQUENCE, **kw: Any) -> Reply:
    fields = {"error": "", "final": True, "model_name": "completion", "model_version": "1"} | kw
    return Reply(
        fields["error"], fields["final"], fields["model_name"], fields["model_version"], tuple(params), outputs
    )


def test_a_response_is_tritons_json_keys_sorted_one_element_a_scalar():
    r = reply(
        bytes_tensor("text_output", b" Paris"),
        array_tensor("output_ids", "INT32", [7042, 30], (1, 2)),
        array_tensor("input_lengths", "INT32", [5], (1, 1)),
        bytes_tensor("finish_reason", b"length"),
        array_tensor("token_offsets", "INT32", [], (1, 0, 2)),
    )
    assert g.response_json(r, "") == (
        b'{"finish_reason":"length","input_lengths":5,"model_name":"completion","model_version":"1",'
        b'"output_ids":[7042,30],"sequence_end":false,"sequence_id":0,"sequence_start":false,'
        b'"text_output":" Paris","token_offsets":[]}'
    )


def test_the_request_id_and_reserved_names_come_first():
    r = reply(
        array_tensor("model_name", "INT32", [1], (1,)),  # loses to the reserved key
        array_tensor("flag", "BOOL", [True, False], (2,)),
        bytes_tensor("note", b"output"),  # loses to the parameter
        params=[("note", "param"), ("model_version", 9), ("ratio", 0.25)],
    )
    assert g.response_json(r, "r-1") == (
        b'{"flag":[true,false],"id":"r-1","model_name":"completion","model_version":"1","note":"param","ratio":0.25}'
    )


def test_strings_are_escaped_as_rapidjson_escapes_them():
    raw = b'a"b\\c\x01\x1f\n\t\x7f/\xc3\xa9\xff'  # rapidjson copies other bytes as they are, invalid UTF-8 too
    assert g.response_json(reply(bytes_tensor("t", raw), params=[]), 'x\x01"') == (
        b'{"id":"x\\u0001\\"","model_name":"completion","model_version":"1",'
        b'"t":"a\\"b\\\\c\\u0001\\u001F\\n\\t\x7f/\xc3\xa9\xff"}'
    )


def test_integers_keep_their_width():
    r = reply(
        array_tensor("u64", "UINT64", [2**64 - 1], (1,)),
        array_tensor("i64", "INT64", [-(2**63), 5], (2,)),
        array_tensor("u8", "UINT8", [200, 1], (1, 2)),
        params=[],
    )
    assert b'"i64":[-9223372036854775808,5]' in g.response_json(r, "")
    assert b'"u64":18446744073709551615' in g.response_json(r, "")
    assert b'"u8":[200,1]' in g.response_json(r, "")


# Doubles as Triton 2.51 wrote them (FP32 outputs of render_completion, read back from its HTTP
# answers): rapidjson's Grisu2 digits, often not Python's shortest repr (the first seven here).
TRITON_DOUBLES = [
    "-9.183549615799122e-41",
    "3.6734198463196488e-40",
    "3.0856726709085049e-38",
    "-0.0000013336539268493653",
    "1.0035028776097997e22",
    "5.0043363674957939e-30",
    "3.2343297114061486e-29",
    "0.000005424022674560547",
    "0.0001239776611328125",
    "-0.0004100799560546875",
    "-157.0",
    "12352.0",
    "0.10009765625",
    "299759591197780200000.0",
    "123362600992932630000.0",
    "0.0",
    "-0.0",
]


@pytest.mark.parametrize("text", TRITON_DOUBLES)
def test_doubles_are_written_with_rapidjsons_digits(text):
    assert g._double(float(text)) == text.encode()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e21, b"1e21"),
        (1e22, b"1e22"),
        (1.5e-7, b"1.5e-7"),
        (1e-7, b"1e-7"),
        (0.000001, b"0.000001"),
        (1.0, b"1.0"),
        (5e-324, b"5e-324"),
        (1.7976931348623157e308, b"1.7976931348623157e308"),
        (math.nan, b"NaN"),
        (math.inf, b"Infinity"),
        (-math.inf, b"-Infinity"),
    ],
)
def test_doubles_are_laid_out_as_rapidjson_lays_them_out(value, text):
    assert g._double(value) == text


def test_every_double_reads_back_as_itself():
    rng = np.random.default_rng(0)
    for x in rng.standard_normal(2000) * 10.0 ** rng.integers(-300, 300, 2000):
        assert float(g._double(float(x))) == x


def test_float_outputs_are_doubles_of_their_values():
    r = reply(array_tensor("f", "FP32", [0.1, -2.0, np.nan], (3,)), params=[])
    assert b'"f":[0.10000000149011612,-2.0,NaN]' in g.response_json(r, "")


def test_fp16_outputs_are_not_written():
    with pytest.raises(g.OutputNotJSONError, match="sending FP16 data via JSON is not supported"):
        g.response_json(reply(Tensor("h", "FP16", (1,), b"\x00\x3c"), params=[]), "")


def test_error_bodies_are_tritons_shape():
    assert json.loads(g.error_json('bad "x"\n')) == {"error": 'bad "x"\n'}


# --- the service, over a fake of Triton's gRPC side ------------------------------------------------

BLOCK = object()  # a stream that waits here until cancelled


class FakeTriton:
    """Triton's gRPC side as ``GenerateService`` and the front use it: scripted responses per
    request, and a record of what the front sent and when it left a stream."""

    def __init__(self, script: Callable[[str], Sequence[Any]] = lambda rid: ()) -> None:
        self.script = script
        self.sent: list[dict[str, Any]] = []
        self.left_early: list[bool] = []
        self.metadata_calls = 0
        self.unavailable = False

    async def model_interface(self, model: str, version: str = "") -> ModelInterface:
        self.metadata_calls += 1
        if self.unavailable:
            raise FrontError("The inference server is not reachable now", 503)
        if model not in MODELS or version not in ("", "1"):
            suffix = f" version {version}" if version else ""
            raise FrontError(f"Request for unknown model: '{model}'{suffix} is not found", 404)
        return MODELS[model]

    async def stream(
        self,
        model: str,
        version: str,
        inputs: Sequence[Tensor],
        parameters: Mapping[str, ParameterValue],
        rid: str,
        *,
        stop_post_processor: bool = False,
    ) -> AsyncGenerator[Reply, None]:
        self.sent.append({"model": model, "version": version, "inputs": inputs, "parameters": dict(parameters)})
        self.sent[-1] |= {"rid": rid, "stop": stop_post_processor}
        done = False
        try:
            for item in self.script(rid):
                if item is BLOCK:
                    await asyncio.Event().wait()
                if isinstance(item, Exception):
                    raise item
                yield item
            done = True
        finally:
            self.left_early.append(not done)

    async def ready(self) -> bool:
        return True

    async def close(self) -> None:
        pass


TEXT = bytes_tensor("text_output", b"hi")
FLAG_ONLY = Reply("", True, "completion", "", (), ())


def http_client(fake: FakeTriton, **kw: Any) -> TestClient:
    return TestClient(create_app(CARD, "unused", connect=lambda: fake, **kw))


GEN = "/v2/models/completion/generate"
ASK = {"prompt": "a", "max_tokens": 2}


def test_generate_answers_the_one_response_and_sends_what_triton_would():
    fake = FakeTriton(lambda rid: [reply(TEXT, final=False), FLAG_ONLY])
    with http_client(fake) as http:
        r = http.post(GEN, content=json.dumps(ASK | {"id": "7", "temperature": 0.5, "priority": 2}))
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.content == (
        b'{"id":"7","model_name":"completion","model_version":"1","sequence_end":false,"sequence_id":0,'
        b'"sequence_start":false,"text_output":"hi"}'
    )
    [sent] = fake.sent
    assert sent["model"] == "completion" and sent["version"] == ""
    assert [t.name for t in sent["inputs"]] == ["prompt", "max_tokens"]
    assert sent["parameters"] == {"id": "7", "temperature": 0.5}
    assert sent["stop"] is True  # the ensemble runs the post-processor, which stops the engine
    assert sent["rid"].startswith("front-")  # the front's own id: the engine's stop goes by it
    assert fake.left_early == [False]


def test_a_model_without_the_post_processor_is_not_stopped_through_it():
    fake = FakeTriton(lambda rid: [reply(TEXT, model_name="render_completion")])
    with http_client(fake) as http:
        assert http.post("/v2/models/render_completion/generate", json={"prompt": "a"}).status_code == 200
    assert fake.sent[0]["stop"] is False


def test_generate_on_a_streaming_request_is_a_400_and_leaves_the_stream():
    fake = FakeTriton(lambda rid: [reply(TEXT, final=False), reply(TEXT, final=False), reply(TEXT)])
    with http_client(fake) as http:
        r = http.post(GEN, json=ASK | {"stream": True})
    assert r.status_code == 400 and "use generate_stream" in r.json()["error"]
    assert fake.left_early == [True]  # the generation is cancelled, not run to its end


def test_generate_with_no_response_is_a_400_not_a_200_with_an_error():
    with http_client(FakeTriton(lambda rid: [FLAG_ONLY])) as http:
        r = http.post(GEN, json=ASK)
    assert r.status_code == 400 and "sent no response" in r.json()["error"]


def test_a_non_decoupled_models_empty_response_is_a_response():
    empty = Reply("", True, "render_completion", "1", (), ())
    with http_client(FakeTriton(lambda rid: [empty])) as http:
        r = http.post("/v2/models/render_completion/generate", json={"prompt": "a"})
    assert r.status_code == 200 and r.content == b'{"model_name":"render_completion","model_version":"1"}'


@pytest.mark.parametrize(
    ("message", "status"),
    [
        ("in ensemble 'completion', sampling_params is not valid JSON: Expecting value", 400),
        ("in ensemble 'completion', tokenize: internal error: boom", 500),
        ("in ensemble 'completion', Stub process 'tokenize_0_0' is not healthy.", 503),
    ],
)
def test_the_models_error_keeps_its_message_and_whose_fault_it_was(message, status):
    with http_client(FakeTriton(lambda rid: [reply(error=message)])) as http:
        r = http.post(GEN, json=ASK)
    assert (r.status_code, r.json()) == (status, {"error": message})


def test_tritons_messages_name_the_clients_request_id_not_the_fronts():
    def script(rid: str) -> list[Reply]:
        return [reply(error=f"[request id: {rid}] expected 1 string elements for inference input 'prompt'")]

    with http_client(FakeTriton(script)) as http:
        assert http.post(GEN, json=ASK).json()["error"].startswith("[request id: <id_unknown>] expected 1 string")
        assert http.post(GEN, json=ASK | {"id": "abc"}).json()["error"].startswith("[request id: abc] expected")


def test_generate_stream_writes_each_response_as_an_event_an_error_one_too():
    script = [reply(TEXT, final=False), reply(error="in ensemble 'completion', oops", final=False), reply(TEXT)]
    with http_client(FakeTriton(lambda rid: script)) as http:
        r = http.post(GEN + "_stream", json=ASK | {"stream": True})
    assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream; charset=utf-8"
    event = g.response_json(reply(TEXT), "")
    assert (
        r.content
        == b"data: " + event + b'\n\ndata: {"error":"in ensemble \'completion\', oops"}\n\ndata: ' + event + b"\n\n"
    )


def test_generate_stream_takes_its_status_from_the_first_response():
    with http_client(FakeTriton(lambda rid: [reply(error="in ensemble 'completion', bad")])) as http:
        r = http.post(GEN + "_stream", json=ASK)
    assert r.status_code == 400 and r.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert r.content == b'data: {"error":"in ensemble \'completion\', bad"}\n\n'


def test_generate_stream_without_responses_is_an_empty_200():
    with http_client(FakeTriton(lambda rid: [FLAG_ONLY])) as http:
        r = http.post(GEN + "_stream", json=ASK)
    assert (r.status_code, r.content) == (200, b"")


def test_triton_going_away_mid_stream_ends_it_with_an_error_event():
    lost = FrontError("The inference server is not reachable now (starting or restarting): Socket closed", 503)
    with http_client(FakeTriton(lambda rid: [reply(TEXT, final=False), lost])) as http:
        r = http.post(GEN + "_stream", json=ASK)
        assert r.status_code == 200 and r.content.endswith(b'data: {"error":"' + lost.message.encode() + b'"}\n\n')
        r = http.post(GEN, json=ASK)
        assert (r.status_code, r.json()) == (503, {"error": lost.message})


def test_the_models_interface_is_asked_once_and_forgotten_when_triton_goes_away():
    fake = FakeTriton(lambda rid: [reply(TEXT)])
    with http_client(fake) as http:
        for _ in range(3):
            assert http.post(GEN, json=ASK).status_code == 200
        assert fake.metadata_calls == 1
        fake.unavailable = True
        assert http.post("/v2/models/render_completion/generate", json={"prompt": "a"}).status_code == 503
        fake.unavailable = False
        assert http.post(GEN, json=ASK).status_code == 200
    assert fake.metadata_calls == 3


@pytest.mark.parametrize(
    ("method", "path", "content", "status", "error"),
    [
        ("POST", "/v2/models/nope/generate", b"{}", 404, "Request for unknown model: 'nope' is not found"),
        ("POST", "/v2/models/nope/generate", b"not json", 404, "Request for unknown model: 'nope' is not found"),
        ("POST", "/v2/models/completion/versions/7/generate", b"{}", 404, "'completion' version 7 is not found"),
        ("POST", "/v2/models/completion/versions/abc/generate_stream", b"{}", 404, "Not Found"),
        ("GET", GEN, b"", 405, "Method Not Allowed"),
        ("PUT", GEN + "_stream", b"{}", 405, "Method Not Allowed"),
        ("POST", GEN, b'{"prompt": "a", "max_tokens": 1e400}', 400, "1e400"),
        ("POST", GEN, b'{"prompt": "a", "max_tokens": 1.5}', 400, "'max_tokens'"),
        ("POST", GEN, b'{"prompt": "a", "max_tokens": 4294967297}', 400, "4294967297"),
        ("POST", GEN, b'{"prompt": "a", "max_tokens": NaN}', 400, "NaN"),
        ("POST", GEN, b'{"prompt": "a", "max_tokens": 2', 400, "not valid JSON"),
        ("POST", GEN, b"", 400, "empty"),
        ("POST", GEN, b"[]", 400, "got array"),
        ("POST", GEN, b'{"prompt": null, "max_tokens": 2}', 400, "'prompt'"),
        ("POST", GEN, b'{"prompt": "a"}', 400, "missing required input(s) ['max_tokens']"),
        ("POST", GEN + "_stream", b'{"prompt": "a"}', 400, "'completion'"),
    ],
)
def test_refusals_are_tritons_error_shape_with_a_4xx(method, path, content, status, error):
    with http_client(FakeTriton(lambda rid: [reply(TEXT)])) as http:
        r = http.request(method, path, content=content)
    assert r.status_code == status and r.headers["content-type"] == "application/json"
    assert set(r.json()) == {"error"} and error in r.json()["error"]


def test_the_versions_route_names_the_version():
    fake = FakeTriton(lambda rid: [reply(TEXT)])
    with http_client(fake) as http:
        assert http.post("/v2/models/completion/versions/1/generate", json=ASK).status_code == 200
    assert fake.sent[0]["version"] == "1"


def test_a_body_over_the_limit_is_a_413():
    with http_client(FakeTriton(), max_body_bytes=100) as http:
        r = http.post(GEN, content=json.dumps({"prompt": "x" * 200, "max_tokens": 1}))
    assert r.status_code == 413 and "over the limit of 100 bytes" in r.json()["error"]


async def _cancelled_while_waiting(run: Callable[[g.GenerateService, g.GenerateRequest], Any]) -> FakeTriton:
    fake = FakeTriton(lambda rid: [reply(TEXT, final=False), BLOCK])
    service = g.GenerateService(lambda: fake)
    req = await service.prepare("completion", "", json.dumps(ASK).encode())
    task = asyncio.ensure_future(run(service, req))
    await asyncio.sleep(0.05)
    task.cancel()  # what the router does when the client goes away
    with pytest.raises(asyncio.CancelledError):
        await task
    return fake


def test_a_client_that_goes_away_from_generate_leaves_the_stream():
    fake = asyncio.run(_cancelled_while_waiting(lambda service, req: service.whole(req)))
    assert fake.left_early == [True]


def test_a_client_that_goes_away_from_generate_stream_leaves_the_stream():
    async def consume(service: g.GenerateService, req: g.GenerateRequest) -> None:
        response = await service.stream(req)
        async for _ in response.body_iterator:  # as starlette sends it, until it sees the disconnect
            pass

    fake = asyncio.run(_cancelled_while_waiting(consume))
    assert fake.left_early == [True]


def test_a_stream_reply_is_read_from_tritons_message():
    from tritonclient.grpc import service_pb2

    from openai_front.triton import _reply, _set_parameter

    m = service_pb2.ModelStreamInferResponse()
    r = m.infer_response
    r.model_name, r.model_version, r.id = "completion", "1", "front-1"
    r.parameters["triton_final_response"].bool_param = True
    for key, value in (("sequence_id", 0), ("flag", False), ("ratio", 0.5), ("note", "n")):
        _set_parameter(r.parameters[key], value)
    out = r.outputs.add()
    out.name, out.datatype = "output_ids", "INT32"
    out.shape.extend([1, 2])
    r.raw_output_contents.append(np.array([1, 2], "<i4").tobytes())
    got = _reply(m)
    assert got.final and not got.flag_only and got.error == ""
    assert dict(got.parameters) == {"sequence_id": 0, "flag": False, "ratio": 0.5, "note": "n"}
    assert got.outputs == (Tensor("output_ids", "INT32", (1, 2), np.array([1, 2], "<i4").tobytes()),)
    empty = service_pb2.ModelStreamInferResponse()
    empty.infer_response.parameters["triton_final_response"].bool_param = True
    assert _reply(empty).flag_only
    failed = service_pb2.ModelStreamInferResponse(error_message="bad")
    failed.infer_response.parameters["triton_final_response"].bool_param = True
    assert _reply(failed).final and not _reply(failed).flag_only and _reply(failed).error == "bad"
