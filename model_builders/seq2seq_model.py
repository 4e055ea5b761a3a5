"""Build the tiny encoder-decoder model the encoder-decoder ensembles serve by default.

No small seq2seq weights exist on the package registries, so the model is a BART from a
config, with every weight drawn from a seeded numpy generator in a fixed parameter order:
the bytes are the same on every machine and every torch version. It pairs with the default
model's tokenizer. It generates nonsense, but through the real transformers classes, which is
what the ensembles need to be exercised end to end.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from model_builders.publish import exclusive

SEED = 20261129
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def build(out_dir: Path, tokenizer_dir: Path) -> Path:
    """The tiny BART folder at ``out_dir``, built once (other builders of it wait, then keep it)."""
    with exclusive(out_dir):
        return _build(out_dir, tokenizer_dir)


def _build(out_dir: Path, tokenizer_dir: Path) -> Path:
    if (out_dir / "config.json").exists() and (out_dir / "model.safetensors").exists():
        return out_dir  # cached
    import numpy as np
    import torch
    from transformers import BartConfig, BartForConditionalGeneration

    vocab = 49152
    config = BartConfig(
        vocab_size=vocab,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_position_embeddings=512,
        # Distinct from BOS (1) so tests can tell which one the renderer used.
        decoder_start_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        forced_bos_token_id=None,
        forced_eos_token_id=None,
        dtype="float32",
        tie_word_embeddings=False,
    )
    model = BartForConditionalGeneration(config)
    rng = np.random.default_rng(SEED)
    state = {}
    for name, param in sorted(model.state_dict().items()):
        if name.endswith("bias") or "layer_norm" in name or "layernorm" in name:
            value = np.ones(param.shape) if name.endswith("weight") else np.zeros(param.shape)
        else:
            value = rng.standard_normal(param.shape) * 0.05
        state[name] = torch.from_numpy(value.astype(np.float32))
    model.load_state_dict(state, strict=False)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    for f in TOKENIZER_FILES:
        shutil.copy2(tokenizer_dir / f, tmp / f)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("tokenizer_dir", type=Path)
    a = ap.parse_args(argv)
    print(build(a.out_dir, a.tokenizer_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
