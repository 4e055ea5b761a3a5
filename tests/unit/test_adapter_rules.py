"""The rules the Triton adapters hand to ``renderer/``, unit-tested without a server.

- ``chat_render``: the empty-messages rule and the text-only image limit (``renderer.chat_stage``);
- ``generation_params``: max_tokens, the seed default, end / pad ids, the two engine flags
  (``renderer.generation_stage`` over ``GenerationResolver``);
- ``tokenize`` -> ``mm_process``: the length limit tokenize resolved travels on
  (``renderer.params.LengthLimit``) instead of mm_process re-reading ``tokenize_params``;
- ``MAX_MODEL_LEN`` bounds each stage: tokenize's params, mm_process through the limit, and
  ``tokenize_enc_dec`` (``renderer.encoder_decoder``), and the launcher hands it to each.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from renderer.chat.messages import MultiModalItem, items_from_wire
from renderer.chat_stage import ChatStage, MediaKwargs, chat_media_limits, messages_from_json
from renderer.errors import (
    EmptyMessagesError,
    FieldTypeError,
    InvalidJSONError,
    MissingInputError,
    InvalidMessagesError,
    InvalidParamsError,
    LengthLimitError,
    MaxTokensError,
    MissingMaxTokensError,
    MultiModalLimitError,
    PromptTooLongError,
    UntrustedMultiModalKwargsError,
)
from renderer.generation_stage import GenerationRequest, require_max_tokens
from renderer.multimodal.media import MediaLimits
from renderer.params import LengthLimit, TokenizeParams, request_tokenize_params

IMAGE_PART = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def too_long(limit: int, out: int, n: int) -> str:
    """vLLM's length error, verbatim (REFERENCE.md)."""
    return (
        f"This model's maximum context length is {limit} tokens. However, you requested {out} output tokens "
        f"and your prompt contains {n} input tokens, for a total of {n + out} tokens. Please reduce the "
        "length of the input prompt or the number of requested output tokens."
    )


@pytest.fixture(scope="module")
def vlm_dir() -> Path:
    from launcher import cli as launch
    from launcher import repository

    return repository.build_vlm(replace(launch.Settings(), model="qwen2-vl"))


# --- chat_render ---------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["", "  \n"])
def test_blank_messages_are_refused(raw):
    with pytest.raises(EmptyMessagesError) as e:
        messages_from_json(raw)
    assert str(e.value) == "messages is empty: send a JSON array of chat messages."


def test_absent_messages_are_named():
    """Triton 2.51 lets a request without ``messages`` reach the stage (it counts inputs only)."""
    with pytest.raises(MissingInputError) as e:
        messages_from_json(None)
    assert str(e.value) == "Input 'messages' is required. (parameter=messages)"


def test_messages_json_is_parsed_with_a_named_error():
    assert messages_from_json('[{"role": "user", "content": "hi"}]') == [{"role": "user", "content": "hi"}]
    with pytest.raises(InvalidJSONError, match="messages is not valid JSON: Expecting"):
        messages_from_json("[{not json")


def test_media_limits_follow_the_models_family():
    assert chat_media_limits(None) == {}
    assert chat_media_limits("qwen2_vl") == {"image": 999} == chat_media_limits("pixtral")  # vLLM's default
    assert chat_media_limits("qwen2_vl", MediaLimits(max_items={"image": 2})) == {"image": 2}


def test_a_text_only_model_refuses_images_with_vllms_limit(model_dir):
    stage = ChatStage.from_model_dir(model_dir)
    assert not stage.multimodal
    messages = json.dumps([{"role": "user", "content": [IMAGE_PART, {"type": "text", "text": "what is this?"}]}])
    with pytest.raises(MultiModalLimitError) as e:
        stage.render(messages, None)
    assert str(e.value) == "At most 0 image(s) may be provided in one prompt."
    assert stage.render(json.dumps([{"role": "user", "content": "hi"}]), None).rendered.mm_items == ()


