"""Reload a Python model whose stub process died, since Triton 2.51 will not.

The Python backend of this Triton release never restarts a dead stub: every later request to
that model fails with "Stub process '<instance>' is not healthy" while the health endpoints keep
answering 200 (triton-inference-server/server issues 7862 and 8604). This watchdog runs beside
the server, notices a stub that has gone, reloads its model through the model-repository API
(the server runs in explicit model-control mode; the API is restricted to a token only the
launcher and the watchdog know), and unlinks the dead stub's /dev/shm region, which the
backend leaves behind.

In-flight requests of the dead stub fail (500, "... is not healthy"); requests after the reload
succeed. The reload takes as long as Triton's unload of the broken instance (~15 s here).

The reload starts a new stub for every instance, but Triton 2.51 leaves the surviving stubs of
the old instances running (with their memory and /dev/shm regions) long after. Once the model
has as many new stubs as it had before, the watchdog ends the old ones (SIGTERM, then SIGKILL
after a grace period) and unlinks their regions too.

The supervisor (``launcher/supervisor.py``) starts one watchdog per tritonserver it runs, and itself
restarts a tritonserver that dies; a watchdog ends with its server.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("launcher.watchdog")
# The header that carries the token of the restricted model-repository API (the launcher passes
# it to tritonserver's --http-restricted-api / --grpc-restricted-protocol).
TOKEN_HEADER = "watchdog-token"


@dataclass(frozen=True)
class Stub:
    """One Python-backend stub process."""

    pid: int
    """Its process id."""

    model: str
    """The model it serves (the folder holding ``1/model.py``)."""

    region: str | None
    """Name of its /dev/shm region."""


def stubs_of(server_pid: int) -> dict[int, Stub]:
    """Live (non-zombie) stubs whose parent is the server."""
    out: dict[int, Stub] = {}
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_path.read_text()
            args = (stat_path.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) != server_pid or fields[0] == "Z":
            continue
        # The model's file: model.py, or its default_model_filename (vLLM's engine: vllm_model.py).
        model_py = next((a.decode() for a in args if a.endswith(b".py") and b"/1/" in a), None)
        if model_py is None:
            continue
        region = next((a.decode() for a in args if a.startswith(b"triton_python_backend_shm_region")), None)
        out[int(stat_path.parent.name)] = Stub(int(stat_path.parent.name), Path(model_py).parent.parent.name, region)
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


class ServerGoneError(Exception):
    """The server stopped listening: it is shutting down, and its stubs go with it."""


def reload_model(http_url: str, model: str, token: str, timeout_s: float = 300.0) -> bool:
    req = urllib.request.Request(  # noqa: S310 (http_url is the launcher's own http:// address)
        f"{http_url}/v2/repository/models/{model}/load",
        data=b"{}",
        method="POST",
        headers={TOKEN_HEADER: token, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:  # noqa: S310 - http_url is the launcher's
            return r.status == 200
    except urllib.error.HTTPError as e:
        log.error("reloading %s failed: %s %s", model, e.code, e.read()[:300])
        return False
    except (urllib.error.URLError, OSError) as e:
        raise ServerGoneError(str(e)) from None


def server_ready(http_url: str) -> bool:
    """Triton's readiness endpoint answers 200 (the one probe the launcher, supervisor and
    watchdog share)."""
    try:
        with urllib.request.urlopen(f"{http_url}/v2/health/ready", timeout=2) as r:  # noqa: S310 - http_url is the launcher's
            return r.status == 200
    # URLError and connection resets are OSErrors; a server dying mid-answer is an HTTPException.
    except (OSError, http.client.HTTPException):
        return False


def _get_json(url: str, token: str, body: bytes | None = None) -> object:
    req = urllib.request.Request(  # noqa: S310 (the launcher's own http:// address)
        url, data=body, method="POST" if body is not None else "GET", headers={TOKEN_HEADER: token}
    )
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310
        return json.loads(r.read())


def stub_count(config: dict) -> int | None:
    """How many stubs a loaded model's config (Triton's JSON form) runs: one per instance of a
    Python-backend model; 0 for any other backend or an ensemble; None where it cannot be told
    (a GPU group that names no GPUs)."""
    if config.get("backend") != "python":
        return 0
    total = 0
    for group in config.get("instance_group") or [{"count": 1}]:
        count = int(group.get("count", 1))
        if group.get("kind") == "KIND_GPU":
            if not group.get("gpus"):
                return None
            count *= len(group["gpus"])
        total += count
    return total


def expected_stubs(http_url: str, token: str) -> dict[str, int]:
    """Each ready Python model's stub count by its config; {} if the server cannot say."""
    try:
        index = _get_json(f"{http_url}/v2/repository/index", token, b'{"ready": true}')
        out: dict[str, int] = {}
        for name in sorted({str(m["name"]) for m in index if isinstance(m, dict) and "name" in m}):  # type: ignore[union-attr]
            count = stub_count(_get_json(f"{http_url}/v2/models/{name}/config", token))  # type: ignore[arg-type]
            if count:
                out[name] = count
        return out
    except (OSError, ValueError, KeyError, TypeError, http.client.HTTPException) as e:
        log.warning("cannot read the models' instance counts (%s); a stub lost before the first look goes unseen", e)
        return {}


