"""/infer bodies Triton 2.51's JSON reader fails on with a 500, each with the words the front's
check (openai_front/infer_check.py) must name it with: shared by the unit test of the check and the
live test that sends them through the edge (and to Triton's own port, where each is still a 500)."""

from __future__ import annotations

import json


def tensor(data: object, datatype: str = "BYTES", shape: tuple = (1, 1), name: str = "prompt") -> dict:
    return {"name": name, "shape": list(shape), "datatype": datatype, "data": data}


def body(*inputs: dict, **extra: object) -> bytes:
    return json.dumps({"inputs": list(inputs), **extra}).encode()


# (body, words the message must hold): each a 500 from Triton 2.51 itself.
REFUSED = [
    (b"1e400", "1e400 is too large for a double"),
    (b'{"inputs": [', "not valid JSON"),
    (b"NaN", "NaN is not a JSON value"),
    (b"[]", "must be a JSON object, got array"),
    (b"null", "must be a JSON object, got null"),
    (b"{}", "'inputs': it must be an array of input objects; it is missing"),
    (b'{"inputs": {}}', "'inputs': it must be an array of input objects; got object"),
    (b'{"inputs": null}', "'inputs': it must be an array of input objects; got null"),
    (
        body({"shape": [1, 1], "datatype": "BYTES", "data": ["hi"]}),
        "'inputs[0].name': it must be a string; it is missing",
    ),
    (body({"name": 1, "shape": [1], "datatype": "BYTES", "data": ["hi"]}), "'inputs[0].name'"),
    (body({"name": "prompt", "datatype": "BYTES", "data": ["hi"]}), "'inputs[0].shape'"),
    (body(tensor(["hi"], shape=["a"])), "'inputs[0].shape[0]': it must be a non-negative integer; got string"),
    (body(tensor(["hi"], shape=[1, -1])), "'inputs[0].shape[1]': it must be a non-negative integer; got integer -1"),
    (body(tensor(["hi"], shape=[1.5])), "'inputs[0].shape[0]'"),
    (body({"name": "prompt", "shape": {}, "datatype": "BYTES", "data": ["hi"]}), "'inputs[0].shape'"),
    (
        body({"name": "prompt", "shape": [1], "data": ["hi"]}),
        "'inputs[0].datatype': it must be a string; it is missing",
    ),
    (body({"name": "prompt", "shape": [1], "datatype": 5, "data": ["hi"]}), "'inputs[0].datatype'"),
    (body(tensor([None])), "'inputs[0].data[0]': it must be one of the strings a BYTES input takes; got null"),
    (body(tensor([1])), "'inputs[0].data[0]'"),
    (body(tensor([{}])), "got object"),
    (body(tensor("hi")), "'inputs[0].data': it must be an array; got string"),
    (body(tensor([["a"], ["b", 7]], shape=(2, 2))), "'inputs[0].data[1][1]'"),
    (body(tensor(["hi"]), tensor(["x"], "INT32", name="n")), "'inputs[1].data[0]': it must be one of the integers"),
    (body(tensor(["hi"]), tensor([1.5], "INT32", name="n")), "got number 1.5"),
    (body(tensor(["hi"]), tensor([True], "INT32", name="n")), "got boolean true"),
    (body(tensor(["hi"]), tensor([-1], "UINT8", name="n")), "got integer -1"),
    (body(tensor(["hi"]), tensor([1], "BOOL", name="n")), "true or false a BOOL input takes"),
    (body(tensor(["hi"]), tensor(["x"], "FP32", name="n")), "'inputs[1].data[0]'"),
    (body(tensor(["hi"]), id=5), "'id': it must be a string; got integer 5"),
    (body(tensor(["hi"]), parameters=[]), "'parameters': it must be an object; got array"),
    (body(tensor(["hi"]), outputs={}), "'outputs': it must be an array of output objects"),
    (body(tensor(["hi"]), outputs=[{}]), "'outputs[0].name': it must be a string; it is missing"),
    (
        body(tensor(["hi"]), outputs=[{"name": "x", "parameters": {"binary_data": "yes"}}]),
        "'outputs[0].parameters.binary_data': it must be true or false",
    ),
    (b'{"inputs": [{"name": "p", "shape": [1], "datatype": "BYTES", "data": ["\\ud800"]}]}', "lone UTF-16 surrogate"),
    (b"[" * 100_000, "too deeply"),
]
