"""Reading genai-perf's verbose output: the one perf_analyzer slip a live test may retry.

genai-perf runs perf_analyzer and then parses its profile export. perf_analyzer 2.51 now and then
exits 0 having written an empty export after its own report counted every request completed, and
genai-perf then fails parsing it. ``tests/live/test_genai_perf_live.py`` profiles once more on
exactly that signature and on nothing else; ``tests/unit/test_genai_perf_output.py`` holds this
reading to a captured failing run (``tests/fixtures/genai_perf/export_lost.stdout.txt``) and to
variants of it that must not be retried.
"""

from __future__ import annotations

import re
from pathlib import Path


def perf_analyzer_report(stdout: str) -> str:
    """perf_analyzer's own report inside genai-perf's ``--verbose`` output; empty when absent."""
    start, end = stdout.find("Running Perf Analyzer"), stdout.find("Loading response data")
    return stdout[start:end] if 0 <= start < end else ""


def export_lost_after_success(artifacts: Path, stdout: str, requests: int) -> bool:
    """perf_analyzer's slip, and only it: the one profile export under ``artifacts`` is empty, and
    its report counted all ``requests`` as completed on the client (and successful on every server
    step, where it reads Triton's counts), with no error. A request that failed, a short count,
    any error line, or a failure with an export written is never this."""
    exports = list(artifacts.glob("*/profile_export.json"))
    if len(exports) != 1 or exports[0].stat().st_size != 0:
        return False
    report = perf_analyzer_report(stdout)
    client, _, server = report.partition("Server:")
    # Triton's own counts (the ensemble, then each step) where perf_analyzer reads them; the OpenAI
    # front has none to read, and there the client's count of completed requests stands alone.
    served = re.findall(r"Successful request count: (\d+)", server)
    return (
        f"Request count: {requests}\n" in client
        and all(int(n) == requests for n in served)
        and "error" not in report.lower()
    )