def test_an_image_model_writes_placeholders_and_hands_on_items_and_kwargs(vlm_dir):
    stage = ChatStage.from_model_dir(vlm_dir, trust_request_mm_kwargs=True)
    assert stage.multimodal and stage.family == "qwen2_vl"
    messages = json.dumps([{"role": "user", "content": [IMAGE_PART, IMAGE_PART, {"type": "text", "text": "two"}]}])
    out = stage.render(messages, {"mm_processor_kwargs": {"max_pixels": 3136}})
    metas, data = out.mm_wire()
    assert out.rendered.prompt.count("<|image_pad|>") == 2 and len(metas) == len(data) == 2
    # The data URL travels as its own bytes, not escaped into the item's JSON.
    assert json.loads(metas[0])["data"] is None and data[0] == IMAGE_PART["image_url"]["url"].encode()
    assert items_from_wire(np.array(metas, object), np.array(data, object)) == [
        replace(it, message_index=-1, part_index=-1) for it in out.rendered.mm_items
    ]
    kwargs = MediaKwargs.from_bag(json.loads(out.media_kwargs.to_json()))
    assert kwargs == MediaKwargs({"max_pixels": 3136}, None)
    # Untrusted (vLLM's default): the same kwargs are refused, with vLLM's words; an empty bag passes.
    default = ChatStage.from_model_dir(vlm_dir)
    with pytest.raises(UntrustedMultiModalKwargsError, match=r"^Per-request mm_processor_kwargs are disabled"):
        default.render(messages, {"mm_processor_kwargs": {"max_pixels": 3136}})
    with pytest.raises(UntrustedMultiModalKwargsError, match=r"\(parameter=media_io_kwargs\)$"):
        default.render(messages, {"media_io_kwargs": {"image": {"x": 1}}})
    assert default.render(messages, {"mm_processor_kwargs": {}}).mm_wire()[0]
    limited = ChatStage.from_model_dir(vlm_dir, media_limits=MediaLimits(max_items={"image": 16}))
    with pytest.raises(MultiModalLimitError, match="At most 16 image"):
        limited.render(json.dumps([{"role": "user", "content": [IMAGE_PART] * 17}]), None)


def test_media_kwargs_bag_must_be_an_object():
    assert MediaKwargs.from_bag(None) == MediaKwargs()
    with pytest.raises(FieldTypeError, match="request.mm_kwargs must be a JSON object, got str"):
        MediaKwargs.from_bag("x")


# --- generation_params ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resolver(model_dir):
    from renderer.engine_tensors import GenerationResolver

    return GenerationResolver.from_model_dir(str(model_dir))


@pytest.mark.parametrize(
    "value, error, message",
    [
        (None, MissingMaxTokensError, "Input 'max_tokens' is required for generation. (parameter=max_tokens)"),
        # vLLM's own text, suffix included (str(VLLMValidationError) in SamplingParams._verify_args).
        (0, MaxTokensError, "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"),
        (-3, MaxTokensError, "max_tokens must be at least 1, got -3. (parameter=max_tokens, value=-3)"),
    ],
)
def test_max_tokens_is_required_and_positive(value, error, message):
    with pytest.raises(error) as e:
        require_max_tokens(value)
    assert str(e.value) == message and e.value.parameter == "max_tokens"
    with pytest.raises(error):
        GenerationRequest.from_fields(value, None, False)


def test_max_tokens_bounds_min_tokens():
    assert require_max_tokens(5) == 5
    with pytest.raises(InvalidParamsError, match="min_tokens must be less than or equal to max_tokens=2, got 3."):
        GenerationRequest.from_fields(2, {"min_tokens": 3}, None)


def test_engine_flags(resolver):
    t = GenerationRequest.from_fields(4, None, True).tensors(resolver)
    assert t["streaming"].dtype == np.bool_ and t["streaming"].tolist() == [True]
    assert t["exclude_input_in_output"].tolist() == [True]  # a generation ensemble never echoes the prompt
    assert t["request_output_len"].tolist() == [4]
    assert GenerationRequest.from_fields(4, None, None).tensors(resolver)["streaming"].tolist() == [False]


def test_seed_default_is_fresh_per_request_and_a_given_seed_is_kept(resolver):
    seeds = {
        int(GenerationRequest.from_fields(1, {"temperature": 1.0}, None).tensors(resolver)["seed"][0]) for _ in range(8)
    }
    assert len(seeds) == 8 and all(0 <= s < 2**63 for s in seeds)
    t = GenerationRequest.from_fields(1, {"seed": 7}, None).tensors(resolver)
    assert t["seed"].dtype == np.uint64 and t["seed"].tolist() == [7]


