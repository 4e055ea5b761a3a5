"""The live tests' port blocks (``tests/support/ports.py``) never overlap, so files running at once
on pytest-xdist workers never bind each other's ports, and a worker's moved blocks stay clear."""

from __future__ import annotations

import ast
from pathlib import Path

import ports

LIVE = Path(__file__).resolve().parents[1] / "live"


def _ranges(shift: int) -> list[tuple[str, range]]:
    return [
        (name, range(b.base + (shift if b.shared else 0), b.base + b.size + (shift if b.shared else 0)))
        for name, b in ports.BLOCKS.items()
    ]


def test_no_two_blocks_overlap_on_any_worker() -> None:
    # Worker 0's blocks with worker 1's moved shared ones: every range a two-worker run binds.
    ranges = _ranges(0) + [
        (f"{n} (gw1)", r) for n, r in _ranges(ports.WORKER_SHIFT) if ports.BLOCKS[n.split()[0]].shared
    ]
    clashes = [
        f"{a} {ra.start}-{ra.stop - 1} and {b} {rb.start}-{rb.stop - 1}"
        for i, (a, ra) in enumerate(ranges)
        for b, rb in ranges[i + 1 :]
        if ra.start < rb.stop and rb.start < ra.stop
    ]
    assert not clashes, f"port blocks overlap: {clashes}"


def test_worker_environment_moves_only_the_shared_blocks() -> None:
    assert ports.worker_environment("gw0", {}) == {} and ports.worker_environment("", {}) == {}
    moved = ports.worker_environment("gw1", {})
    shared = {b.env for b in ports.BLOCKS.values() if b.shared} | set(ports.SESSION_PORT_ENVS)
    assert set(moved) == shared | {ports.MOVED_FOR}
    # Asked again in the moved environment (the conftest imported a second time): no second move.
    assert ports.worker_environment("gw1", moved) == {}
    assert moved["TEST_GRPC_PORT"] == str(ports.BLOCKS["session"].base + 1 + ports.WORKER_SHIFT)
    # A session's own choice is moved, not replaced: two sessions side by side stay apart.
    assert ports.worker_environment("gw1", {"TEST_HTTP_PORT": "30000"})["TEST_HTTP_PORT"] == str(
        30000 + ports.WORKER_SHIFT
    )


def test_live_files_bind_no_port_outside_the_table() -> None:
    """A live file names its ports through the table: no keyword ``*_port=`` given a literal."""
    literal = []
    for path in sorted(LIVE.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and (node.arg or "").lower().endswith("_port"):
                if (
                    isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, (int, str))
                    and node.value.value not in (0, "0")
                ):
                    literal.append(f"{path.name}:{node.lineno} {node.arg}={node.value.value!r}")
    assert not literal, f"ports written outside tests/support/ports.py: {literal}"


def test_blocks_stay_clear_of_the_inner_ports_the_launcher_draws() -> None:
    """Every block, moved or not, lies between the privileged ports and the range the launcher
    draws inner ports from (another server's edge could hold a port there)."""
    import inspect

    from launcher.edge import free_loopback_ports

    lowest = inspect.signature(free_loopback_ports).parameters["lowest"].default
    assert ports.INNER_PORTS_FROM == lowest
    for name, block in ports.BLOCKS.items():
        shifts = (0, ports.WORKER_SHIFT) if block.shared else (0,)
        for shift in shifts:
            first, last = block.base + shift, block.base + shift + block.size - 1
            assert 1024 < first and last < lowest, f"{name} {first}-{last} reaches outside 1025-{lowest - 1}"
