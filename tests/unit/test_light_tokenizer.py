"""The tokenizer the stubs serve without transformers (``renderer/light_tokenizer.py``): a record
is proven equal to transformers' on what the renderer reads, the stubs' ``Tokenizer`` on it gives
transformers' ids, offsets, decodes and facts, a record that differs or went stale is refused
with its reason (transformers then serves), and the text stages import neither transformers nor
torch.

The oracle is transformers itself, fed the same text (never the record's own output).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from renderer import light_tokenizer
from renderer.tokenizer import EncodeOptions, Tokenizer

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("smollm2", "qwen3", "mistral")


@pytest.fixture(scope="module")
def tokenizer_dirs(model_dir) -> dict[str, Path]:
    from tests.support.chat_servers import tokenizer_dirs

    return tokenizer_dirs(model_dir)


@pytest.fixture(scope="module")
def records(tokenizer_dirs, tmp_path_factory) -> dict[str, Path]:
    out = {}
    for name in NAMES:
        out[name] = tmp_path_factory.mktemp(f"record-{name}")
        record = light_tokenizer.build(tokenizer_dirs[name], out[name])
        assert record.proven, f"{name}: {record.reason}"
    return out


@pytest.fixture(scope="module")
def pairs(tokenizer_dirs, records) -> dict[str, tuple[Tokenizer, Tokenizer]]:
    """name -> (on the record, on transformers), both on the Hugging Face engine so that the
    comparison is of the tokenizers themselves, not of fastokens (tested on its own)."""
    out = {}
    for n in NAMES:
        light = Tokenizer.from_pretrained(tokenizer_dirs[n], backend="huggingface", record=records[n])
        assert light.source.startswith("recorded tokenizer"), light.source
        out[n] = (light, Tokenizer.from_pretrained(tokenizer_dirs[n], backend="huggingface"))
    return out


TEXTS = [
    "",
    "Hello, world!",
    "  leading and trailing  ",
    "<|im_start|>user\nhi<|im_end|>",
    "[INST] x [/INST]</s><s>",
    "naïve café 中文 😀👍🏽 \u200b\ufeff",
    "x" * 500,
    "def f():\n\treturn 1\n\n\n",
]
OPTIONS = [EncodeOptions(add, n, side) for add in (False, True) for n in (None, 1, 5) for side in ("left", "right")]


@pytest.mark.parametrize("name", NAMES)
def test_the_record_gives_transformers_ids_offsets_and_facts(pairs, name):
    light, hf = pairs[name]
    for opts in OPTIONS:
        assert [e.ids for e in light.encode_batch(TEXTS, opts)] == [e.ids for e in hf.encode_batch(TEXTS, opts)]
    opts = EncodeOptions(False, None, "right")
    assert [e.offsets for e in light.encode_batch(TEXTS, opts, offsets=True)] == [
        e.offsets for e in hf.encode_batch(TEXTS, opts, offsets=True)
    ]
    for fact in (
        "vocab_size",
        "max_token_id",
        "max_chars_per_token",
        "truncation_side",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
    ):
        assert getattr(light, fact) == getattr(hf, fact), fact
    assert light.hf.get_vocab() == hf.hf.get_vocab()


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=120), skip=st.booleans())
def test_generated_text_encodes_and_decodes_as_transformers(pairs, name, text, skip):
    light, hf = pairs[name]
    ids = hf.hf.encode(text, add_special_tokens=True)
    assert light.hf.encode(text, add_special_tokens=True) == ids
    assert light.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize("name", NAMES)
def test_incremental_detokenization_on_the_record_equals_transformers(pairs, name):
    from renderer.detokenizer import IncrementalDetokenizer

    light, hf = pairs[name]
    prompt = hf.hf.encode("Say something:", add_special_tokens=False)
    out = hf.hf.encode(" naïve café, 中文 😀 done.\n<|im_end|>", add_special_tokens=False)
    texts = []
    for tok in (light, hf):
        d = IncrementalDetokenizer(tok, prompt, stop=["done"], skip_special_tokens=True)
        for i in out:
            d.push([i])
        texts.append((d.text, d.finish_reason, d.output_ids))
    assert texts[0] == texts[1]


def test_a_record_that_differs_from_transformers_is_not_proven(tokenizer_dirs, records):
    from transformers import AutoTokenizer
    from tokenizers import Tokenizer as RustTokenizer

    hf = AutoTokenizer.from_pretrained(str(tokenizer_dirs["smollm2"]))
    core = RustTokenizer.from_file(str(records["smollm2"] / light_tokenizer.TOKENIZER_FILE))
    facts = light_tokenizer.facts_of(hf)
    good = light_tokenizer.LightTokenizer(core, facts)
    assert light_tokenizer.proof_problem(hf, good)[0] is None
    wrong_eos = light_tokenizer.LightTokenizer(
        core, light_tokenizer.TokenizerFacts(**{**facts.__dict__, "eos_token_id": 7})
    )
    assert "eos_token_id" in light_tokenizer.proof_problem(hf, wrong_eos)[0]
    cleaned = light_tokenizer.LightTokenizer(
        core, light_tokenizer.TokenizerFacts(**{**facts.__dict__, "clean_up_decode": True})
    )
    assert light_tokenizer.proof_problem(hf, cleaned)[0].startswith("decode")
    # A core without the model's added tokens splits them: encode differs.
    data = json.loads(core.to_str())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != "<|im_start|>"]
    stripped = light_tokenizer.LightTokenizer(RustTokenizer.from_str(json.dumps(data)), facts)
    assert light_tokenizer.proof_problem(hf, stripped)[0] is not None


def test_a_stale_or_unproven_record_falls_back_to_transformers_with_its_reason(tokenizer_dirs, tmp_path):
    import shutil

    model = shutil.copytree(
        tokenizer_dirs["smollm2"], tmp_path / "model", ignore=shutil.ignore_patterns("*.safetensors")
    )
    record_dir = tmp_path / "record"
    assert light_tokenizer.build(model, record_dir).proven
    assert light_tokenizer.is_current(record_dir, model)
    assert Tokenizer.from_pretrained(model, record=record_dir).source.startswith("recorded tokenizer")

    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "eos_token": "<|im_start|>"}))
    assert not light_tokenizer.is_current(record_dir, model)
    stale = Tokenizer.from_pretrained(model, record=record_dir)
    assert stale.source.startswith("transformers") and "changed since" in stale.source
    assert stale.eos_token_id == stale.hf.convert_tokens_to_ids("<|im_start|>")

    facts = json.loads((record_dir / light_tokenizer.FACTS_FILE).read_text())
    facts.update(proven=False, reason="a reason given by the proof", fingerprint=light_tokenizer.fingerprint(model))
    (record_dir / light_tokenizer.FACTS_FILE).write_text(json.dumps(facts))
    unproven = Tokenizer.from_pretrained(model, record=record_dir)
    assert "a reason given by the proof" in unproven.source and unproven.eos_token_id == stale.eos_token_id


def test_the_build_step_rebuilds_after_the_folder_changes(tokenizer_dirs, tmp_path):
    """The launcher's check: a record made now is current; one of another format is not."""
    record_dir = tmp_path / "record"
    light_tokenizer.build(tokenizer_dirs["smollm2"], record_dir)
    assert light_tokenizer.is_current(record_dir, tokenizer_dirs["smollm2"])
    assert not light_tokenizer.is_current(record_dir, tokenizer_dirs["qwen3"])
    facts = json.loads((record_dir / light_tokenizer.FACTS_FILE).read_text())
    (record_dir / light_tokenizer.FACTS_FILE).write_text(json.dumps({**facts, "format": -1}))
    assert not light_tokenizer.is_current(record_dir, tokenizer_dirs["smollm2"])


