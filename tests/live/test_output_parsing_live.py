"""Tool calls and reasoning, live: with ``ENABLE_AUTO_TOOL_CHOICE``, ``TOOL_CALL_PARSER`` and
``REASONING_PARSER`` set, ``chat`` (gRPC and HTTP, streamed and not) and the OpenAI front return
what vLLM 0.32's own parsers make of the same model output, recorded from vLLM
(``tests/fixtures/vllm/output_parsers.json``, by ``tests/fixtures/record_vllm_parsers.py``).

The model's words are the one thing faked: the tiny seeded models never write a tool call, so the
engine behind ``ENGINE_MODEL_DIR`` is ``tests/support/scripted_engine`` (TensorRT-LLM's upstream
config), which answers with the token ids the prompt spells out: exactly the recorded output's
ids, one engine response per step of vLLM's recorded stream. Chat rendering, tokenization,
``detokenize`` and its parsers, the front and tritonserver are the real ones, on the Qwen3
and Mistral tekken tokenizers (``<think>``, ``<tool_call>``, ``[TOOL_CALLS]`` are single tokens
there) and their own chat templates.
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
import ports

from client import RendererClient, RequestError
from tests.support.trtllm_engine import engine_folder

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "vllm" / "output_parsers.json").read_text())
SUITES = {s["id"]: s for s in FIXTURE["suites"]}
TOOLS = FIXTURE["tools"]
# One server per parser setting: (TOOL_CALL_PARSER, REASONING_PARSER, the recorded suite, the
# reference tokenizer). Qwen3's <tool_call> is an ordinary added token; Mistral's [TOOL_CALLS] is a
# special one, which the answer keeps only because the parser asks for it (vLLM's adjust_request).
SERVERS = {
    "hermes": ("hermes", None, "hermes@qwen3", "qwen3"),
    "qwen3+hermes": ("hermes", "qwen3", "qwen3+hermes@qwen3", "qwen3"),
    "mistral": ("mistral", None, "mistral@tekken", "mistral"),
}


def _model_folder(parent: Path, tokenizer: str) -> Path:
    """A model folder of a reference tokenizer and its template (built offline from a registry
    package); no weights: the scripted engine never reads any."""
    from model_builders.reference_tokenizers import build

    src = build(ROOT / "build" / "models" / "tokenizers")[tokenizer]
    d = parent / "model"
    d.mkdir()
    for f in src.iterdir():
        if f.name != "SOURCE.json":
            shutil.copy(f, d / f.name)
    vocab = json.loads((src / "tokenizer.json").read_text())
    added = {t["content"]: t["id"] for t in vocab.get("added_tokens", [])}
    size = max([*vocab["model"]["vocab"].values(), *added.values()]) + 1
    cfg = {"vocab_size": size, "max_position_embeddings": 4096}
    (d / "config.json").write_text(json.dumps(cfg))
    eos = json.loads((src / "tokenizer_config.json").read_text())["eos_token"]
    eos = eos["content"] if isinstance(eos, dict) else eos
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": added[eos]}))
    return d


@pytest.fixture(scope="module", params=list(SERVERS))
def parsing_server(request, server_settings, tmp_path_factory):
    from launcher import cli as launch

    tool_parser, reasoning_parser, suite, tokenizer = SERVERS[request.param]
    model_dir = _model_folder(tmp_path_factory.mktemp(f"{tokenizer}-text"), tokenizer)
    engine = engine_folder(
        tmp_path_factory.mktemp("scripted"), model_dir, ROOT / "tests" / "support" / "scripted_engine" / "model.py"
    )
    port = ports.port("parsing") + 10 * list(SERVERS).index(request.param)
    s = replace(
        server_settings,
        model_dir=str(model_dir),
        engine_model_dir=str(engine),
        build_dir=str(tmp_path_factory.mktemp("parsing-build")),
        models="chat",
        enable_auto_tool_choice=True,
        tool_call_parser=tool_parser,
        reasoning_parser=reasoning_parser or "",
        http_port=port,
        grpc_port=port + 1,
        metrics_port=port + 2,
        openai_port=port + 3,
    )
    launch.stop(s)
    if launch.start(s) != 0:
        pytest.fail(f"tritonserver did not start with parsers {request.param}; see {s.log_file}")
    yield s, SUITES[suite]
    launch.stop(s)


def _pid(s) -> int | None:
    from launcher.processes import running_pid

    pid = running_pid(s)
    assert pid is not None, "tritonserver is not running"
    return pid


def _messages(case: dict) -> list[dict]:
    steps = [chunk for _, chunk in case["chunks"]]  # vLLM's steps: a character's tokens together
    return [{"role": "user", "content": f"Answer with SCRIPT{json.dumps(steps)}"}]


def _client(s, protocol: str) -> RendererClient:
    port = s.http_port if protocol == "http" else s.grpc_port
    return RendererClient(f"{s.host}:{port}", protocol)


def _chat(s, protocol: str, case: dict, stream: bool, **chat_params) -> list:
    params = {"tools": TOOLS, **chat_params}
    with _client(s, protocol) as c:
        return list(c.generate("chat", messages=_messages(case), chat_params=params, max_tokens=256, stream=stream))


def _whole(parsed: dict) -> dict:
    """Our message as the fixture records vLLM's (calls by name and arguments; ids are random)."""
    calls = [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in parsed.get("tool_calls", [])
    ]
    return {"reasoning": parsed["reasoning"], "content": parsed["content"], "tool_calls": calls}


