"""``tokenize``'s text-only path: a request whose inputs are its text prompt and the chat flag
alone (every ``render_chat`` and ``render_completion`` request without params, salt or
``max_tokens``) is answered by ``Renderer.render_text_bytes``, its prompt echoed as
``rendered_prompt``, without the full path's step-1 bookkeeping.

Held here to the full path of the same adapter (``parse_each`` and ``render_batch``, the path
being switched off on the instance), response for response: every output's name, dtype, shape
and values, every error's code and message. Bad tensors and texts the lane declines must give
the full path's answer; a spy proves the path served the rest, so the comparison is not of the
full path with itself.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import fake_triton as ft

ALL_OUTPUTS = ["input_ids", "input_lengths", "token_offsets", "rendered_prompt", "input_embeds", "length_limit"]
TEXTS = [
    "Hello",
    "a longer sentence with   spaces and\nnew lines\n\n",
    "中文 and 日本語, 🦩 emoji, e\u0301",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "",
    " ",
    "\x16",  # a byte fastokens has no token for: the lane declines, Hugging Face answers
    "word " * 12,
    "x" * 500,
]


@pytest.fixture(scope="module", params=[0, 16], ids=["model-context", "context-16"])
def tokenize(request, tmp_path_factory) -> Iterator[Any]:
    """The adapter in process; with a 16-token context most texts above fail the length check."""
    with ft.rendered_repository(
        tmp_path_factory.mktemp(f"text-only-{request.param}"), max_model_len=request.param
    ) as repo:
        yield repo.model("tokenize")


class Spy:
    """Counts the requests ``render_text_bytes`` answered (not None, no exception)."""

    def __init__(self, model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.served = 0
        inner = model.renderer.render_text_bytes

        def counted(*args: Any, **kwargs: Any) -> Any:
            res = inner(*args, **kwargs)
            self.served += res is not None
            return res

        monkeypatch.setattr(model.renderer, "render_text_bytes", counted)


@contextlib.contextmanager
def full_path_only(model: Any) -> Iterator[None]:
    model._text_only = lambda request: None
    try:
        yield
    finally:
        del model._text_only


def summary(response: Any) -> Any:
    """What a client sees of a response: its error, or each output's dtype, shape and values."""
    if response.has_error():
        return ("error", response.error().code(), response.error().message())
    out = {}
    for t in response.output_tensors():
        arr = t.as_numpy()
        out[t.name()] = (arr.dtype.kind if arr.dtype.kind in "OSU" else str(arr.dtype), arr.shape, arr.tolist())
    return out


def request(tensors: dict[str, Any], requested: list[str]) -> Any:
    return ft.Request([ft.Tensor(k, v) for k, v in tensors.items()], requested_output_names=requested)


def both_paths(model: Any, batch: list[dict[str, Any]], requested: list[str] = ALL_OUTPUTS) -> tuple[list, list]:
    """One batch through the adapter as it is, then through the full path alone."""
    fast = [summary(r) for r in model.execute([request(t, requested) for t in batch])]
    with full_path_only(model):
        full = [summary(r) for r in model.execute([request(t, requested) for t in batch])]
    return fast, full


def prompt(text: str | bytes, chat: bool | None = None) -> dict[str, Any]:
    raw = text.encode() if isinstance(text, str) else text
    tensors: dict[str, Any] = {"prompt": np.array([[raw]], dtype=np.object_)}
    if chat is not None:
        tensors["chat_template_applied"] = np.array([[chat]])
    return tensors


@pytest.mark.parametrize("chat", [None, False, True])
def test_text_only_answers_as_the_full_path(tokenize, monkeypatch, chat):
    spy = Spy(tokenize, monkeypatch)
    fast, full = both_paths(tokenize, [prompt(t, chat) for t in TEXTS])
    for text, a, b in zip(TEXTS, fast, full):
        assert a == b, f"{text[:40]!r}: text-only path {a} != full path {b}"
    ok = sum(not isinstance(b, tuple) for b in full)
    assert spy.served > 0, "the text-only path served nothing: the comparison above proved nothing about it"
    assert spy.served < len(TEXTS) and spy.served <= ok  # "\x16" at least went to the full path


