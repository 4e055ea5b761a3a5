"""The charts ``docs/PERFORMANCE.md`` shows, drawn from ``results.json``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.layout import MAIN_INPUTS

from benchmarks.report.summary import MODELS, _inproc, _ok

if TYPE_CHECKING:
    from matplotlib.axes import Axes


# --- charts ------------------------------------------------------------------------------------


def charts(res: dict[str, Any], out_dir: Path) -> list[Path]:
    """Draw the throughput chart, and the scaling chart where the run restarted the server with other settings."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib

    # No display on a bench machine: draw to files only.
    matplotlib.use("Agg")
    paths = [_throughput_chart(res, out_dir)]
    scaling = _scaling_chart(res, out_dir)
    if scaling is not None:
        paths.append(scaling)
    return paths


def _throughput_chart(res: dict[str, Any], out_dir: Path) -> Path:
    """``throughput.png``: requests/s against concurrency, one panel per ensemble."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 6.2))
    for ax, (model, name) in zip(axes, MAIN_INPUTS.items()):
        _throughput_panel(ax, res, model, name)
    fig.suptitle(
        ("QUICK smoke run - " if res["quick"] else "") + f"renderer throughput, {res['machine']['cpus']} cores, "
        "server and load generator on the same machine",
        fontsize=10,
    )
    fig.tight_layout()
    p = out_dir / "throughput.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def _throughput_series(res: dict[str, Any], model: str) -> list[tuple[str, list[dict[str, Any]], str]]:
    """Each served side's sweep rows of ``model``, as (legend label, rows, line style)."""
    peer = res.get("peer") or {}
    return [
        (
            "ours, perf_analyzer gRPC",
            [r for r in res["sweep"] if r["model"] == model and r["protocol"] == "grpc"],
            "o-",
        ),
        (
            "ours, perf_analyzer HTTP",
            [r for r in res["sweep"] if r["model"] == model and r["protocol"] == "http"],
            "s-",
        ),
        ("ours, JSON -> Triton generate", [r for r in res["openai_sweep"] if r["model"] == model], "^-"),
        ("vLLM render server, JSON", [r for r in peer.get("sweep", []) if r["model"] == model], "D--"),
        (
            "vLLM render server on fastokens, JSON",
            [r for r in (res.get("peer_fastokens") or {}).get("sweep", []) if r["model"] == model],
            "x--",
        ),
    ]


_INPROCESS_LINES = (
    ("transformers", "grey"),
    ("vLLM renderer in process", "tab:red"),
    ("ours ChatRenderer", "tab:green"),
    ("ours Renderer.render_batch, one", "tab:green"),
)


def _throughput_panel(ax: Axes, res: dict[str, Any], model: str, name: str) -> None:
    """One ensemble's panel: a line per served side, a level per in-process baseline."""
    for label, rows, style in _throughput_series(res, model):
        rows = sorted(_ok(rows), key=lambda r: r["concurrency"])
        if rows:
            ax.plot([r["concurrency"] for r in rows], [r["requests_per_s"] for r in rows], style, label=label)
    for prefix, color in _INPROCESS_LINES:
        v = _inproc(res, name, prefix)
        if v:
            ax.axhline(
                v,
                color=color,
                linestyle=":",
                linewidth=1.2,
                label=f"in process, 1 core: {prefix.split(',')[0]} ({v:.0f}/s)",
            )
    ax.set_xscale("log", base=2)
    levels = sorted({r["concurrency"] for r in res["sweep"]})
    ax.set_xticks(levels)
    ax.set_xticklabels([str(c) for c in levels])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("requests / s")
    ax.set_title(f"{model} ({name})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)


_Config = tuple[int, int, int, str]


def _config(r: dict[str, Any]) -> _Config:
    """A scaling row's server settings: tokenize and chat_render instances, batching window, tokenizer engine."""
    return (r["tokenize_instances"], r["chat_render_instances"], r["max_queue_delay_us"], r["tokenizer_backend"])


def _scaling_rows(res: dict[str, Any], scaling: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The default server's gRPC rows at the scaling concurrency (with its settings), then the restarts' rows."""
    base = [r for r in res["sweep"] if r["protocol"] == "grpc" and r["concurrency"] == scaling[0]["concurrency"]]
    st = res["sweep_settings"]
    return [{"tokenizer_backend": "auto", **st, **r} for r in _ok(base)] + [
        {"tokenizer_backend": "auto", **r} for r in scaling
    ]


def _scaling_chart(res: dict[str, Any], out_dir: Path) -> Path | None:
    """``scaling.png``: requests/s of each ensemble per server configuration; None where no restart ran."""
    scaling = _ok(res.get("scaling", []))
    if not scaling:
        return None
    import matplotlib.pyplot as plt

    rows = _scaling_rows(res, scaling)
    fig, ax = plt.subplots(figsize=(9, 4))
    cfgs: list[_Config] = []
    for r in rows:
        if _config(r) not in cfgs:
            cfgs.append(_config(r))
    width = 0.38
    for j, model in enumerate(MODELS):
        vals = []
        for c in cfgs:
            m = [r for r in rows if r["model"] == model and _config(r) == c]
            vals.append(m[0]["requests_per_s"] if m else 0)
        ax.bar([i + j * width for i in range(len(cfgs))], vals, width, label=model)
    ax.set_xticks([i + width / 2 for i in range(len(cfgs))])
    ax.set_xticklabels([f"tok={a} chat={b}\ndelay={d}us\n{e}" for a, b, d, e in cfgs], fontsize=8)
    ax.set_ylabel("requests / s (gRPC)")
    ax.set_title(f"instances, batching window, tokenizer engine; concurrency {scaling[0]['concurrency']}")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    p = out_dir / "scaling.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
