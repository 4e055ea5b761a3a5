"""The live server against vLLM itself: every chat request recorded from vLLM 0.32
(``tests/fixtures/vllm/chat.json``, made by ``tests/fixtures/vllm/make_chat.py``) is sent to
``render_chat`` over HTTP and gRPC. Where vLLM rendered, the ids (and the prompt text) must be
vLLM's; where vLLM answered 400, the server must answer a client error with vLLM's message (after
the "in ensemble 'render_chat', " Triton puts in front).

SmolLM2 is the session server; the other templates get ``render_chat`` servers of their own
(``tests/support/chat_servers.py``) with the opposite ``TRUST_REQUEST_CHAT_TEMPLATE``, so both settings
are exercised. A case that sends its own template runs only on a server whose setting matches the
one vLLM recorded it with.
"""

from __future__ import annotations

import json
from dataclasses import replace
import re
from pathlib import Path

import pytest
from chat_rules import tools_rendered
from chat_servers import render_only_model_dir, start_chat_server, tokenizer_dirs, trusts_request_templates

from client import RendererClient, RequestError

pytestmark = pytest.mark.live

FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "chat.json").read_text())
CASES = FIXTURE["cases"]
PROTOCOLS = ("http", "grpc")
# Triton names the ensemble a step failed in before the step's own message.
ENSEMBLE_PREFIX = re.compile(r"^in ensemble '[^']+', ")


@pytest.fixture(scope="module")
def servers(server, model_dir, tmp_path_factory):
    """Template name -> server settings, started on first use and stopped with the module."""
    from launcher import cli as launch

    started: dict[str, object] = {"smollm2": server}
    dirs = tokenizer_dirs(model_dir)
    opposite = {}
    if hasattr(server, "trust_request_chat_template"):
        opposite["trust_request_chat_template"] = not server.trust_request_chat_template

    def get(name: str):
        if name not in started:
            tmp = tmp_path_factory.mktemp(f"vllm-chat-{name}")
            if name == "qwen2_vl":
                # Built here (offline, once): no other test may be relied on to have built it first.
                from launcher.repository import build_vlm

                folder = build_vlm(replace(server, model="qwen2-vl", model_dir=""))
                extra = {"model": "qwen2-vl"}
            else:
                folder, extra = render_only_model_dir(dirs[name], tmp / "model"), {}
            started[name] = start_chat_server(server, name, folder, tmp, **extra, **opposite)
        return started[name]

    yield get
    crashed = []
    for name, s in started.items():
        if name != "smollm2":
            launch.stop(s)
            # Every stub must end cleanly: the 2.51 stub segfaulted at each stop while a backend
            # object (a metric, a failed request's tensors) outlived it (triton_io.release_before_teardown).
            if "Fatal Python error" in Path(s.log_file).read_text(errors="replace"):
                crashed.append(f"{name} ({s.log_file})")
    assert not crashed, f"a stub crashed, at work or at the stop: {crashed}"


@pytest.fixture(scope="module")
def trust(servers):
    """(template, protocol) -> whether that server trusts request templates (asked once)."""
    cache: dict[str, bool] = {}

    def get(name: str) -> bool:
        if name not in cache:
            s = servers(name)
            with RendererClient(f"{s.host}:{s.http_port}", "http") as c:
                cache[name] = trusts_request_templates(c)
        return cache[name]

    return get


def _client(s, protocol: str) -> RendererClient:
    return RendererClient(f"{s.host}:{s.http_port if protocol == 'http' else s.grpc_port}", protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_server_answers_as_vllm(case, protocol, servers, trust):
    name = case["template"]
    if case["trust"] is not None and case["trust"] != trust(name):
        pytest.skip(f"recorded with --trust-request-chat-template={case['trust']}; this server differs")
    with _client(servers(name), protocol) as c:
        try:
            r = c.render_chat(case["messages"], chat_params=tools_rendered(case["chat_params"]))
        except RequestError as e:
            # vLLM answers a few of these 501 (data URLs it does not implement) or 500 (Pillow's
            # decompression-bomb guard); a client error here, with the same words.
            assert case["status"] >= 400, f"vLLM rendered this; the server answered {e!r}"
            assert e.is_client_error, f"a client error in vLLM, {e.kind} here: {e!r}"
            if not case["message_names_model"]:  # vLLM's message names its own model folder
                assert ENSEMBLE_PREFIX.sub("", e.message) == case["message"]
            return
    assert case["status"] == 200, f"vLLM refused this ({case['message']!r}); the server rendered it"
    assert r.input_ids == case["token_ids"]
    if case["prompt"] is not None:
        assert r.rendered_prompt == case["prompt"]


def test_both_trust_settings_are_exercised(server, trust):
    """The run is not vacuous: on the default model most cases run whatever its trust setting,
    the fixture holds cases for both settings on every template, and where the launcher has the
    setting the servers here run both."""
    smol_trust = trust("smollm2")
    runnable = [c for c in CASES if c["template"] == "smollm2" and c["trust"] in (None, smol_trust)]
    assert len(runnable) >= 100
    for name in FIXTURE["templates"]:
        assert {c["trust"] for c in CASES if c["template"] == name} >= {True, False}, name
    if hasattr(server, "trust_request_chat_template"):
        assert {trust(name) for name in FIXTURE["templates"]} == {True, False}