def test_rendered_prompt_is_the_prompt_as_sent(tokenize, monkeypatch):
    spy = Spy(tokenize, monkeypatch)
    text = "e\u0301 🦩 and\r\n a\u00a0nbsp".encode()
    (response,) = tokenize.execute([request(prompt(text), ["rendered_prompt", "input_ids"])])
    assert spy.served == 1
    assert summary(response)["rendered_prompt"][2] == [[text]]


@pytest.mark.parametrize(
    "tensors",
    [
        pytest.param(prompt(b"caf\xc3 \xff"), id="invalid-utf8"),
        pytest.param({"prompt": np.array([[b"a", b"b"]], dtype=np.object_)}, id="two-elements"),
        pytest.param({"prompt": np.array([[b"a"], [b"b"]], dtype=np.object_)}, id="batch-of-two"),
        pytest.param({"prompt": np.array(b"a", dtype=np.object_)}, id="no-batch-dimension"),
        pytest.param({**prompt("hi"), "chat_template_applied": np.array([[True, False]])}, id="two-flags"),
        pytest.param({"prompt": np.array([["hi"]], dtype=np.object_)}, id="str-element"),
        pytest.param({"chat_template_applied": np.array([[True]])}, id="no-prompt"),
    ],
)
def test_bad_and_unusual_tensors_get_the_full_paths_answer(tokenize, tensors):
    fast, full = both_paths(tokenize, [tensors])
    assert fast == full


def test_requests_with_other_inputs_take_the_full_path(tokenize, monkeypatch):
    spy = Spy(tokenize, monkeypatch)
    others = [
        {**prompt("Hello"), "tokenize_params": np.array([[b'{"add_special_tokens": false}']], dtype=np.object_)},
        {**prompt("Hello"), "cache_salt": np.array([[b"salt"]], dtype=np.object_)},
        {**prompt("Hello", True), "max_tokens": np.array([[3]], dtype=np.int32)},
        {"prompt_token_ids": np.array([[1, 2, 3]], dtype=np.int32)},
    ]
    fast, full = both_paths(tokenize, others)
    assert fast == full
    assert spy.served == 0


def test_a_mixed_batch_keeps_each_answer_in_its_place(tokenize, monkeypatch):
    spy = Spy(tokenize, monkeypatch)
    batch = [
        prompt("Hello"),
        {"prompt_token_ids": np.array([[5, 6]], dtype=np.int32)},
        prompt(b"\xff"),
        prompt("word " * 12, True),
        {**prompt("Hi"), "cache_salt": np.array([[b"s"]], dtype=np.object_)},
        prompt("\x16"),
        prompt("last one"),
    ]
    fast, full = both_paths(tokenize, batch)
    assert fast == full
    alone = [both_paths(tokenize, [t])[1][0] for t in batch]
    assert fast == alone
    assert spy.served >= 2


def test_only_the_outputs_asked_for(tokenize):
    for requested in (["input_ids", "input_lengths"], ["rendered_prompt"], ALL_OUTPUTS):
        fast, full = both_paths(tokenize, [prompt("Hello there", True)], requested)
        assert fast == full
        assert set(fast[0]) == {"input_ids", "input_lengths", *requested}  # the two every step reads


def test_text_only_answers_as_the_full_path_on_generated_prompts(tokenize):
    @settings(
        max_examples=150,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(
        raws=st.lists(st.text(max_size=60).map(str.encode) | st.binary(max_size=24), min_size=1, max_size=4),
        chat=st.sampled_from([None, False, True]),
    )
    def check(raws, chat):
        fast, full = both_paths(tokenize, [prompt(r, chat) for r in raws])
        assert fast == full

    check()


def test_a_bug_on_the_path_is_that_requests_internal_error_alone(tokenize, monkeypatch):
    """A non-``RenderError`` is not a bad request to retry on the full path: it answers its own
    request as an internal error naming the stage, and the batch's other requests are answered."""
    inner = tokenize.renderer.render_text_bytes

    def broken(raw: bytes, p: Any) -> Any:
        if raw == b"boom":
            raise RuntimeError("a bug")
        return inner(raw, p)

    monkeypatch.setattr(tokenize.renderer, "render_text_bytes", broken)
    responses = tokenize.execute([request(prompt(t), ALL_OUTPUTS) for t in ("Hello", "boom", "Hi")])
    bad = summary(responses[1])
    assert bad[:2] == ("error", ft.TritonError.INTERNAL)
    assert bad[2] == "tokenize: internal error: RuntimeError: a bug"
    for r in (responses[0], responses[2]):
        assert not r.has_error()
