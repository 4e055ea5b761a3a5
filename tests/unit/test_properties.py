"""Property tests: for any JSON value as messages, params or prompt, the renderer returns a
result or raises one of its own ``RenderError`` types with a message, never anything else.

Anything else would reach a client as a 500 (or worse, a stub fault) instead of a 400 naming
the problem. Example counts are bounded so the suite stays fast; set HYPOTHESIS_PROFILE=deep
for a longer search.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from renderer import Renderer, RendererConfig
from renderer.chat import ChatParams, ChatRenderer
from renderer.errors import RenderError
from renderer.params import TokenizeParams
from renderer.prompts import completion_prompt
from renderer.sampling import SamplingParams

settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("deep", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=40)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25,
)

ROLES = st.sampled_from(["user", "assistant", "system", "tool", "developer", "robot", "", None, 3])
PART_TYPES = st.sampled_from(["text", "image_url", "image_embeds", "input_text", "refusal", "audio_url", None, 7])
parts = st.fixed_dictionaries(
    {"type": PART_TYPES},
    optional={
        "text": json_values,
        "image_url": json_values | st.fixed_dictionaries({"url": json_values}),
        "uuid": json_values,
        "image_embeds": json_values,
    },
)
tool_calls = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "id": json_values,
            "type": st.sampled_from(["function", "custom", None]),
            "function": st.fixed_dictionaries(
                {}, optional={"name": json_values, "arguments": json_values | st.text(max_size=30)}
            ),
        },
    ),
    max_size=3,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": ROLES},
        optional={
            "content": json_values | st.text(max_size=60) | st.lists(parts | json_values, max_size=4),
            "name": json_values,
            "tool_calls": tool_calls | json_values,
            "tool_call_id": json_values,
            "reasoning": json_values,
        },
    ),
    max_size=5,
)
BAG_KEYS = [
    "max_total_tokens",
    "max_output_tokens",
    "truncate_prompt_tokens",
    "truncation_side",
    "add_special_tokens",
    "do_lower_case",
    "return_token_offsets",
    "needs_detokenization",
    "pad_prompt_tokens",
    "x",
]
tokenize_bags = (
    st.dictionaries(st.sampled_from(BAG_KEYS), json_values | st.integers(-3, 10000), max_size=6) | json_values
)
CHAT_KEYS = [
    "chat_template",
    "chat_template_content_format",
    "chat_template_kwargs",
    "add_generation_prompt",
    "continue_final_message",
    "tools",
    "documents",
    "media_io_kwargs",
    "mm_processor_kwargs",
    "bogus",
]
chat_bags = st.dictionaries(st.sampled_from(CHAT_KEYS), json_values, max_size=5) | json_values


def own_errors_only(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except RenderError as e:
        assert str(e), f"{type(e).__name__} without a message"
        return e


@pytest.fixture(scope="module")
def renderer(model_dir):
    return Renderer.from_config(RendererConfig(model_dir=str(model_dir)))


@pytest.fixture(scope="module")
def chat(model_dir):
    return ChatRenderer.from_model_dir(model_dir)


@given(bag=tokenize_bags)
def test_tokenize_params_from_any_json(bag):
    own_errors_only(TokenizeParams(max_total_tokens=8192).with_request, bag, max_model_len=8192)


@given(bag=chat_bags)
def test_chat_params_from_any_json(bag):
    own_errors_only(ChatParams.from_request, bag)


@given(
    bag=st.dictionaries(
        st.sampled_from(["temperature", "top_p", "top_k", "seed", "stop", "x"]), json_values, max_size=4
    )
    | json_values
)
def test_sampling_params_from_any_json(bag):
    own_errors_only(SamplingParams.from_request, bag)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(msgs=messages | json_values, bag=chat_bags)
def test_chat_render_from_any_json(chat, msgs, bag):
    params = own_errors_only(ChatParams.from_request, bag)
    if isinstance(params, RenderError):
        params = ChatParams()
    own_errors_only(chat.render_messages, msgs, params)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=st.text(max_size=300) | st.binary(max_size=100), bag=tokenize_bags)
def test_text_prompt_pipeline(renderer, text, bag):
    def run():
        prompt = renderer.render_prompt(completion_prompt(text=text))
        params = renderer.request_params(bag)
        [out] = renderer.render_batch([prompt], [params])
        if isinstance(out, RenderError):
            raise out
        return out

    own_errors_only(run)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ids=st.lists(st.integers(-(2**40), 2**40) | st.integers(0, 49151), max_size=50), bag=tokenize_bags)
def test_token_id_pipeline(renderer, ids, bag):
    def run():
        params = renderer.request_params(bag)
        [out] = renderer.render_batch([renderer.render_prompt(completion_prompt(token_ids=ids))], [params])
        if isinstance(out, RenderError):
            raise out
        return out

    own_errors_only(run)


@pytest.fixture(scope="module")
def embeds_renderer(model_dir):
    return Renderer.from_config(RendererConfig(model_dir=str(model_dir), enable_prompt_embeds=True))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=st.binary(max_size=300) | st.binary(max_size=300).map(lambda b: b"PK\x03\x04" + b))
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_prompt_embeds_from_any_bytes(embeds_renderer, raw):
    own_errors_only(embeds_renderer.render_prompt, completion_prompt(embeds=raw))
