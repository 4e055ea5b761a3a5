"""The genai-perf live test's single retry (tests/support/genai_perf_output.py) on a captured run.

``tests/fixtures/genai_perf/export_lost.stdout.txt`` is genai-perf's ``--verbose`` output from the
live test's streamed profile on 2026-12-06 when perf_analyzer exited 0 leaving an empty export:
its report counts 24 of 24 requests on the client, the ensemble and every composing model. That
run, and only that shape of run, is retried; each variant below that must fail the test is not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from genai_perf_output import export_lost_after_success, perf_analyzer_report

CAPTURED = (Path(__file__).resolve().parents[1] / "fixtures" / "genai_perf" / "export_lost.stdout.txt").read_text()
REQUESTS = 24


def _artifacts(tmp_path: Path, export: str | None = "") -> Path:
    """An artifact folder as genai-perf leaves it: one run folder, its export ``export`` (None: absent)."""
    run = tmp_path / "ensemble-triton-tensorrtllm-concurrency2"
    run.mkdir()
    if export is not None:
        (run / "profile_export.json").write_text(export)
    return tmp_path


def test_the_captured_run_is_the_slip(tmp_path):
    assert "Successful request count: 24" in perf_analyzer_report(CAPTURED)
    assert export_lost_after_success(_artifacts(tmp_path), CAPTURED, REQUESTS)


def test_the_openai_front_with_no_server_counts_is_read_by_the_client_alone(tmp_path):
    client_only = CAPTURED[: CAPTURED.index("  Server:")] + CAPTURED[CAPTURED.index("Inferences/Second") :]
    assert export_lost_after_success(_artifacts(tmp_path), client_only, REQUESTS)


@pytest.mark.parametrize(
    "change",
    [
        ("Request count: 24", "Request count: 23"),  # the client counted fewer
        ("      Successful request count: 24", "      Successful request count: 23"),  # a step failed one
        ("    Successful request count: 24", "    Successful request count: 22"),  # the ensemble did
        ("Request concurrency: 2", "Request concurrency: 2\nThread [0] had error: Failed to infer"),
        ("Running Perf Analyzer", "Running perf"),  # no report to read
    ],
    ids=["short-client-count", "step-failed", "ensemble-failed", "error-line", "no-report"],
)
def test_any_other_run_is_not_retried(tmp_path, change):
    old, new = change
    assert old in CAPTURED
    assert not export_lost_after_success(_artifacts(tmp_path), CAPTURED.replace(old, new, 1), REQUESTS)


@pytest.mark.parametrize("export", ['{"experiments": []}', None], ids=["export-written", "no-export"])
def test_a_failure_with_the_export_written_or_missing_is_not_retried(tmp_path, export):
    assert not export_lost_after_success(_artifacts(tmp_path, export), CAPTURED, REQUESTS)


def test_another_request_count_is_not_this_run(tmp_path):
    assert not export_lost_after_success(_artifacts(tmp_path), CAPTURED, 25)