def test_end_and_pad_ids(resolver):
    t = GenerationRequest.from_fields(1, None, None).tensors(resolver)
    eos = resolver.tokenizer_eos
    assert t["end_id"].tolist() == [eos]
    assert t["pad_id"].tolist() == [resolver.pad_id if resolver.pad_id is not None else eos]
    assert eos in t["stop_token_ids"].tolist()
    ignoring = GenerationRequest.from_fields(1, {"ignore_eos": True}, None).tensors(resolver)
    assert ignoring["end_id"].tolist() == [-1]


# --- tokenize -> mm_process: the length limit ------------------------------------------------------


def test_length_limit_is_what_tokenize_resolved():
    assert request_tokenize_params(64, None).length_limit == LengthLimit(64, 0)
    assert request_tokenize_params(64, None, max_output_tokens=10).length_limit == LengthLimit(64, 10)
    assert request_tokenize_params(64, {"max_total_tokens": 32, "max_output_tokens": 4}).length_limit == LengthLimit(
        32, 4
    )
    assert TokenizeParams(max_total_tokens=None).length_limit == LengthLimit(None, 0)


@pytest.mark.parametrize("limit", [LengthLimit(64, 10), LengthLimit(None, 0), LengthLimit(1, 1)])
def test_length_limit_round_trips_through_its_tensor(limit):
    values = limit.values()
    assert np.asarray(values, np.int32).tolist() == list(values)
    assert LengthLimit.from_values(values) == limit


@pytest.mark.parametrize(
    "values, message",
    [
        ([], "must hold 2 values (max_total_tokens, max_output_tokens), got 0."),
        ([64, 1, 2], "got 3."),
        ([0, 0], "got [0, 0]."),
        ([64, 65], "got [64, 65]."),
        ([64, -1], "got [64, -1]."),
    ],
)
def test_a_malformed_length_limit_is_refused(values, message):
    with pytest.raises(LengthLimitError) as e:
        LengthLimit.from_values(values)
    assert str(e.value).endswith(message)


def test_length_limit_check_uses_vllms_words():
    LengthLimit(64, 10).check(54)
    LengthLimit(None, 0).check(10**6)
    with pytest.raises(PromptTooLongError) as e:
        LengthLimit(64, 10).check(55)
    assert str(e.value) == too_long(64, 10, 55)


def test_mm_process_checks_the_expanded_ids_against_the_limit(vlm_dir):
    from renderer.chat.messages import MultiModalItem
    from renderer.multimodal.processor import MultiModalProcessor
    from tests.support.mm_images import data_url, rgb

    proc = MultiModalProcessor.from_model_dir(vlm_dir, cache_bytes=0)
    item = MultiModalItem("image", "image_url", data_url(rgb(224, 224)), None, 0, 0)
    ids = [1, 2, proc.placeholder_token_id, 3]
    out, _ = proc.process_tokenized(ids, None, [item], LengthLimit(None, 0))
    n = len(out.input_ids)
    assert n > 64  # the expansion alone crosses the limit below; the text ids (4) do not
    proc.process_tokenized(ids, None, [item], LengthLimit(n, 0))
    with pytest.raises(PromptTooLongError) as e:
        proc.process_tokenized(ids, None, [item], LengthLimit(64, 2))
    assert str(e.value) == too_long(64, 2, n)


# --- MAX_MODEL_LEN reaches every stage -----------------------------------------------------------


def test_tokenize_honours_max_model_len(model_dir):
    from renderer import Renderer, RendererConfig
    from renderer.prompts import completion_prompt

    r = Renderer.from_config(RendererConfig(model_dir=str(model_dir), max_model_len=16))
    params = r.request_params(None)
    assert params.length_limit == LengthLimit(16, 0)
    ok, over = r.render_batch(
        [completion_prompt(token_ids=list(range(5, 21))), completion_prompt(token_ids=list(range(5, 22)))],
        [params, params],
    )
    assert len(ok.prompt_token_ids) == 16
    assert isinstance(over, PromptTooLongError) and str(over) == too_long(16, 0, 17)
    with pytest.raises(
        InvalidParamsError,
        match="max_total_tokens=17 cannot be greater than the model's maximum context length of 16 tokens.",
    ):
        r.request_params({"max_total_tokens": 17})


def test_encoder_decoder_context_is_max_model_len_capped_at_the_models():
    from renderer.encoder_decoder import encoder_decoder_max_model_len

    assert encoder_decoder_max_model_len(0, 512) == 512
    assert encoder_decoder_max_model_len(64, 512) == 64
    assert encoder_decoder_max_model_len(4096, 512) == 512
    with pytest.raises(ValueError, match="got -1"):
        encoder_decoder_max_model_len(-1, 512)


