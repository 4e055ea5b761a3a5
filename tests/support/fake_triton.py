"""Run the ``model.py`` adapters of a rendered model repository in-process, without Triton.

``install()`` puts a stand-in for ``triton_python_backend_utils`` (the module the Python backend
stub provides) into ``sys.modules``, with just what the adapters use: tensors, requests and
responses, the response sender of decoupled models, BLS requests (routed to the other models of
the same repository), errors, the logger and custom metrics.

``InProcessRepository`` loads each model the way the stub does (``initialize`` with the config
as JSON), sends it requests, and walks ensembles step by step as Triton's scheduler does. Every
response is checked against the rendered ``config.pbtxt`` of the model that sent it
(``output_problems``): names, data types (Triton's own type-to-numpy table) and shapes. That
check is what makes the configs, not the adapters' literals, the one source of truth.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import queue
import sys
import types
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from renderer.engine_tensors import FRONT_OUTPUTS, FRONT_OUTPUTS_MADE
from renderer.stage_tensors import UNBATCHED_OUTPUTS

# TensorRT-LLM's ensemble outputs declared for its clients but never made (a step need not send
# an output that no client asked for; Triton asks a step for every output its map names).
NEVER_MADE = frozenset(FRONT_OUTPUTS) - set(FRONT_OUTPUTS_MADE)

FINAL = 1
TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL
TIMEOUT_S = 300.0  # a stand-in engine on two shared cores can be slow; a hang still ends


# --- the stand-in module -------------------------------------------------------------------------


class Tensor:
    def __init__(self, name: str, array: Any) -> None:
        self._name = name
        self._array = np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class TritonError(Exception):
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        super().__init__(message)
        self._message, self._code = message, code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class InferenceResponse:
    def __init__(self, output_tensors: list[Tensor] | None = None, error: TritonError | None = None) -> None:
        self._tensors = list(output_tensors or [])
        self._error = error

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


class ResponseSender:
    def __init__(self) -> None:
        self.responses: queue.Queue = queue.Queue()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        self.responses.put((response, flags))

    def drain(self) -> Iterator[InferenceResponse]:
        """Responses until the one flagged final (an empty final flag yields nothing)."""
        while True:
            response, flags = self.responses.get(timeout=TIMEOUT_S)
            if response is not None:
                yield response
            if flags & FINAL:
                return


class Request:
    def __init__(
        self, tensors: list[Tensor], request_id: str = "", requested_output_names: list[str] | None = None
    ) -> None:
        self._tensors = {t.name(): t for t in tensors}
        self._request_id = request_id
        self._requested = requested_output_names
        self.sender = ResponseSender()

    def requested_output_names(self) -> list[str]:
        """What the request asks for (Triton fills in every declared output when it names none)."""
        return list(self._requested or [])

    def inputs(self) -> list[Tensor]:
        return list(self._tensors.values())

    def request_id(self) -> str:
        return self._request_id

    def get_response_sender(self) -> ResponseSender:
        return self.sender

    def is_cancelled(self) -> bool:
        return False


def get_input_tensor_by_name(request: Request, name: str) -> Tensor | None:
    return request._tensors.get(name)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in response.output_tensors() if t.name() == name), None)


ROUTE: Callable[[str, Request], Iterator[InferenceResponse]] | None = None
"""Where BLS requests go: set by ``InProcessRepository``."""


class InferenceRequest:
    def __init__(
        self,
        model_name: str,
        inputs: list[Tensor],
        requested_output_names: list[str] | None = None,
        request_id: str = "",
        **_: Any,
    ) -> None:
        self.model_name = model_name
        self.request = Request(inputs, request_id)

    def exec(self, decoupled: bool = False) -> Any:
        if ROUTE is None:
            raise RuntimeError("no repository routes BLS requests")
        responses = ROUTE(self.model_name, self.request)
        return responses if decoupled else next(iter(responses))


class Logger:
    @staticmethod
    def log_info(msg: str) -> None: ...

    @staticmethod
    def log_warn(msg: str) -> None: ...

    @staticmethod
    def log_error(msg: str) -> None: ...

    @staticmethod
    def log_verbose(msg: str) -> None: ...


class _Metric:
    def __init__(self) -> None:
        self.value = 0.0

    def increment(self, n: float) -> None:
        self.value += n

    def set(self, v: float) -> None:
        self.value = v


class MetricFamily:
    COUNTER, GAUGE, HISTOGRAM = range(3)

    def __init__(self, name: str, description: str, kind: int) -> None:
        self.name = name

    def Metric(self, labels: dict[str, str] | None = None) -> _Metric:  # noqa: N802 - Triton's name
        return _Metric()


# Triton's TYPE_* -> numpy, as the real module's triton_string_to_numpy has it.
TYPE_TO_NUMPY = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


def triton_string_to_numpy(name: str) -> type:
    return TYPE_TO_NUMPY[name]


def install() -> types.ModuleType:
    """This module as ``triton_python_backend_utils``; returns it."""
    module = sys.modules[__name__]
    sys.modules["triton_python_backend_utils"] = module
    return module


ADAPTER_MODULES = (
    "triton_python_backend_utils",
    "triton_io.tensors",
)
"""The stub modules the adapters import: bound to this stand-in while it is installed."""


@contextlib.contextmanager
def installed() -> Iterator[types.ModuleType]:
    """``install()`` for a block; afterwards the adapter modules and the in-process models are
    removed again, so no other test sees the stand-in."""
    before = {name: sys.modules.get(name) for name in ADAPTER_MODULES}
    try:
        yield install()
    finally:
        for name, module in before.items():
            package, _, attr = name.rpartition(".")
            if module is None:
                sys.modules.pop(name, None)
                if package in sys.modules:  # `from triton_io import tensors` reads the attribute first
                    vars(sys.modules[package]).pop(attr, None)
            else:
                sys.modules[name] = module
        for name in [n for n in sys.modules if n.startswith("inprocess_")]:
            del sys.modules[name]


@contextlib.contextmanager
def rendered_repository(build_dir: Path, **settings: Any) -> Iterator["InProcessRepository"]:
    """The launcher's repository for ``settings`` (the default model unless they say otherwise),
    rendered into ``build_dir`` and run in process on this stand-in; finalized afterwards."""
    from dataclasses import replace

    from launcher import cli as launch

    with installed():
        s = replace(launch.Settings(), build_dir=str(build_dir), openai_port=0, **settings)
        launch.prepare(s)
        repo = InProcessRepository(s.repository)
        try:
            yield repo
        finally:
            repo.finalize()


# --- checking a response against a config --------------------------------------------------------


def _tensor_problems(config: Any, declared: dict[str, Any], name: str, arr: np.ndarray, what: str) -> list[str]:
    from tritonclient.grpc import model_config_pb2

    spec = declared.get(name)
    if spec is None:
        return [f"{config.name}: {what} {name!r}, which its config does not declare"]
    batch = 0 if name in UNBATCHED_OUTPUTS else 1  # sent without the batch dimension, as declared
    type_name = model_config_pb2.DataType.Name(spec.data_type)
    want = np.dtype(TYPE_TO_NUMPY[type_name])
    problems = []
    if arr.dtype != want and not (want == np.object_ and arr.dtype.kind in "OSU"):
        problems.append(f"{config.name}: {name} is {arr.dtype}, its config says {type_name}")
    dims = list(spec.dims)
    fits = (
        arr.ndim == len(dims) + batch
        and (not batch or arr.shape[0] == 1)
        and all(d == -1 or g == d for g, d in zip(arr.shape[batch:], dims))
    )
    if not fits:
        says = f"[1] + {dims}" if batch else f"{dims} (no batch dimension)"
        problems.append(f"{config.name}: {name} has shape {list(arr.shape)}, its config says {says}")
    return problems


def input_problems(config: Any, request: Request) -> list[str]:
    """How ``request``'s tensors depart from the inputs ``config`` declares (and required ones it lacks)."""
    declared = {t.name: t for t in config.input}
    problems = []
    for tensor in request.inputs():
        problems += _tensor_problems(config, declared, tensor.name(), tensor.as_numpy(), "receives")
    names = {t.name() for t in request.inputs()}
    problems += [
        f"{config.name}: lacks its required input {t.name!r}"
        for t in config.input
        if not t.optional and t.name not in names
    ]
    return problems


