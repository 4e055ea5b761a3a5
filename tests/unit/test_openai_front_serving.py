"""``FrontService``, the HTTP front's work, against a fake of the ensembles (no Triton, no HTTP):
what each endpoint asks of the ensembles and what it answers, streamed and not."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Mapping

import numpy as np
import pytest

from openai_front.protocol import FrontError, ModelCard
from openai_front.serving import FrontService
from openai_front.triton import Piece

CARD = ModelCard(name="tiny", max_model_len=64)
MESSAGES = [{"role": "user", "content": "Hi"}]


class FakeEnsembles:
    """Answers as the ensembles would; records every call."""

    def __init__(self, pieces: list[Piece | FrontError], prompt_len: int = 5) -> None:
        self.pieces = pieces
        self.prompt_len = prompt_len
        self.calls: list[tuple[str, dict[str, np.ndarray]]] = []
        self.closed_streams = 0

    async def ready(self) -> bool:
        return True

    async def infer(self, model: str, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls.append((model, dict(tensors)))
        return {"input_lengths": np.array([self.prompt_len]), "input_ids": np.arange(self.prompt_len)}

    def generate(self, model: str, tensors: Mapping[str, np.ndarray]) -> AsyncIterator[Piece]:
        self.calls.append((model, dict(tensors)))

        async def pieces() -> AsyncIterator[Piece]:
            try:
                for p in self.pieces:
                    if isinstance(p, FrontError):
                        raise p
                    yield p
            finally:
                self.closed_streams += 1

        return pieces()

    async def close(self) -> None:
        pass


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def service(fake: FakeEnsembles) -> FrontService:
    return FrontService(CARD, lambda: fake)


PIECES = [Piece("Hel", [1], "", 5), Piece("lo", [2], "", 5), Piece("", [3], "stop", 5)]


def test_a_chat_without_max_tokens_gets_the_rest_of_the_context():
    fake = FakeEnsembles(PIECES)
    svc = service(fake)

    async def go() -> dict[str, Any]:
        plan = svc.plan({"messages": MESSAGES}, chat=True)
        return await svc.whole(plan, await svc.start(plan))

    body = run(go())
    (render, _), (gen, tensors) = fake.calls
    assert render == "render_chat" and gen == "chat"
    assert int(tensors["max_tokens"].reshape(-1)[0]) == CARD.max_model_len - fake.prompt_len
    assert body["choices"][0]["message"]["content"] == "Hello"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert fake.closed_streams == 1


def test_a_given_max_tokens_skips_the_render():
    fake = FakeEnsembles(PIECES)
    svc = service(fake)

    async def go() -> None:
        plan = svc.plan({"prompt": "Hi", "max_tokens": 7}, chat=False)
        await svc.whole(plan, await svc.start(plan))

    run(go())
    [(model, tensors)] = fake.calls
    assert model == "completion" and int(tensors["max_tokens"].reshape(-1)[0]) == 7


def _events(svc: FrontService, body: dict[str, Any]) -> list[Any]:
    async def go() -> list[str]:
        plan = svc.plan(body, chat=True)
        pieces = await svc.start(plan)
        first = await pieces.__anext__()
        return [e async for e in svc.events(plan, first, pieces)]

    raw = run(go())
    assert raw[-1] == "data: [DONE]\n\n"
    return [json.loads(e.removeprefix("data: ")) for e in raw[:-1]]


def test_a_stream_is_openais_chunks_with_usage_as_asked():
    fake = FakeEnsembles(PIECES)
    events = _events(
        service(fake),
        {"messages": MESSAGES, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}},
    )
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[1:-1]) == "Hello"
    assert events[-2]["choices"][0]["finish_reason"] == "stop"
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 3
    assert fake.closed_streams == 1


def test_an_error_mid_stream_is_an_openai_error_event_naming_its_parameter():
    fake = FakeEnsembles([PIECES[0], FrontError("bad stop (parameter=stop)", 400, "stop")])
    events = _events(service(fake), {"messages": MESSAGES, "max_tokens": 4, "stream": True})
    assert events[-1] == {
        "error": {"message": "bad stop (parameter=stop)", "type": "BadRequestError", "param": "stop", "code": 400}
    }
    assert fake.closed_streams == 1


def test_tokenize_and_render_answer_from_the_ensembles():
    fake = FakeEnsembles([])
    svc = service(fake)
    tok = run(svc.tokenize({"prompt": "Hi"}))
    assert tok == {"count": 5, "max_model_len": 64, "tokens": [0, 1, 2, 3, 4], "token_strs": None}
    with pytest.raises(FrontError, match="return_token_strs needs the model folder"):
        run(svc.tokenize({"prompt": "Hi", "return_token_strs": True}))
    assert svc.models()["data"][0]["id"] == "tiny"