def test_encoder_decoder_prompts_honour_max_model_len(encdec_dir):
    from renderer.encoder_decoder import EncoderDecoderRenderer, encoder_decoder_prompt

    r = EncoderDecoderRenderer.from_model_dir(encdec_dir, max_model_len=16)
    assert r.renderer.info.max_model_len == 16
    params = r.renderer.request_params(None)
    ok, enc_over, dec_over = r.render_batch(
        [
            encoder_decoder_prompt(encoder_token_ids=list(range(5, 21))),
            encoder_decoder_prompt(encoder_token_ids=list(range(5, 22))),
            encoder_decoder_prompt(encoder_token_ids=[5], decoder_token_ids=list(range(5, 22))),
        ],
        [params] * 3,
    )
    assert len(ok.encoder.prompt_token_ids) == 16
    assert str(enc_over) == too_long(16, 0, 17) and str(dec_over) == too_long(16, 0, 17)
    assert EncoderDecoderRenderer.from_model_dir(encdec_dir, max_model_len=10**6).renderer.info.max_model_len == 512


@pytest.mark.parametrize("family", [None, "qwen2_vl", "pixtral"])
def test_launcher_hands_max_model_len_to_every_stage_that_checks_lengths(tmp_path, family):
    from launcher import cli as launch
    from launcher import repository
    from tests.support.fake_triton import parse_config

    s = replace(
        launch.Settings(), build_dir=str(tmp_path), max_model_len=64, mm_instance_kind="KIND_CPU", encoder_decoder=True
    )
    repo = repository.render_repository(s, family)
    for model in ("tokenize", "tokenize_enc_dec"):
        assert parse_config(repo / model / "config.pbtxt").parameters["max_model_len"].string_value == "64", model
    if family is None:
        return
    # mm_process takes its limit from tokenize in every ensemble that runs it, and reads no
    # tokenize_params or max_tokens of its own.
    inputs = {t.name for t in parse_config(repo / "mm_process" / "config.pbtxt").input}
    assert "length_limit" in inputs and not inputs & {"tokenize_params", "max_tokens"}
    for ensemble in ("render_chat", "chat"):
        steps = {st.model_name: st for st in parse_config(repo / ensemble / "config.pbtxt").ensemble_scheduling.step}
        assert steps["mm_process"].input_map["length_limit"] == steps["tokenize"].output_map["length_limit"], ensemble


# --- dynamic batches ------------------------------------------------------------------------------


def test_slow_requests_of_a_batch_are_built_last_and_answered_in_order():
    """chat_render builds the requests that may render in the template worker after the others
    of their batch (a fast request never waits behind an attack), and still answers each
    request in its own slot; a predicate that fails on a bad input leaves that request in place."""
    from tests.support import fake_triton

    fake_triton.install()
    from renderer.chat_stage import may_send_template
    from triton_io import tensors as io

    built: list[str] = []

    def build(name: str) -> str:
        built.append(name)
        if name == "bad":
            raise ValueError("boom")
        return name.upper()

    def later(name: str) -> bool:
        if name == "bad":
            raise TypeError("no chat_params tensor")
        return name.startswith("slow")

    requests = ["slow1", "a", "bad", "slow2", "b"]
    out = io.respond_each(requests, "chat_render", build, later=later)
    assert built == ["a", "bad", "b", "slow1", "slow2"]
    assert out[0] == "SLOW1" and out[1] == "A" and out[3] == "SLOW2" and out[4] == "B"
    assert out[2].has_error()
    built.clear()
    io.respond_each(requests[:2], "chat_render", lambda n: built.append(n) or n)
    assert built == ["slow1", "a"]  # without a predicate: the batch's order
    asked: list[str] = []
    assert io.respond_each(["slow1"], "chat_render", build, later=lambda n: asked.append(n) or True) == ["SLOW1"]
    assert asked == []  # a lone request has no order to decide: the predicate is not paid for
    assert may_send_template(b'{"chat_template": "{{ 1 }}"}')
    assert may_send_template(b'{"chat_template_kwargs": {"chat_template": "x"}}')
    assert not may_send_template(b'{"add_generation_prompt": true}') and not may_send_template(None)