def output_problems(
    config: Any, response: InferenceResponse, *, complete: bool = True, requested: list[str] | None = None
) -> list[str]:
    """How ``response`` departs from the outputs ``config`` declares: unknown names, data types,
    ranks and fixed dims (after the batch dimension of 1); with ``complete``, declared outputs it
    lacks (of those ``requested``, when given: Triton asks a model only for those). An empty list:
    it matches."""
    declared = {t.name: t for t in config.output}
    problems = []
    for tensor in response.output_tensors():
        problems += _tensor_problems(config, declared, tensor.name(), tensor.as_numpy(), "sends")
    names = {t.name() for t in response.output_tensors()}
    if complete:
        wanted = set(declared) if requested is None else set(requested)
        problems += [f"{config.name}: does not send its declared output {n!r}" for n in sorted(wanted - names)]
    return problems


# --- a repository run in-process -----------------------------------------------------------------


def parse_config(path: Path) -> Any:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


class ContractError(AssertionError):
    """A response that departs from its model's config, or an ensemble step that cannot run."""


class InProcessRepository:
    """The models of one rendered repository, each loaded on first use."""

    def __init__(self, repo: Path) -> None:
        global ROUTE
        self.repo = repo
        self.configs = {p.parent.name: parse_config(p) for p in repo.glob("*/config.pbtxt")}
        self.models: dict[str, Any] = {}
        self.seen: dict[str, int] = {}
        """Responses checked, per model."""
        ROUTE = self._route

    def model(self, name: str) -> Any:
        if name not in self.models:
            from google.protobuf import json_format

            cfg = self.configs[name]
            spec = importlib.util.spec_from_file_location(f"inprocess_{name}", self.repo / name / "1" / "model.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            instance = module.TritonPythonModel()
            config_json = json_format.MessageToDict(cfg, preserving_proto_field_name=True)
            for value in config_json.get("parameters", {}).values():
                value.setdefault("string_value", "")  # Triton's JSON keeps empty values; protobuf's drops them
            instance.initialize(
                {
                    "model_config": json.dumps(config_json),
                    "model_name": name,
                    "model_version": "1",
                    "model_instance_kind": "CPU",
                    "model_instance_device_id": "0",
                    "model_repository": str(self.repo / name),
                }
            )
            self.models[name] = instance
        return self.models[name]

    def finalize(self) -> None:
        for instance in self.models.values():
            if hasattr(instance, "finalize"):
                instance.finalize()

    def _route(self, name: str, request: Request) -> Iterator[InferenceResponse]:
        return iter(self.call(name, request))

    def call(self, name: str, request: Request) -> list[InferenceResponse]:
        """One request to one model: its responses, each checked against the model's config."""
        cfg = self.configs[name]
        problems = input_problems(cfg, request)
        if problems:
            raise ContractError("; ".join(problems))
        if request._requested is None:
            request._requested = [t.name for t in cfg.output]  # as Triton asks when the client names none
        instance = self.model(name)
        if cfg.model_transaction_policy.decoupled:
            instance.execute([request])
            responses = list(request.sender.drain())
        else:
            responses = instance.execute([request])
            if len(responses) != 1:
                raise ContractError(f"{name}: {len(responses)} responses to one request")
        for r in responses:
            if r.has_error():
                raise ContractError(f"{name}: error response: {r.error().message()}")
            wanted = [n for n in request._requested if n not in NEVER_MADE]
            problems = output_problems(cfg, r, complete=bool(r.output_tensors()), requested=wanted)
            if problems:
                raise ContractError("; ".join(problems))
            self.seen[name] = self.seen.get(name, 0) + 1
        return responses

    def infer(
        self, name: str, inputs: dict[str, np.ndarray], requested: list[str] | None = None
    ) -> dict[str, np.ndarray]:
        """A request to a model or an ensemble (inputs without the batch dimension); the last
        response's outputs. An ensemble runs its steps in order, each step's inputs taken from
        the request and earlier steps' outputs through its maps, as Triton's scheduler does."""
        cfg = self.configs[name]
        if cfg.platform != "ensemble":
            tensors = [Tensor(k, np.asarray(v)[np.newaxis, ...]) for k, v in inputs.items()]
            responses = self.call(name, Request(tensors, requested_output_names=requested))
            return {
                t.name(): t.as_numpy() if t.name() in UNBATCHED_OUTPUTS else t.as_numpy()[0]
                for t in responses[-1].output_tensors()
            }
        problems = input_problems(cfg, Request([Tensor(k, np.asarray(v)[np.newaxis, ...]) for k, v in inputs.items()]))
        if problems:
            raise ContractError("; ".join(problems))
        pool = dict(inputs)
        for step in cfg.ensemble_scheduling.step:
            step_inputs = {key: pool[value] for key, value in step.input_map.items() if value in pool}
            outputs = self.infer(step.model_name, step_inputs, list(step.output_map))  # as Triton asks a step
            for key, value in step.output_map.items():
                if key not in outputs:
                    if key in NEVER_MADE:
                        continue  # declared for TensorRT-LLM's clients, made only when they can be
                    raise ContractError(f"{name}: step {step.model_name} sent no {key!r}")
                pool[value] = outputs[key]
        result = {t.name: pool[t.name] for t in cfg.output if t.name in pool}
        made = [t.name for t in cfg.output if t.name not in NEVER_MADE]
        problems = output_problems(
            cfg, InferenceResponse([Tensor(k, v[np.newaxis, ...]) for k, v in result.items()]), requested=made
        )
        if problems:
            raise ContractError("; ".join(problems))
        return result