TEXT_STAGES = ("tokenize", "detokenize", "generation_params", "ensemble_params", "chat_render")


def test_text_stages_import_neither_transformers_nor_torch(model_dir, records, tmp_path):
    """Each text stage's adapter, loaded and initialized as its stub does on a recorded tokenizer,
    leaves transformers, torch and numba unimported (each costs a stub 40-250 MB)."""
    backend = ROOT / ".venv/lib/python3.11/site-packages/pytriton/tritonserver/backends/python"
    if not (backend / "triton_python_backend_utils.py").exists():
        pytest.skip(f"the Python backend's utils are not at {backend} (make venv installs them)")
    script = f"""
import importlib.util, json, sys
sys.path[:0] = [{str(ROOT)!r}, {str(backend)!r}]
import triton_python_backend_utils as pb_utils
pb_utils.Logger = type("L", (), {{"log_info": staticmethod(print), "log_warn": staticmethod(print)}})
heavy = ("transformers", "torch", "numba")
for stage in {TEXT_STAGES!r}:
    path = {str(ROOT)!r} + f"/model_repository/{{stage}}/1/model.py"
    spec = importlib.util.spec_from_file_location(stage, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    params = {{k: {{"string_value": v}} for k, v in {{
        "model_dir": {str(model_dir)!r}, "tokenizer_record": {str(records["smollm2"])!r},
        "engine_model": "llm", "max_model_len": "0", "tokenizer_backend": "auto",
    }}.items()}}
    config = {{"name": stage, "parameters": params, "output": []}}
    module.TritonPythonModel().initialize({{"model_config": json.dumps(config)}})
    loaded = [m for m in heavy if m in sys.modules]
    assert not loaded, f"{{stage}} imported {{loaded}}"
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout[-2000:] + out.stderr[-3000:]


def test_where_fastokens_encodes_the_core_is_let_go_and_read_again_when_needed(tokenizer_dirs, records):
    """A tokenize stage on fastokens holds no Rust core of its own until a request needs one
    (offsets, decoding); the core read again gives transformers' answers."""
    light = Tokenizer.from_pretrained(tokenizer_dirs["smollm2"], backend="auto", record=records["smollm2"])
    hf = Tokenizer.from_pretrained(tokenizer_dirs["smollm2"], backend="huggingface")
    assert light.backend.name == "fastokens"
    proto = light.for_decoding
    assert proto._core is None
    opts = EncodeOptions(True, None, "right")
    assert [e.ids for e in light.encode_batch(TEXTS, opts)] == [e.ids for e in hf.encode_batch(TEXTS, opts)]
    assert (light.max_token_id, light.max_chars_per_token, light.vocab_size, light.is_fast) == (
        hf.max_token_id,
        hf.max_chars_per_token,
        hf.vocab_size,
        True,
    )
    assert proto._core is None, "plain encodes and the vocabulary's facts must not read the core"
    assert [e.offsets for e in light.encode_batch(TEXTS, opts, offsets=True)] == [
        e.offsets for e in hf.encode_batch(TEXTS, opts, offsets=True)
    ]
    ids = hf.hf.encode("Hello, world! 😀", add_special_tokens=True)
    assert light.decode(ids) == hf.decode(ids)
    assert proto._core is not None