def test_media_items_cross_to_mm_process_as_metadata_and_data_in_step() -> None:
    url = "data:image/png;base64,iVBORw0KGgo=\ud800"  # any text a JSON request can carry survives
    items = [
        MultiModalItem("image", "image_url", url, "u1", -1, -1),
        MultiModalItem("image", "image_url", None, "cached", -1, -1),  # a uuid alone: nothing to carry
        MultiModalItem("image", "image_embeds", {"image_embeds": "QUJD"}, None, -1, -1),  # stays inline
    ]
    wire = [it.to_wire() for it in items]
    assert [d for _, d in wire][1:] == [b"", b""]
    metas, data = np.array([m for m, _ in wire], object), np.array([d for _, d in wire], object)
    assert items_from_wire(metas, data) == items
    # Without mm_data (a caller of mm_process that keeps data inline) inline items still read.
    assert items_from_wire(metas[1:], None) == items[1:]
    with pytest.raises(InvalidMessagesError, match=r"^An mm_items entry refers to mm_data, but no mm_data"):
        items_from_wire(metas, None)
    with pytest.raises(InvalidMessagesError, match=r"^mm_data has 2 elements for 3 mm_items entries\.$"):
        items_from_wire(metas, data[:2])
    assert items_from_wire(None, None) == []


def test_stages_build_only_the_outputs_they_are_asked_for(tmp_path):
    """tokenize and chat_render make only the outputs a request asks for (an ensemble step is
    asked for those its output_map names: the generation ensembles read two of tokenize's six),
    and all of them for a request that names none."""
    from tests.support import fake_triton

    with fake_triton.rendered_repository(tmp_path) as repo:
        prompt = [fake_triton.Tensor("prompt", np.array([[b"Hello world"]], dtype=object))]

        def tokenize(asked: list[str] | None) -> list[str]:
            # As Triton sends it: a request naming no output is asked for all (repo.call fills
            # them in), and every response is checked against the config.
            (response,) = repo.call("tokenize", fake_triton.Request(prompt, requested_output_names=asked))
            return sorted(t.name() for t in response.output_tensors())

        assert tokenize(["input_ids", "input_lengths"]) == ["input_ids", "input_lengths"]
        every = ["input_embeds", "input_ids", "input_lengths", "length_limit", "rendered_prompt", "token_offsets"]
        assert tokenize(None) == every
        messages = np.array([[b'[{"role": "user", "content": "Hi"}]']], dtype=object)
        request = fake_triton.Request(
            [fake_triton.Tensor("messages", messages)], requested_output_names=["prompt", "chat_template_applied"]
        )
        (response,) = repo.call("chat_render", request)
        assert sorted(t.name() for t in response.output_tensors()) == ["chat_template_applied", "prompt"]


# --- importing an adapter -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model_py", sorted((Path(__file__).resolve().parents[2] / "model_repository").glob("*/1/model.py")), ids=str
)
def test_an_adapter_imports_before_the_stub_has_its_classes(model_py, monkeypatch):
    """The stub imports a model.py to auto-complete its config while ``triton_python_backend_utils``
    holds only its Python helpers (no ``Tensor`` yet): an adapter that made a tensor at import
    failed to load there (every output tensor must be made at ``initialize`` or later)."""
    import importlib.util
    import sys

    from launcher.server import triton_home

    utils = triton_home() / "backends" / "python" / "triton_python_backend_utils.py"
    spec = importlib.util.spec_from_file_location("triton_python_backend_utils", utils)
    helpers_only = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers_only)
    assert not hasattr(helpers_only, "Tensor")
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", helpers_only)
    import triton_io

    # A fresh import of the stub-side modules; afterwards the modules and the package's attributes
    # (``from triton_io import tensors`` reads them first) are as they were, so no other test sees it.
    names = ("tensors", "outbox")
    before = {n: (sys.modules.pop(f"triton_io.{n}", None), vars(triton_io).pop(n, None)) for n in names}
    try:
        spec = importlib.util.spec_from_file_location(f"autocomplete_{model_py.parent.parent.name}", model_py)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert hasattr(module, "TritonPythonModel")
    finally:
        for n, (mod, attr) in before.items():
            sys.modules.pop(f"triton_io.{n}", None)
            vars(triton_io).pop(n, None)
            if mod is not None:
                sys.modules[f"triton_io.{n}"] = mod
            if attr is not None:
                setattr(triton_io, n, attr)
