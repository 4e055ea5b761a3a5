"""The HorizontalPodAutoscaler's signal and the Grafana dashboard, evaluated by a real Prometheus.

A render-only pod's server (``render_chat`` and ``render_completion`` on the tiny Qwen2-VL, so all
three stages the metric covers, ``mm_process`` included, and its image cache exist) is scraped by
Debian's Prometheus every second, its Triton metrics and its front's, with the ``namespace`` and
``pod`` labels a cluster's Prometheus adds. The query is the very ``metricsQuery`` of
``docker/k8s/metrics/prometheus-adapter-values.yaml``, filled as prometheus-adapter fills it for the
HPA (``tests/support/prometheus.py``), and the target the very ``averageValue`` of
``docker/k8s/base/hpa.yaml``.

perf_analyzer drives ``render_chat`` past saturation, then back to a light load (a steady 50
requests a second, which leaves the cores to the rest of the test run). The metric is queue time *per request* over ``rate(...[1m])``: it reads the overload's value
as soon as two scrapes hold overloaded requests (idle before them adds no requests to the ratio),
and it falls only once the overload's requests have left the one-minute window. So the overload
lasts long enough for a steady reading (~12 s), and the light load a minute and a few scrapes.

Ports: the ``autoscaling`` block of ``tests/support/ports.py`` (HTTP; gRPC, metrics, the front and
Prometheus the next four). Figures: ``build/reports/autoscaling_signal.json`` (docker/k8s/metrics/README.md).
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import ports
import yaml

from tests.support import prometheus as prom

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
METRICS = ROOT / "docker" / "k8s" / "metrics"
PORT = ports.port("autoscaling")
NAMESPACE = "renderer"
POD = "triton-renderer-5f7c9d8b6d-x7k2p"
# A second replica the HPA's selector lists (minReplicas is 2) that Prometheus has no series of
# yet: the adapter then asks with a regex of both names, and answers for the pod it finds.
STARTING_POD = "triton-renderer-5f7c9d8b6d-q9w4z"
SCRAPE_S = 1.0
OVERLOAD_CONCURRENCY = 32
OVERLOAD_WINDOW_MS = 4000  # three windows: ~12 s of overload, a dozen scrapes
RATE_WINDOW_S = 60.0  # the metricsQuery's [1m]
# Three windows: 64.5 s, just past the minute the rate looks back and the three scrapes the test
# waits beyond it (the light load must still run when the window has cleared).
REST_WINDOW_MS = 21500
REST_REQUESTS_PER_S = 50
# Grafana's $__rate_interval with its datasource's default scrape interval (15 s): max($__interval +
# 15 s, 4 x 15 s), 1m for any dashboard range up to a few hours; also the HPA query's own window.
GRAFANA_RATE_INTERVAL = "1m"


@dataclass(frozen=True)
class Signal:
    """What the test measured; the figures docker/k8s/metrics/README.md cites."""

    target_us: float
    idle_us: float
    overload_us: float
    rest_us: float
    rose_after_s: float
    fell_after_s: float
    overload_concurrency: int
    overload_requests_per_s: float
    rest_requests_per_s: float
    scrape_interval_s: float
    query: str


def adapter_rule() -> dict[str, Any]:
    (rule,) = yaml.safe_load((METRICS / "prometheus-adapter-values.yaml").read_text())["rules"]["custom"]
    return rule


def hpa_target_us() -> float:
    hpa = yaml.safe_load((ROOT / "docker" / "k8s" / "base" / "hpa.yaml").read_text())
    (pods,) = [m["pods"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    assert pods["metric"]["name"] == adapter_rule()["name"]["as"]
    return float(pods["target"]["averageValue"])


@pytest.fixture(scope="module")
def tools() -> None:
    from benchmarks import perf_analyzer as pa

    missing = [str(p) for p in (prom.PROMETHEUS, pa.binary()) if not p.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: `make test` installs them (make prometheus perf-analyzer)")


@pytest.fixture(scope="module")
def pod_server(tools: None) -> Iterator[Any]:
    """The render overlay's pod (MODELS=render_chat,render_completion) on an image model, with its
    front, as ``make serve`` runs it."""
    from benchmarks.mixed_traffic import settings
    from launcher import cli as launch

    s = replace(
        settings(ROOT / "build" / "test-autoscaling-signal", PORT, "render_chat,render_completion"),
        model_dir="",
        model="qwen2-vl",
    )
    if launch.start(s) != 0:
        pytest.fail(f"tritonserver did not start; see {s.log_file}")
    yield s
    launch.stop(s)


@pytest.fixture(scope="module")
def prometheus(pod_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[prom.Prometheus]:
    targets = [
        prom.Target(f"127.0.0.1:{pod_server.metrics_port}", NAMESPACE, POD),
        prom.Target(f"127.0.0.1:{pod_server.openai_port}", NAMESPACE, POD),
    ]
    with prom.running(tmp_path_factory.mktemp("prometheus"), PORT + 4, targets, SCRAPE_S) as p:
        yield p


def hpa_query() -> str:
    return prom.adapter_query(adapter_rule()["metricsQuery"], NAMESPACE, [POD, STARTING_POD])


def hpa_value(p: prom.Prometheus) -> float:
    """What the adapter would hand the HPA for the scraped pod."""
    samples = p.query(hpa_query())
    assert [s.labels for s in samples] == [{"pod": POD}], samples  # grouped by pod alone, one value
    return samples[0].value


def wait_scrapes(p: prom.Prometheus, n: int) -> None:
    """Until the last minute holds ``n`` scrapes of the pod (a rate needs two)."""
    series = f'nv_inference_request_success{{namespace="{NAMESPACE}",pod="{POD}",model="tokenize"}}'
    deadline = time.monotonic() + 30
    while p.samples_of(series) < n:
        assert time.monotonic() < deadline, f"Prometheus took no {n} scrapes of {series} in 30 s; see {p.log}"
        time.sleep(SCRAPE_S / 2)


def drive(
    server: Any, concurrency: int, window_ms: int, out: dict[str, Any], request_rate: float | None = None
) -> threading.Thread:
    """perf_analyzer (gRPC, chat_mix) on ``render_chat`` in a thread, at ``concurrency`` or at
    ``request_rate`` requests a second: three windows of ``window_ms``, any spread accepted (the load
    is applied, not searched for a steady state)."""
    from benchmarks import make_inputs
    from benchmarks import perf_analyzer as pa

    window = ["--measurement-mode", "time_windows", "--measurement-interval", str(window_ms)]
    window += ["--stability-percentage", "1000", "--max-trials", "3"]

    def run() -> None:
        try:
            out["row"] = pa.run(
                "render_chat",
                f"127.0.0.1:{server.grpc_port}",
                "grpc",
                make_inputs.path_of("chat_mix"),
                concurrency,
                window=window,
                timeout_s=window_ms * 3 / 1000 + 60,
                request_rate=request_rate,
            )
        except RuntimeError as e:  # raised again by the test, with perf_analyzer's output
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def first_time(p: prom.Prometheus, started: float, until: Callable[[], bool], holds: Callable[[float], bool]) -> float:
    """Seconds from ``started`` to the first reading for which ``holds``, polling while ``until``
    is false; ``math.inf`` if it never held."""
    while not until():
        if holds(hpa_value(p)):
            return time.monotonic() - started
        time.sleep(SCRAPE_S)
    return math.inf


def test_the_hpa_metric_rises_with_overload_and_falls_at_rest(
    pod_server: Any, prometheus: prom.Prometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    target = hpa_target_us()
    wait_scrapes(prometheus, 3)
    # No request yet: both rates are 0, and clamp_min's 1e-9 makes the ratio 0 (a number, not NaN
    # or no data, which would leave the HPA unable to scale down).
    idle = hpa_value(prometheus)

    overload: dict[str, Any] = {}
    started = time.monotonic()
    load = drive(pod_server, OVERLOAD_CONCURRENCY, OVERLOAD_WINDOW_MS, overload)
    rose = first_time(prometheus, started, lambda: not load.is_alive(), lambda v: v > target)
    load.join()
    if "error" in overload:
        raise overload["error"]
    time.sleep(SCRAPE_S * 1.5)  # the overload's last requests scraped
    overloaded = hpa_value(prometheus)

    rest: dict[str, Any] = {}
    rest_started = time.monotonic()
    light = drive(pod_server, 1, REST_WINDOW_MS, rest, request_rate=REST_REQUESTS_PER_S)
    window_clear = rest_started + RATE_WINDOW_S + 3 * SCRAPE_S
    fell = first_time(prometheus, rest_started, lambda: time.monotonic() > window_clear, lambda v: v < target)
    while time.monotonic() < window_clear:
        time.sleep(SCRAPE_S)
    assert light.is_alive(), "the light load ended before its minute: lengthen REST_WINDOW_MS"
    rested = hpa_value(prometheus)  # the window now holds light-load requests alone
    light.join()
    if "error" in rest:
        raise rest["error"]

    signal = Signal(
        target_us=target,
        idle_us=round(idle, 1),
        overload_us=round(overloaded, 1),
        rest_us=round(rested, 1),
        rose_after_s=round(rose, 1),
        fell_after_s=round(fell, 1),
        overload_concurrency=OVERLOAD_CONCURRENCY,
        overload_requests_per_s=round(overload["row"].throughput, 1),
        rest_requests_per_s=round(rest["row"].throughput, 1),
        scrape_interval_s=SCRAPE_S,
        query=hpa_query(),
    )
    report = Path(pod_server.build_dir).parent / "reports" / "autoscaling_signal.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(asdict(signal), indent=1) + "\n")
    with capsys.disabled():
        print(f"\nautoscaling signal (us per request): {json.dumps(asdict(signal))}")

    assert idle == 0.0, signal
    assert overloaded > target, f"the overload does not reach the HPA's target: {signal}"
    assert rose < math.inf, f"the metric never crossed the target while overloaded: {signal}"
    assert rested < target, f"the metric stays above the HPA's target at rest: {signal}"
    assert fell <= RATE_WINDOW_S + 3 * SCRAPE_S, f"the metric did not fall within its window: {signal}"


# --- the dashboard --------------------------------------------------------------------------------


def post(url: str, body: dict[str, Any]) -> int:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:  # noqa: S310 - loopback
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def send_probe_traffic(server: Any) -> None:
    """What every panel needs within its minute: chats through the front (an image twice: a miss,
    or a hit once cached, then a hit), a front 404, and a request Triton refuses."""
    from tests.support.mm_images import data_url, rgb

    front = f"http://127.0.0.1:{server.openai_port}"
    with urllib.request.urlopen(f"{front}/v1/models", timeout=10) as r:  # noqa: S310 - loopback
        model = json.loads(r.read())["data"][0]["id"]
    image = {"type": "image_url", "image_url": {"url": data_url(rgb(64, 48))}}
    chats = [
        [{"role": "user", "content": "What is the capital of France?"}],
        [{"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]}],
        [{"role": "user", "content": [image, {"type": "text", "text": "And now?"}]}],
    ]
    for messages in chats:
        assert post(f"{front}/v1/chat/completions/render", {"model": model, "messages": messages}) == 200
    assert post(f"{front}/v1/chat/completions/render", {"model": "no-such-model", "messages": chats[0]}) == 404
    bad = {"messages": "[{not json"}
    assert post(f"http://127.0.0.1:{server.http_port}/v2/models/render_chat/generate", bad) == 400


def dashboard() -> dict[str, Any]:
    return json.loads((METRICS / "grafana-dashboard.json").read_text())


def test_every_dashboard_query_returns_data(pod_server: Any, prometheus: prom.Prometheus) -> None:
    board = dashboard()
    # Twice, scrapes apart: a rate needs an increase between two samples, and the front's series
    # are born with their first request (the first round makes them, the second moves them).
    wait_scrapes(prometheus, 2)
    for _ in range(2):
        send_probe_traffic(pod_server)
        time.sleep(2.5 * SCRAPE_S)
    # The variables as Grafana resolves them: its label_values() is the series API's label values.
    values = {"datasource": "prometheus", "__rate_interval": GRAFANA_RATE_INTERVAL}
    chosen = {"namespace": NAMESPACE, "pod": POD}
    for var in board["templating"]["list"]:
        if var["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["query"])
        assert m and m.group(2) == var["name"], var
        listed = prometheus.label_values(var["name"], prom.grafana_expr(m.group(1), values))
        assert chosen[var["name"]] in listed, (var["name"], listed)
        values[var["name"]] = chosen[var["name"]]
    empty = []
    for panel in board["panels"]:
        for t in panel.get("targets", []):
            expr = prom.grafana_expr(t["expr"], values)
            samples = prometheus.query(expr)  # a query Prometheus cannot parse raises here
            if not any(math.isfinite(s.value) for s in samples):
                empty.append(f"{panel['title']} / {t['refId']}: {expr} -> {samples}")
    assert not empty, "panels without data:\n" + "\n".join(empty)