def _recorded_delta(delta: dict | None) -> dict | None:
    """A delta as the fixture records vLLM's: call ids as "<id>", an empty delta as None."""
    if not delta:
        return None
    out = dict(delta)
    if "tool_calls" in out:
        out["tool_calls"] = [{**t, "id": "<id>"} if "id" in t else t for t in out["tool_calls"]]
    return out


def _expected_whole(case: dict) -> dict:
    w = case["whole"]
    return {"reasoning": w.get("reasoning"), "content": w.get("content"), "tool_calls": w.get("tool_calls", [])}


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_whole_answers_as_vllm_splits_them(parsing_server, protocol):
    s, suite = parsing_server
    pid = _pid(s)
    for case in suite["cases"]:
        (got,) = _chat(s, protocol, case, stream=False)
        assert got.text == case["text"], case["id"]  # text_output stays the model's own text
        assert _whole(got.parsed) == _expected_whole(case), case["id"]
        called = bool(case["whole"].get("tool_calls"))
        assert got.finish_reason == ("tool_calls" if called else "stop"), case["id"]
        for call in got.parsed.get("tool_calls", []):
            assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-"), case["id"]
    assert _pid(s) == pid


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_streamed_deltas_as_vllm_sends_them(parsing_server, protocol):
    """Step for step: the engine sends the recorded output's ids one per response (the last with
    the end id), and every step's delta equals vLLM's ``parse_delta`` at that token."""
    s, suite = parsing_server
    pid = _pid(s)
    for case in suite["cases"]:
        got = _chat(s, protocol, case, stream=True)
        steps = [g for g in got if g.output_ids]  # the empty final response carries no step
        assert [_recorded_delta(g.parsed) for g in steps] == case["deltas"], case["id"]
        called = any(d and d.get("tool_calls") for d in case["deltas"])
        assert steps[-1].finish_reason == ("tool_calls" if called else "stop"), case["id"]
    assert _pid(s) == pid


def _front(s):
    import openai

    return openai.OpenAI(base_url=f"http://{s.host}:{s.openai_port}/v1", api_key="none", max_retries=0)


def test_front_returns_tool_calls_and_reasoning_as_vllm(parsing_server):
    """The ``openai`` package's own models: ``message.tool_calls`` and vLLM's ``reasoning``, and
    streamed chunks that add up to the same message."""
    s, suite = parsing_server
    pid = _pid(s)
    client = _front(s)
    model = client.models.list().data[0].id
    for case in suite["cases"]:
        kwargs = {"model": model, "messages": _messages(case), "tools": TOOLS, "max_tokens": 256}
        r = client.chat.completions.create(**kwargs)
        m = r.choices[0].message
        calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in m.tool_calls or []]
        reasoning = (m.model_extra or {}).get("reasoning")
        assert {"reasoning": reasoning, "content": m.content, "tool_calls": calls} == _expected_whole(case), case["id"]
        assert r.choices[0].finish_reason == ("tool_calls" if calls else "stop"), case["id"]

        content, thought, streamed, finish = "", "", {}, None
        for chunk in client.chat.completions.create(**kwargs, stream=True):
            if not chunk.choices:
                continue
            d = chunk.choices[0].delta
            content += d.content or ""
            thought += (d.model_extra or {}).get("reasoning") or ""
            for t in d.tool_calls or []:
                call = streamed.setdefault(t.index, {"name": "", "arguments": ""})
                call["name"] += (t.function.name or "") if t.function else ""
                call["arguments"] += (t.function.arguments or "") if t.function else ""
            finish = chunk.choices[0].finish_reason or finish
        expected = [c for d in case["deltas"] if d for c in d.get("tool_calls", [])]
        want_args: dict[int, str] = {}
        for c in expected:
            want_args[c["index"]] = want_args.get(c["index"], "") + c["function"].get("arguments", "")
        assert {i: c["arguments"] for i, c in streamed.items()} == want_args, case["id"]
        assert content == "".join(d.get("content", "") for d in case["deltas"] if d), case["id"]
        assert thought == "".join(d.get("reasoning", "") for d in case["deltas"] if d), case["id"]
        assert finish == ("tool_calls" if streamed else "stop"), case["id"]
    assert _pid(s) == pid


