"""Valid and invalid generation requests together, on every protocol, never crash tritonserver.

The short form of ``benchmarks/mixed_traffic.py``: four clients each send, in turn, a
request that ``chat_render``, ``tokenize``, ``generation_params``, ``ensemble_params`` or the
front must refuse and a valid one, over Triton's HTTP ``generate`` and ``generate_stream``, gRPC
streams (some cancelled early) and the OpenAI front (streamed or not, some streams dropped). Every
refusal must be a client error carrying its message, every valid answer what the same request
answered alone, and tritonserver must be the same process at the end, with no signal in its log and
no restart. Before the ensembles became chains this crashed the server within a few dozen
requests. Every gRPC stream here carries ``triton_grpc_error: true``, as any third-party client may:
behind the edge (launcher/edge.py) Triton never sees it; sent to Triton 2.51 itself, it crashed the
server within a few dozen requests (the second test checks Triton saw none of its failed streams).
"""

from __future__ import annotations

from pathlib import Path

import os

import pytest
import ports

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.live

REQUESTS = int(os.environ.get("MIXED_TRAFFIC_REQUESTS", 400))
PORT = ports.port("mixed_traffic")


@pytest.fixture(scope="module")
def server(model_dir):
    """Its own server with the deployment's settings: the session server's batching delay (5 ms,
    for the batch tests) holds every stage's answer back, which hid the crash."""
    from benchmarks.mixed_traffic import settings
    from launcher import cli as launch

    s = settings(ROOT / "build" / "test-mixed-traffic", PORT)
    if launch.start(s) != 0:
        pytest.fail(f"tritonserver did not start; see {s.log_file}")
    yield s
    launch.stop(s)


def test_mixed_valid_and_invalid_requests_leave_the_server_up(server):
    from benchmarks.mixed_traffic import Sender, check_server, drive
    from launcher import cli as launch

    sender = Sender(server.host, server.http_port, server.grpc_port, server.openai_port, grpc_error_header=True)
    pid = launch.running_pid(server)
    assert pid is not None

    def run():
        return drive(
            sender, REQUESTS, seconds=600, threads=4, seed=23, server_alive=lambda: launch.running_pid(server) == pid
        )

    report = check_server(server, sender, run)
    summary = report.as_json()
    assert report.server_pid_before == report.server_pid_after == pid, summary
    assert report.restarts == 0 and report.signals_in_log == [], summary
    assert report.wrong == [], summary
    assert report.requests == REQUESTS, summary
    # Both halves of the mix were exercised on every channel.
    assert report.outcomes["refused"] > REQUESTS // 3 and report.outcomes["ok"] > REQUESTS // 4, summary
    assert set(report.by_channel) == {"http_generate", "http_stream", "grpc_stream", "front"}, summary


def test_triton_never_sees_triton_grpc_error(server):
    """The header is what turns a stream's error into Triton 2.51's crash: the first test's clients
    sent it on every stream, and neither this project's client nor its front sends it (each
    unit-tested too); Triton's log shows whether any stream reached its mishandled error path."""
    from pathlib import Path

    log = Path(server.log_file).read_text(errors="replace")
    assert "HandleCancellation called even when the context was not cancelled" not in log
