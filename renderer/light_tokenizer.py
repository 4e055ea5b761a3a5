"""A tokenizer served without transformers: the Rust ``tokenizers`` core and the few facts
transformers keeps around it, recorded once by a build step that proves them equal to transformers'.

Importing transformers costs a stub about 250 MB and seconds of start-up, while every id the
renderer sends already comes from the Rust core (``Tokenizer._encode_fast`` drives it directly).
What transformers adds around the core for a fast tokenizer is small: the special ids, the
truncation side, ``split_special_tokens``, the length of the vocabulary, and the clean-up step of
``decode``. The build step (``build``, which the launcher runs in a process of its own with
``BUILD_COMMAND``) loads the model folder's tokenizer with transformers once, writes its
live backend (``tokenizer.json``, tokens added at load included) and those facts, and proves the
recorded tokenizer equal to transformers' on encode, decode and every fact read, over the
load-time probes of ``tokenizer_backend``, every added token and seeded random ids. A record whose
proof fails says why, and the stubs then load transformers, logging the reason; so does a record
whose model folder changed since it was made (its fingerprint differs).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from . import tokenizer_backend

FORMAT = 2
"""Version of the record's layout; a record of another format is rebuilt."""

BUILD_COMMAND = "import sys; from renderer.light_tokenizer import main; sys.exit(main())"
"""``python -c BUILD_COMMAND MODEL_DIR OUT_DIR`` records a tokenizer (``-m`` would import this
module twice: the package imports it)."""

FACTS_FILE = "facts.json"
TOKENIZER_FILE = "tokenizer.json"

# Files that never shape a tokenizer (weights); every other file at the folder's top level
# (tokenizer and template files, configs) is part of the fingerprint.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx", ".ckpt", ".npz")

# Random id sequences decoded by the proof, per length (seeded: the same proof every build).
_RANDOM_DECODES = 200
_RANDOM_SEED = 20261207


@dataclass(frozen=True)
class TokenizerFacts:
    """What the renderer reads of a transformers fast tokenizer beyond its Rust core."""

    vocab_size: int
    """``len(tokenizer)``: the base vocabulary plus added tokens."""

    bos_token_id: int | None
    """Beginning-of-sequence id, if the tokenizer names one."""

    eos_token_id: int | None
    """End-of-sequence id, if the tokenizer names one."""

    pad_token_id: int | None
    """Padding id, if the tokenizer names one."""

    truncation_side: str
    """"left" or "right": the side truncation cuts by default."""

    split_special_tokens: bool
    """Whether special-token text in a prompt is split like any text (not matched as a token)."""

    clean_up_decode: bool
    """Whether transformers' ``decode`` applies its clean-up of spaces before punctuation (its
    ``clean_up_tokenization_spaces``, which it ignores for BPE models unless forced)."""

    max_token_id: int
    """The largest id of ``get_vocab()``."""

    max_chars_per_token: int
    """The longest token string of ``get_vocab()``: a bound on the characters one token covers."""


@dataclass(frozen=True)
class Record:
    """The build step's verdict on one model folder's tokenizer (``facts.json``)."""

    format: int
    """``FORMAT`` when written."""

    fingerprint: str
    """``fingerprint(model_dir)`` when written: a record of other files is stale."""

    transformers_version: str
    """The transformers the proof ran against."""

    proven: bool
    """Whether the recorded tokenizer equals transformers' on every check."""

    reason: str
    """What the proof found: "equal on N checks", or the first difference (or why none could run)."""

    facts: TokenizerFacts | None
    """The facts, when proven."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Record":
        data = json.loads(text)
        facts = data.get("facts")
        return cls(**{**data, "facts": TokenizerFacts(**facts) if facts else None})


def fingerprint(model_dir: str | Path) -> str:
    """A hash of the folder's non-weight files (names and bytes): what a tokenizer is made of."""
    h = hashlib.sha256(f"format {FORMAT}\n".encode())
    for path in sorted(Path(model_dir).iterdir()):
        if path.is_file() and not path.name.endswith(_WEIGHT_SUFFIXES):
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


