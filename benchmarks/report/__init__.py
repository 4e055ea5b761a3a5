"""Turn ``results.json`` into ``summary.json``, the charts and ``docs/PERFORMANCE.md``:
``summary`` (the figures), ``charts``, ``sections`` (one function per section of the document)
and ``document`` (the whole, written together)."""

from benchmarks.report.charts import charts
from benchmarks.report.document import HAND_WRITTEN, markdown, scrub_paths, write_all
from benchmarks.report.sections import (
    chat_speed_targets,
    gpu_section,
    mm_section,
    targets,
    targets_round2,
    vllm_rs_section,
)
from benchmarks.report.summary import engine_summary, head_to_head_summary, ids_summary, summarize, vllm_rs_summary

__all__ = [
    "HAND_WRITTEN",
    "charts",
    "chat_speed_targets",
    "engine_summary",
    "gpu_section",
    "head_to_head_summary",
    "ids_summary",
    "markdown",
    "mm_section",
    "scrub_paths",
    "summarize",
    "targets",
    "targets_round2",
    "vllm_rs_section",
    "vllm_rs_summary",
    "write_all",
]
