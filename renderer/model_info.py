"""Facts about the served model read from its folder: context length, special ids, vocabulary."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

# Config keys that carry a context length, in the order vLLM consults them.
_CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


def config_number(params: Mapping[str, str], name: str, kind: type, default: Any) -> Any:
    """A number from a model config's parameters (what the launcher writes from its settings);
    an absent or empty parameter keeps ``default``."""
    raw = params.get(name, "")
    return kind(raw) if raw.strip() else default


def read_json_object(path: Path) -> dict[str, Any]:
    """A model folder's optional JSON file as a dict: ``{}`` when it is absent or not an object."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class ModelInfo:
    """What the renderer needs to know about the model, independent of the tokenizer."""

    model_dir: Path
    """The Hugging Face model folder."""

    max_model_len: int
    """Context length: input plus output tokens."""

    is_encoder_decoder: bool
    """Whether prompts have an encoder and a decoder part."""

    decoder_start_token_id: int | None
    """First decoder token of an encoder-decoder model, if the config names one."""

    hidden_size: int | None
    """Width of the embedding table: prompt embeds must match it."""

    eos_token_ids: tuple[int, ...] = ()
    """Ids that end generation (generation_config.json, else config.json)."""

    pad_token_id: int | None = None
    """Padding id, when the model names one."""

    vocab_size: int = 0
    """Rows of the model's embedding table (ids at or above it are prompt-table ids)."""

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, max_model_len: int = 0) -> "ModelInfo":
        model_dir = Path(model_dir)
        cfg = json.loads((model_dir / "config.json").read_text())
        text_cfg = cfg.get("text_config") or cfg
        derived = next((int(text_cfg[k]) for k in _CONTEXT_KEYS if isinstance(text_cfg.get(k), int)), None)
        if derived is None:
            derived = next((int(cfg[k]) for k in _CONTEXT_KEYS if isinstance(cfg.get(k), int)), 2048)
        if max_model_len and max_model_len > derived:
            raise ValueError(f"max_model_len={max_model_len} is greater than the model's context length {derived}")
        gen = read_json_object(model_dir / "generation_config.json")
        eos = gen.get("eos_token_id", cfg.get("eos_token_id", text_cfg.get("eos_token_id")))
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
        pad = gen.get("pad_token_id", cfg.get("pad_token_id"))
        return cls(
            model_dir=model_dir,
            max_model_len=max_model_len or derived,
            is_encoder_decoder=bool(cfg.get("is_encoder_decoder", False)),
            decoder_start_token_id=cfg.get("decoder_start_token_id"),
            hidden_size=text_cfg.get("hidden_size") or text_cfg.get("d_model"),
            eos_token_ids=eos_ids,
            pad_token_id=pad if isinstance(pad, int) else None,
            vocab_size=int(text_cfg.get("vocab_size") or cfg.get("vocab_size") or 0),
        )
