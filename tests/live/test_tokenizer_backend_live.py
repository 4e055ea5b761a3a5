"""The served ``tokenize`` stage picked fastokens, and its ids equal transformers' on text the load-time
probes never saw.
"""

from __future__ import annotations

from pathlib import Path

import pytest


# --- the live server ----------------------------------------------------------------------------


@pytest.mark.live
def test_live_tokenize_stage_encodes_with_fastokens(server, client, hf_tokenizer):
    """The served tokenize stage picked fastokens (so every live parity test exercises it), and
    its ids equal transformers' on text the load-time probes never saw."""
    lines = [
        ln
        for ln in Path(server.log_file).read_text(errors="replace").splitlines()
        if "tokenize: tokenizer backend" in ln
    ]
    assert lines, "the tokenize stage logged no tokenizer backend"
    assert "tokenizer backend fastokens" in lines[-1], lines[-1]
    for text in (
        "Ünïcödé 中文 👨\u200d👩\u200d👧 don't   stop\r\n\t<|im_start|>x",
        "a" * 3000 + " b",
        "x\u3000y\u2028z 1234567",
    ):
        assert client.render_completion(text).input_ids == hf_tokenizer(text)["input_ids"]
