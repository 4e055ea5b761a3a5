"""The engine that turns text into ids: Hugging Face ``tokenizers`` or ``fastokens``.

Hugging Face's Rust tokenizer spends most of a request in its regex pre-tokenizer (about 0.4 ms
per 1,000 characters here). ``fastokens`` (Crusoe, Apache-2.0; the backend vLLM selects with
``VLLM_USE_FASTOKENS=1`` and SGLang with ``--tokenizer-backend fastokens``) reads the same
``tokenizer.json`` and returns the same ids one to two orders of magnitude faster.

Ids must equal transformers' token for token, so ``fastokens`` is only used where it is proven
on this very tokenizer at load: it is built from the live Hugging Face backend's JSON (added
tokens included) and must reproduce the Hugging Face ids of a probe set (hostile Unicode,
whitespace runs, every added token glued to text, truncation on both sides). Anything it does
not do (token offsets) stays on Hugging Face. ``auto`` (the default) falls back to Hugging Face
with a logged reason when the package is missing, the tokenizer does not load, or a probe differs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

log = logging.getLogger("renderer.tokenizer")

BACKENDS = ("auto", "huggingface", "fastokens")


class BackendUnavailableError(RuntimeError):
    """``fastokens`` was asked for explicitly and cannot serve this tokenizer exactly."""


@dataclass(frozen=True)
class BackendChoice:
    """The engine a tokenizer encodes with, and why."""

    name: str
    """``huggingface`` or ``fastokens``."""

    reason: str
    """Why this engine: the setting, or what ruled ``fastokens`` out."""


class FastokensEngine:
    """Stateless batch encoding on ``fastokens``: truncation is done here, never set on the
    shared Rust object, so one instance serves every thread."""

    def __init__(self, engine: Any) -> None:
        from fastokens._native import Encoding

        # A tokenizer.json may carry padding or truncation settings; ours are applied per call.
        engine.no_padding()
        engine.no_truncation()
        self._fk = engine
        self._n_special = engine.num_special_tokens_to_add(False)
        # The post-processor's tokens around one sequence, so truncated ids get them without a
        # Rust round trip; kept only if post-processing some ids really is prefix + ids + suffix.
        wrapped = list(engine.post_process(Encoding([]), None, add_special_tokens=True).ids)
        self._prefix, self._suffix = wrapped, []
        probe = [7, 8, 9]
        for cut in range(len(wrapped) + 1):
            if wrapped[:cut] + probe + wrapped[cut:] == list(
                engine.post_process(Encoding(probe), None, add_special_tokens=True).ids
            ):
                self._prefix, self._suffix = wrapped[:cut], wrapped[cut:]
                break
        else:
            self._prefix = None

    @classmethod
    def from_hf(cls, hf_backend: Any) -> "FastokensEngine":
        """Built from the live Hugging Face backend, so tokens added at load are included."""
        import fastokens

        return cls(fastokens.Tokenizer.from_json_str(hf_backend.to_str()))

    def encode_batch(
        self,
        texts: Sequence[str],
        *,
        add_special_tokens: bool,
        max_length: int | None,
        side: str,
        split_special_tokens: bool,
    ) -> list[list[int]]:
        """Ids per text, truncated as Hugging Face's ``longest_first`` truncation does for one
        sequence: the text's own tokens are cut to ``max_length`` minus the special tokens the
        post-processor adds, then those are added."""
        specials_in_budget = add_special_tokens and max_length is not None and max_length > self._n_special
        add = add_special_tokens and not specials_in_budget
        # One text at a time: the batch call fans out to a thread pool, which on a few cores shared
        # with Triton's instances costs more than it saves (measured: 5 vs 37 us per text).
        encode = self._fk.encode
        out = [encode(t, add_special_tokens=add, split_special_tokens=split_special_tokens).ids for t in texts]
        if max_length is None:
            return out
        if specials_in_budget:
            keep = max_length - self._n_special
            return [self._with_specials(truncate(x, keep, side)) for x in out]
        # No specials, or a budget they alone exceed: cut the whole result (transformers' fallback).
        return [truncate(x, max_length, side) for x in out]

    def encode_array(self, text: str, *, add_special_tokens: bool, split_special_tokens: bool) -> Any:
        """One text's ids, untruncated, as an int32 numpy array read from fastokens' flat buffer
        of little-endian uint32: no Python int per token and no packing afterwards (about half
        the cost of ``encode`` and packing its list on a chat prompt). Ids of a real vocabulary
        are below 2**31, so the int32 view reads the same values."""
        import numpy as np

        flat, _ = self._fk.encode_batch_flat(
            [text], add_special_tokens=add_special_tokens, split_special_tokens=split_special_tokens
        )
        return np.frombuffer(flat, dtype="<i4")

    def _with_specials(self, ids: list[int]) -> list[int]:
        if self._prefix is not None:
            return self._prefix + ids + self._suffix
        from fastokens._native import Encoding

        return list(self._fk.post_process(Encoding(ids), None, add_special_tokens=True).ids)


def truncate(seq: list[Any], n: int, side: str) -> list[Any]:
    """The ``n`` items a tokenizer keeps when truncating on ``side`` ("left" keeps the end)."""
    if len(seq) <= n:
        return seq
    return seq[len(seq) - n :] if side == "left" else seq[:n]


# --- choosing the engine ---------------------------------------------------------------------

# Shapes that have split tokenizers before: whitespace runs and line ends the pre-tokenizer
# regexes treat specially, contractions, digit runs, scripts without spaces, combining marks,
# emoji sequences, invisible and private characters, long runs that exercise BPE caches.
_PROBES = (
    "",
    " ",
    "  ",
    "\n",
    "\n\n\n",
    "\r\n",
    " \r\n \n",
    "\t\t x",
    "   leading",
    "trailing   ",
    "Hello, world! How's it going? I'M fine, they'll see; we'd've DONE it.",
    "x = [1, 22, 333, 4444, 55555, 666666]  # 3.14159e-10, 0x1F, 1,000,000",
    "def f(a, b):\n    return a ** b  # comment\n\n\nclass C:\n\tpass\n",
    '{"key": "value", "n": [1, 2.5, null, true], "nested": {"a": "\\u00e9"}}',
    "naïve café résumé Ünïcödé ß ǅ ǈ ǋ ʰʲ 々 ー",
    "e\u0301 a\u0308 c\u0327 \u20dd \u0903 NFD vs NFC \u00e9",
    "中文字符 日本語のテキスト ひらがな カタカナ 한국어 텍스트",
    "العربية עברית हिन्दी ٠١٢٣٤٥ ६७८९ ０１２ Ⅻ ½ ² ³",
    "😀👍🏽👨\u200d👩\u200d👧 🇫🇷 ❤️ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "\u00a0\u2028\u2029\u3000\u200b\u2009\u1680\u0085\ufeff\ufffd\x00\x01\x7f\x0b\x0c",
    "’‘“”«»—–… 'quoted' \"double\" `back`",
    "http://example.com/path?query=1&x=%20#frag user@example.org",
    "a" * 300,
    " " * 64,
    "ab" * 150,
    "!!!???...",
    "\n" * 20 + "x",
    "1" * 50,
)


def _probes(hf_backend: Any) -> list[str]:
    added = [t.content for t in hf_backend.get_added_tokens_decoder().values() if t.content]
    out = list(_PROBES)
    for k, tok in enumerate(added[:256]):
        # Each added token alone, glued to text, and between spaces/newlines (lstrip/rstrip).
        out += [tok, f"a{tok}b", f" {tok} ", f"\n{tok}\n", f"x {tok}y {added[(k + 1) % len(added)]}z"]
    return out


def _hf_ids(
    hf_backend: Any, texts: list[str], add_special_tokens: bool, max_length: int | None, side: str
) -> list[list[int]]:
    hf_backend.no_padding()
    if max_length is None:
        hf_backend.no_truncation()
    else:
        hf_backend.enable_truncation(max_length, strategy="longest_first", direction=side)
    return [e.ids for e in hf_backend.encode_batch(texts, add_special_tokens=add_special_tokens)]


def parity_problem(hf_backend: Any, engine: FastokensEngine, split_special_tokens: bool) -> str | None:
    """The first probe on which ``engine`` and Hugging Face disagree, described; None if none."""
    texts = _probes(hf_backend)
    n_special = hf_backend.num_special_tokens_to_add(False)
    # The probes run on the shared prototype: put back every setting they change.
    saved = hf_backend.encode_special_tokens, hf_backend.truncation, hf_backend.padding
    hf_backend.encode_special_tokens = split_special_tokens
    try:
        for add_special in (False, True):
            for max_length, side in ((None, "right"), (n_special + 3, "right"), (n_special + 3, "left")):
                want = _hf_ids(hf_backend, texts, add_special, max_length, side)
                got = engine.encode_batch(
                    texts,
                    add_special_tokens=add_special,
                    max_length=max_length,
                    side=side,
                    split_special_tokens=split_special_tokens,
                )
                if max_length is None:  # the array path serves untruncated texts only
                    arrays = [
                        engine.encode_array(
                            t, add_special_tokens=add_special, split_special_tokens=split_special_tokens
                        ).tolist()
                        for t in texts
                    ]
                    for text, w, g in zip(texts, want, arrays):
                        if w != g:
                            return (
                                f"probe {text[:60]!r} (add_special_tokens={add_special}, as an array): "
                                f"Hugging Face {w[:8]}..., fastokens {g[:8]}..."
                            )
                for text, w, g in zip(texts, want, got):
                    if w != g:
                        return (
                            f"probe {text[:60]!r} (add_special_tokens={add_special}, max_length={max_length}, "
                            f"{side}): Hugging Face {w[:8]}..., fastokens {g[:8]}..."
                        )
    finally:
        hf_backend.encode_special_tokens, truncation, padding = saved
        hf_backend.no_truncation() if truncation is None else hf_backend.enable_truncation(**truncation)
        hf_backend.no_padding() if padding is None else hf_backend.enable_padding(**padding)
    return None


def choose(setting: str, hf_tokenizer: Any) -> tuple[BackendChoice, FastokensEngine | None]:
    """Resolve ``auto`` / ``huggingface`` / ``fastokens`` for this tokenizer."""
    setting = (setting or "auto").strip().lower()
    if setting not in BACKENDS:
        raise ValueError(f"tokenizer backend must be one of {', '.join(BACKENDS)}, got {setting!r}")
    if setting == "huggingface":
        return BackendChoice("huggingface", "set to huggingface"), None
    backend = getattr(hf_tokenizer, "backend_tokenizer", None)
    problem, engine = None, None
    if backend is None:
        problem = "no fast (tokenizer.json) tokenizer to read"
    else:
        try:
            engine = FastokensEngine.from_hf(backend)
            problem = parity_problem(backend, engine, bool(getattr(hf_tokenizer, "split_special_tokens", False)))
        except ImportError:
            problem = "the fastokens package is not installed"
        except Exception as e:  # noqa: BLE001 - an unsupported tokenizer: say why and fall back
            problem = f"fastokens cannot load this tokenizer: {type(e).__name__}: {e}"
    if problem is None:
        return BackendChoice("fastokens", f"set to {setting}; equal to Hugging Face on every load-time probe"), engine
    if setting == "fastokens":
        raise BackendUnavailableError(f"tokenizer backend fastokens: {problem}")
    log.warning("tokenizer backend: using Hugging Face tokenizers: %s", problem)
    return BackendChoice("huggingface", problem), None