class LightTokenizer:
    """The part of a transformers fast tokenizer the renderer uses, over the recorded Rust core:
    the same attribute and method names, so ``renderer.tokenizer.Tokenizer``, the detokenizer and
    the load-time fastokens proof take either.

    The core can be let go (``release_core``) and is read again from the record's file on its
    next use: where fastokens encodes every plain text, a stage needs the core only for token
    offsets, decoding and the texts fastokens declines, and need not hold it (about 15 MB) until
    a request asks for one of those."""

    def __init__(self, backend: Any, facts: TokenizerFacts, core_file: Path | None = None) -> None:
        self._core = backend
        self._core_file = core_file
        self.facts = facts
        self.bos_token_id = facts.bos_token_id
        self.eos_token_id = facts.eos_token_id
        self.pad_token_id = facts.pad_token_id
        self.truncation_side = facts.truncation_side
        self.split_special_tokens = facts.split_special_tokens

    @property
    def _tokenizer(self) -> Any:
        """The Rust core, read from the record again if it was let go (the name transformers'
        tokenizers give it, which the detokenizer reads)."""
        core = self._core
        if core is None:
            from tokenizers import Tokenizer as RustTokenizer

            core = self._core = RustTokenizer.from_file(str(self._core_file))
        return core

    @property
    def backend_tokenizer(self) -> Any:
        return self._tokenizer

    def release_core(self) -> bool:
        """Let the core go until it is next used; False where there is no file to read it from."""
        if self._core_file is None:
            return False
        self._core = None
        return True

    def __len__(self) -> int:
        return self.facts.vocab_size

    def get_vocab(self) -> dict[str, int]:
        return self._tokenizer.get_vocab(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """transformers' ``encode`` of one text, untruncated."""
        backend = self._tokenizer
        if backend.encode_special_tokens != self.split_special_tokens:
            backend.encode_special_tokens = self.split_special_tokens
        backend.no_truncation()
        backend.no_padding()
        return backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """transformers' ``decode`` of one sequence."""
        text = self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return clean_up_tokenization(text) if self.facts.clean_up_decode else text


def clean_up_tokenization(text: str) -> str:
    """transformers' ``clean_up_tokenization``: spaces before punctuation and contractions."""
    for old, new in (
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ):
        text = text.replace(old, new)
    return text


def load(record_dir: str | Path, model_dir: str | Path) -> tuple[LightTokenizer | None, str]:
    """The recorded tokenizer of ``model_dir``, or None and why it cannot be used."""
    record_dir = Path(record_dir)
    try:
        record = Record.from_json((record_dir / FACTS_FILE).read_text())
    except (OSError, ValueError, TypeError) as e:
        return None, f"no usable tokenizer record in {record_dir} ({type(e).__name__}: {e})"
    if record.format != FORMAT:
        return None, f"the tokenizer record in {record_dir} has format {record.format}, not {FORMAT}"
    if not record.proven or record.facts is None:
        return None, f"the recorded tokenizer is not transformers' ({record.reason})"
    if record.fingerprint != fingerprint(model_dir):
        return None, f"{model_dir} changed since its tokenizer was recorded in {record_dir}"
    from tokenizers import Tokenizer as RustTokenizer

    core_file = record_dir / TOKENIZER_FILE
    return LightTokenizer(RustTokenizer.from_file(str(core_file)), record.facts, core_file), (
        f"recorded tokenizer, equal to transformers {record.transformers_version} at build ({record.reason})"
    )


# --- the build step (imports transformers) ---------------------------------------------------


def facts_of(hf: Any) -> TokenizerFacts:
    """What ``LightTokenizer`` needs of a transformers fast tokenizer."""
    bpe = type(hf.backend_tokenizer.model).__name__ == "BPE"
    vocab = hf.get_vocab()
    forced = bool(getattr(hf, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False))
    return TokenizerFacts(
        vocab_size=len(hf),
        bos_token_id=hf.bos_token_id,
        eos_token_id=hf.eos_token_id,
        pad_token_id=hf.pad_token_id,
        truncation_side=hf.truncation_side or "left",
        split_special_tokens=bool(getattr(hf, "split_special_tokens", False)),
        clean_up_decode=bool(hf.clean_up_tokenization_spaces) and (not bpe or forced),
        max_token_id=max(vocab.values()) if vocab else len(hf) - 1,
        max_chars_per_token=max((len(t) for t in vocab), default=1),
    )


def _decode_cases(hf: Any, probe_ids: list[list[int]]) -> list[list[int]]:
    """Id sequences to decode: every probe's ids, every added token alone and among others, and
    seeded random sequences over the whole vocabulary."""
    added = sorted(int(i) for i in hf.backend_tokenizer.get_added_tokens_decoder())
    n = len(hf)
    rng = random.Random(_RANDOM_SEED)
    cases = list(probe_ids) + [[i] for i in added]
    cases += [[rng.randrange(n) for _ in range(1 + k % 24)] for k in range(_RANDOM_DECODES)]
    cases += [rng.sample(range(n), 6) + [a] + rng.sample(range(n), 3) for a in added[:256]]
    return cases


def proof_problem(hf: Any, light: LightTokenizer) -> tuple[str | None, int]:
    """The first difference between ``light`` and the transformers tokenizer ``hf`` on what the
    renderer reads of it, described (None if none), and the number of checks made."""
    checks = 0
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "truncation_side", "split_special_tokens"):
        checks += 1
        if getattr(hf, name) != getattr(light, name):
            return f"{name}: transformers {getattr(hf, name)!r}, recorded {getattr(light, name)!r}", checks
    checks += 4
    if len(hf) != len(light):
        return f"len: transformers {len(hf)}, recorded {len(light)}", checks
    vocab = hf.get_vocab()
    if vocab != light.get_vocab():
        return "get_vocab differs", checks
    if (max(vocab.values(), default=len(hf) - 1), max(map(len, vocab), default=1)) != (
        light.facts.max_token_id,
        light.facts.max_chars_per_token,
    ):
        return "max_token_id or max_chars_per_token differs from transformers' vocabulary", checks
    texts = tokenizer_backend._probes(hf.backend_tokenizer)
    probe_ids = []
    for add_special in (False, True):
        for text in texts:
            checks += 1
            want, got = hf.encode(text, add_special_tokens=add_special), light.encode(text, add_special)
            if want != got:
                return f"encode {text[:60]!r} (add_special_tokens={add_special}): {want[:8]} vs {got[:8]}", checks
            probe_ids.append(want)
    for ids in _decode_cases(hf, probe_ids):
        for skip in (False, True):
            checks += 1
            want, got = hf.decode(ids, skip_special_tokens=skip), light.decode(ids, skip_special_tokens=skip)
            if want != got:
                return f"decode {ids[:8]} (skip_special_tokens={skip}): {want[:40]!r} vs {got[:40]!r}", checks
    return None, checks


