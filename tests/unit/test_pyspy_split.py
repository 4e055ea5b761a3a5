"""``benchmarks.pyspy_split``: the shares docs/PERFORMANCE.md quotes from a stub's py-spy profile."""

from __future__ import annotations

from benchmarks.pyspy_split import PARTS, split

RAW = "\n".join(
    [
        " 60",  # no Python frame: the stub's C++ loop or waiting
        "execute (model.py:58);Tokenizer.encode_batch (renderer/tokenizer.py:123) 10",
        "execute (model.py:59);_respond (model.py:69);StageOutputs.__call__ (triton_io/tensors.py:158) 15",
        "execute (model.py:57);parse_each (triton_io/tensors.py:222) 5",
        # Two parts on one stack: the first in PARTS order takes it.
        "execute (model.py:58);encode_batch (x.py:1);_respond (model.py:69) 4",
        "execute (model.py:60);capture_error (renderer/renderer.py:294) 6",
        "",
    ]
)


def test_shares_are_of_the_samples_in_python_and_each_sample_counts_once():
    shares = split(RAW, PARTS["tokenize"])
    assert shares["in_python"] == 0.4
    assert shares == {"in_python": 0.4, "encode": 0.35, "output tensors": 0.375, "input parse": 0.125, "rest": 0.15}
    assert abs(sum(v for k, v in shares.items() if k != "in_python") - 1) < 1e-9


def test_an_empty_profile_has_no_shares():
    assert split("", PARTS["chat_render"]) == {"in_python": 0.0, **dict.fromkeys([*PARTS["chat_render"], "rest"], 0.0)}