def short_of_stubs(stubs: dict[int, Stub], expected: dict[str, int]) -> list[str]:
    """Models with fewer live stubs than their configs run: a stub died before the watchdog's
    first look (between readiness and its baseline), so no later look would see it go."""
    have: dict[str, int] = {}
    for s in stubs.values():
        have[s.model] = have.get(s.model, 0) + 1
    return [m for m, n in sorted(expected.items()) if have.get(m, 0) < n]


def retire_old_stubs(server_pid: int, model: str, old: dict[int, Stub], grace_s: float = 5.0) -> list[Stub]:
    """End the stubs of ``model``'s old instances that outlived its reload, and unlink every old
    instance's region; returns the stubs ended. Only once the model has as many new stubs as it had
    before (new ones serve it; if the reload kept some old instance, nothing is touched)."""
    current = stubs_of(server_pid)
    mine = [s for s in old.values() if s.model == model]
    new = [s for pid, s in current.items() if s.model == model and pid not in old]
    if len(new) < len(mine):
        return []
    survivors = [s for s in mine if s.pid in current]
    _end(survivors, grace_s)
    # Also the regions of old stubs that exited by themselves: tritonserver unlinks a region only
    # after its stub is gone, and a stub it gave up on (killed, crashed) may keep its region.
    for s in mine:
        if s.region:
            Path("/dev/shm", s.region).unlink(missing_ok=True)
    if survivors:
        log.warning(
            "ended %d stub(s) of model %s's old instances: %s", len(survivors), model, [s.pid for s in survivors]
        )
    return survivors


def _end(survivors: list[Stub], grace_s: float) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``, and wait (as long again) for them to be gone."""
    for s in survivors:
        _signal(s.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(alive(s.pid) for s in survivors) and time.monotonic() < deadline:
        time.sleep(0.05)
    for s in survivors:
        if alive(s.pid):
            _signal(s.pid, signal.SIGKILL)
    while any(alive(s.pid) for s in survivors) and time.monotonic() < deadline + grace_s:
        time.sleep(0.05)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def watch(server_pid: int, http_url: str, token: str, interval_s: float = 1.0) -> None:
    # Loading starts and stops short-lived stubs (config auto-complete): watch only once the
    # server is ready, when every stub left is a serving one.
    while alive(server_pid) and not server_ready(http_url):
        time.sleep(interval_s)
    known = stubs_of(server_pid)
    # A stub that died between readiness and this baseline: its model has fewer stubs than its
    # config says; reload it now (no later look would see that stub go).
    short = short_of_stubs(known, expected_stubs(http_url, token))
    if short and not _reload(server_pid, http_url, token, short, known, "fewer stubs than its config's instances"):
        return
    if short:
        known = stubs_of(server_pid)
    # The line tests wait for.
    log.info("watching %d stubs of tritonserver pid %d", len(known), server_pid)
    while alive(server_pid):
        time.sleep(interval_s)
        current = stubs_of(server_pid)
        dead = [s for pid, s in known.items() if pid not in current]
        if dead and alive(server_pid):
            if not _reload(server_pid, http_url, token, sorted({s.model for s in dead}), known, "a stub died"):
                return
            for s in dead:
                if s.region:
                    Path("/dev/shm", s.region).unlink(missing_ok=True)
            current = stubs_of(server_pid)
        known = current


def _reload(server_pid: int, http_url: str, token: str, models: list[str], known: dict[int, Stub], why: str) -> bool:
    """Reload each model and end its old instances' stubs; False once the server is gone."""
    for model in models:
        log.warning("model %s: %s; reloading it", model, why)
        try:
            if reload_model(http_url, model, token):
                log.warning("model %s reloaded", model)
                retire_old_stubs(server_pid, model, known)
        except ServerGoneError:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-pid", type=int, required=True)
    ap.add_argument("--http-url", required=True)
    ap.add_argument("--interval", type=float, default=1.0)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s watchdog %(levelname)s %(message)s")
    token = os.environ.get("WATCHDOG_TOKEN", "")
    if not token:
        print("WATCHDOG_TOKEN is not set", file=sys.stderr)
        return 2
    watch(a.server_pid, a.http_url, token, a.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