def build(model_dir: str | Path, out_dir: str | Path) -> Record:
    """Record ``model_dir``'s tokenizer in ``out_dir`` and prove it; the record says whether it may
    be served. Written atomically: a reader sees the old record or the whole new one."""
    from importlib.metadata import version

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    print_ = fingerprint(model_dir)
    tv = version("transformers")
    tmp = out_dir / f".{TOKENIZER_FILE}.{os.getpid()}"
    try:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(model_dir))
        backend = getattr(hf, "backend_tokenizer", None)
        if backend is None:
            record = Record(FORMAT, print_, tv, False, "a slow (Python) tokenizer: no Rust core to record", None)
        else:
            from tokenizers import Tokenizer as RustTokenizer

            tmp.write_text(backend.to_str())
            facts = facts_of(hf)
            problem, checks = proof_problem(hf, LightTokenizer(RustTokenizer.from_file(str(tmp)), facts))
            if problem is None:
                record = Record(FORMAT, print_, tv, True, f"equal on {checks} checks", facts)
                os.replace(tmp, out_dir / TOKENIZER_FILE)
            else:
                record = Record(FORMAT, print_, tv, False, problem, None)
    except Exception as e:  # noqa: BLE001 - any failure is a record that says why, and transformers serves
        record = Record(FORMAT, print_, tv, False, f"recording failed: {type(e).__name__}: {e}", None)
    finally:
        tmp.unlink(missing_ok=True)
    facts_tmp = out_dir / f".{FACTS_FILE}.{os.getpid()}"
    facts_tmp.write_text(record.to_json())
    os.replace(facts_tmp, out_dir / FACTS_FILE)
    return record


def is_current(out_dir: str | Path, model_dir: str | Path, print_: str | None = None) -> bool:
    """Whether ``out_dir`` holds a record of this format, made from ``model_dir`` as it is now by
    the transformers installed now (proven or not: an unproven record is not rebuilt until one
    of them changes). ``print_``: ``fingerprint(model_dir)`` where the caller has it already."""
    try:
        record = Record.from_json((Path(out_dir) / FACTS_FILE).read_text())
    except (OSError, ValueError, TypeError):
        return False
    from importlib.metadata import version

    return (
        record.format == FORMAT
        and record.transformers_version == version("transformers")
        and record.fingerprint == (print_ or fingerprint(model_dir))
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -c BUILD_COMMAND MODEL_DIR OUT_DIR (renderer.light_tokenizer)", file=sys.stderr)
        return 2
    record = build(args[0], args[1])
    print(f"tokenizer record {args[1]}: {'proven' if record.proven else 'NOT proven'} ({record.reason})")
    return 0