FORCED = [("required", '"required"'), ({"type": "function", "function": {"name": "search"}}, 'function "search"')]


@pytest.mark.parametrize(("tool_choice", "described"), FORCED)
def test_forced_tool_choice_refused_by_name_amid_valid_requests(parsing_server, tool_choice, described):
    """vLLM forces these with structured outputs, which no engine here takes: a 400 naming
    ``tool_choice`` on every path, sent concurrently with valid requests that still get their calls."""
    s, suite = parsing_server
    pid = _pid(s)
    case = next(c for c in suite["cases"] if c["whole"].get("tool_calls"))
    message = f"tool_choice={described} is not served"

    def bad(protocol: str) -> str:
        with pytest.raises(RequestError) as e:
            _chat(s, protocol, case, stream=protocol == "grpc", tool_choice=tool_choice)
        assert e.value.is_client_error, e.value
        assert message in str(e.value) and e.value.parameter == "tool_choice", e.value
        return "refused"

    def bad_front() -> str:
        import openai

        client = _front(s)
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(
                model=client.models.list().data[0].id,
                messages=_messages(case),
                tools=TOOLS,
                tool_choice=tool_choice,
                max_tokens=16,
            )
        assert message in e.value.message and e.value.body["param"] == "tool_choice", e.value.body
        return "refused"

    def good(protocol: str) -> str:
        (got,) = _chat(s, protocol, case, stream=False)
        assert _whole(got.parsed) == _expected_whole(case)
        return "served"

    jobs = [lambda p=p: bad(p) for p in ("grpc", "http")] * 3 + [bad_front] * 2
    jobs += [lambda p=p: good(p) for p in ("grpc", "http")] * 4
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda job: job(), jobs))
    assert results.count("refused") == 8 and results.count("served") == 8
    assert _pid(s) == pid


def test_tool_choice_none_leaves_the_text_alone(parsing_server):
    """tool_choice "none": no calls read, special tokens skipped as in any chat (the reasoning
    parser, when set, still splits)."""
    s, suite = parsing_server
    case = next(c for c in suite["cases"] if c["whole"].get("tool_calls"))
    from tokenizers import Tokenizer

    (got,) = _chat(s, "grpc", case, stream=False, tool_choice="none")
    # Decoded as any chat is (skip_special_tokens): Mistral's [TOOL_CALLS] is a special token.
    ids = [i for _, chunk in case["chunks"] for i in chunk]
    plain = Tokenizer.from_file(str(Path(s.model_dir) / "tokenizer.json")).decode(ids, skip_special_tokens=True)
    assert got.finish_reason == "stop" and got.text == plain
    if s.reasoning_parser:
        assert "tool_calls" not in got.parsed and got.parsed["reasoning"] == case["whole"]["reasoning"]
    else:
        assert got.parsed is None  # nothing is parsed: the text is the answer


def test_langchain_bind_tools_gets_its_tool_call(parsing_server):
    """LangChain's ``ChatOpenAI.bind_tools``, unchanged, against the front: ``AIMessage.tool_calls``
    holds the call (whole), and the streamed chunks add up to it."""
    from langchain_openai import ChatOpenAI

    s, suite = parsing_server
    pid = _pid(s)
    model = _front(s).models.list().data[0].id
    llm = ChatOpenAI(
        base_url=f"http://{s.host}:{s.openai_port}/v1", api_key="none", model=model, max_retries=0, max_tokens=256
    ).bind_tools(TOOLS)
    for case in (c for c in suite["cases"] if c["whole"].get("tool_calls")):
        want = [{"name": c["name"], "args": json.loads(c["arguments"])} for c in case["whole"]["tool_calls"]]
        message = llm.invoke(_messages(case))
        assert [{"name": t["name"], "args": t["args"]} for t in message.tool_calls] == want, case["id"]
        assert all(t["id"].startswith("chatcmpl-tool-") for t in message.tool_calls)
        total = None
        for chunk in llm.stream(_messages(case)):
            total = chunk if total is None else total + chunk
        assert [{"name": t["name"], "args": t["args"]} for t in total.tool_calls] == want, case["id"]
    assert _pid(s) == pid
