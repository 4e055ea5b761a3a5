"""A stub's py-spy profile split into named parts: the shares docs/PERFORMANCE.md quotes.

Record a stub under load (py-spy is a tool, not a project dependency)::

    py-spy record -r 200 -d 15 -f raw -o tokenize.raw -p <tokenize stub pid>

then ``python -m benchmarks.pyspy_split tokenize tokenize.raw`` (or ``chat_render``). A sample
whose stack holds no Python frame was in the stub's C++ loop or waiting; the rest are "in Python".
Each of those counts once, for the first part (in ``PARTS`` order) that one of its frames
names; "rest" is what no part names. Shares are of the samples in Python.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

PARTS: dict[str, dict[str, tuple[str, ...]]] = {
    "tokenize": {
        "encode": ("encode_batch",),
        "output tensors": ("StageOutputs.__call__", "_respond"),
        "input parse": ("parse_each", "_parse"),
    },
    "chat_render": {
        "template (minijinja)": ("CompiledChatTemplate._render",),
        "output tensors": ("StageOutputs.__call__",),
        "messages JSON parse": ("messages_from_json", "get_json", "get_str"),
        "validation and parse (full path)": ("validate_chat_request", "parse_messages", "from_request", "_postprocess"),
    },
}
"""Per stub, each part and the frame names (substrings of py-spy's ``function (file:line)``) that
mark it."""


def split(raw: str, parts: dict[str, tuple[str, ...]]) -> dict[str, float]:
    """``in_python``: the share of all samples with a Python frame; then each part's (and "rest"'s)
    share of those."""
    total = idle = 0
    counts: Counter[str] = Counter()
    for line in raw.splitlines():
        if not line.strip():
            continue
        stack, n = line.rsplit(" ", 1)
        samples = int(n)
        total += samples
        frames = [f for f in stack.split(";") if f]
        if not frames:
            idle += samples
            continue
        part = next((name for name, marks in parts.items() if any(m in f for f in frames for m in marks)), "rest")
        counts[part] += samples
    active = total - idle
    out = {"in_python": round(active / total, 3) if total else 0.0}
    for name in [*parts, "rest"]:
        out[name] = round(counts[name] / active, 3) if active else 0.0
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stub", choices=sorted(PARTS))
    ap.add_argument("raw", type=Path, help="py-spy record -f raw output")
    a = ap.parse_args(argv)
    shares = split(a.raw.read_text(), PARTS[a.stub])
    print(f"{a.stub}: {100 * shares.pop('in_python'):.0f}% of samples in Python; of those:")
    for name, share in shares.items():
        print(f"  {name:34} {100 * share:3.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
