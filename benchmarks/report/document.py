"""``docs/PERFORMANCE.md``, ``summary.json`` and the charts written together (``write_all``), the
hand-written tail of the document kept."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.layout import ROOT

from benchmarks.report.charts import charts
from benchmarks.report import sections
from benchmarks.report.summary import summarize


def markdown(res: dict[str, Any], s: dict[str, Any], out_dir: Path, doc: Path, pngs: list[Path]) -> str:
    """``docs/PERFORMANCE.md`` from the results and their summary, section by section."""
    rel = lambda p: os.path.relpath(p, doc.parent)  # noqa: E731
    peer = res.get("peer") or {}
    st = res["settings"]
    lines: list[str] = []
    lines += sections.intro_section(res, s)
    lines += sections.headline_section(s, peer)
    lines += sections.targets(s)
    lines += sections.targets_round2(s)
    lines += sections.chat_speed_targets(res, s)
    lines += sections.head_to_head_section(s)
    lines += sections.lean_targets_section(res)
    lines += sections.vllm_rs_section(s)
    lines += sections.floor_section(res, s)
    lines += sections.same_ids_section(s, rel, pngs)
    lines += sections.sweep_section(res, s, peer, st)
    lines += sections.other_mixes_section(res, s)
    lines += sections.loadgen_section(res, s, peer)
    lines += sections.scaling_section(s)
    lines += sections.streaming_section(res)
    lines += sections.inprocess_section(res, s)
    lines += sections.footprint_section(res)
    lines += sections.edge_section(res)
    lines += sections.mm_section(res)
    lines += sections.gpu_section(ROOT / "benchmarks" / "results" / "gpu_check.json")
    lines += sections.overload_section(ROOT / "benchmarks" / "results" / "overload_signal.json")
    lines += sections.engine_section(res)
    lines += sections.front_section(res)
    lines += sections.reproduce_section(res, s, peer)
    lines += sections.method_section(res, s, peer)
    return "\n".join(lines) + "\n"


def scrub_paths(value: Any) -> Any:
    """``value`` with this checkout's absolute path made relative and temporary paths shortened, so
    a committed report names no machine's folders (error texts quote command lines)."""
    if isinstance(value, str):
        text = value.replace(str(ROOT) + os.sep, "").replace(str(ROOT), ".")
        return _TMP_PATH.sub("<tmp>", text)
    if isinstance(value, list):
        return [scrub_paths(v) for v in value]
    if isinstance(value, dict):
        return {k: scrub_paths(v) for k, v in value.items()}
    return value


_TMP_PATH = re.compile(re.escape(tempfile.gettempdir()) + r"/[^\s'\"]*")


def write_all(res: dict[str, Any], out_dir: Path, doc: Path | None) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    res = scrub_paths(res)
    s = summarize(res)
    pngs = charts(res, out_dir)
    s["charts"] = [os.path.relpath(p, ROOT) for p in pngs]
    (out_dir / "summary.json").write_text(json.dumps(s, indent=1) + "\n")
    if doc is not None:
        doc.parent.mkdir(parents=True, exist_ok=True)
        kept = _hand_written(doc)
        doc.write_text(markdown(res, s, out_dir, doc, pngs) + kept)
    return s


HAND_WRITTEN = "<!-- Hand-written sections below this line: benchmarks.report keeps them as they are. -->"


def _hand_written(doc: Path) -> str:
    """The part of an existing report from ``HAND_WRITTEN`` on (measurements made by other commands,
    written by hand), carried into the regenerated one."""
    text = doc.read_text() if doc.is_file() else ""
    at = text.find(HAND_WRITTEN)
    return "\n" + text[at:] if at >= 0 else ""
