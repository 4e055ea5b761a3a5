"""A real Prometheus (Debian's ``prometheus`` package) run as the tests' child, and the two template
languages that turn the manifests' queries into PromQL: prometheus-adapter's ``metricsQuery`` and
Grafana's dashboard variables.

Prometheus scrapes the given targets with the ``namespace`` and ``pod`` labels a cluster's
Prometheus adds (its Kubernetes service discovery relabels them from the pod), so the queries the
manifests hold run here unchanged. It runs with its own config and a temporary TSDB, never as the
package's systemd service.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

# Debian's package puts it in /usr/bin (`make prometheus`); one on PATH serves as well.
PROMETHEUS = Path(shutil.which("prometheus") or "/usr/bin/prometheus")

# Grafana's own variables a dashboard may use without defining them.
GRAFANA_BUILTINS = frozenset({"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__name"})

# ``$name``, ``${name}`` and ``${name:format}``, Grafana's three spellings of a variable.
_GRAFANA_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


@dataclass(frozen=True)
class Target:
    """One scraped endpoint and the labels the cluster's Prometheus would give its series."""

    address: str
    """``host:port`` of a ``/metrics`` endpoint."""

    namespace: str
    pod: str


@dataclass(frozen=True)
class Sample:
    """One series of an instant query's answer."""

    labels: dict[str, str]
    value: float


class QueryError(AssertionError):
    """Prometheus refused a query (a parse error, a bad range) or could not be reached."""


@dataclass(frozen=True)
class Prometheus:
    """A running Prometheus's HTTP API."""

    url: str
    scrape_interval_s: float
    log: Path

    def _get(self, path: str, params: Sequence[tuple[str, str]]) -> object:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as r:  # noqa: S310 - loopback
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:  # 400 / 422: the answer says why
            body = json.loads(e.read() or b"{}")
        except OSError as e:
            raise QueryError(f"{path} {params}: {e}") from e
        if body.get("status") != "success":
            raise QueryError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[Sample]:
        """An instant query at now; a vector's samples (a scalar is one sample without labels)."""
        data = self._get("/api/v1/query", [("query", expr)])
        assert isinstance(data, dict)
        if data["resultType"] == "scalar":
            return [Sample({}, float(data["result"][1]))]
        assert data["resultType"] == "vector", data
        return [Sample(dict(s["metric"]), float(s["value"][1])) for s in data["result"]]

    def label_values(self, label: str, match: str) -> list[str]:
        """What Grafana's ``label_values(match, label)`` lists (the series API's label values)."""
        data = self._get(f"/api/v1/label/{label}/values", [("match[]", match)])
        assert isinstance(data, list)
        return data

    def samples_of(self, metric: str) -> int:
        """How many samples of ``metric`` the TSDB holds for the last minute (scrapes taken)."""
        found = self.query(f"count_over_time({metric}[1m])")
        return int(max((s.value for s in found), default=0))


def config(targets: Sequence[Target], scrape_interval_s: float) -> dict:
    """The scrape config: one job per target, the cluster's labels set on each."""
    interval = f"{scrape_interval_s:g}s"
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {
                "job_name": f"target-{i}",
                "static_configs": [{"targets": [t.address], "labels": {"namespace": t.namespace, "pod": t.pod}}],
            }
            for i, t in enumerate(targets)
        ],
    }


@contextmanager
def running(folder: Path, port: int, targets: Sequence[Target], scrape_interval_s: float = 1.0) -> Iterator[Prometheus]:
    """Prometheus on 127.0.0.1:``port`` scraping ``targets``, its TSDB and log in ``folder``; stopped
    on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "prometheus.yml"
    conf.write_text(yaml.safe_dump(config(targets, scrape_interval_s), sort_keys=False))
    log = folder / "prometheus.log"
    argv = [
        str(PROMETHEUS),
        f"--config.file={conf}",
        f"--storage.tsdb.path={folder / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1h",
    ]
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    prom = Prometheus(f"http://127.0.0.1:{port}", scrape_interval_s, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as r:  # noqa: S310 - loopback
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus not ready in 30 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- prometheus-adapter's metricsQuery ------------------------------------------------------------


def adapter_query(metrics_query: str, namespace: str, pods: Sequence[str], resource_label: str = "pod") -> str:
    """``metricsQuery`` filled as prometheus-adapter fills it for a namespaced Pods metric (the
    HPA's ``type: Pods``): upstream ``pkg/naming/metrics_query.go`` (``Build``) puts the namespace
    matcher first, then the resource's, an equality for one name and a regex of the names joined by
    ``|`` for several (the HPA asks for every pod its target's selector lists), each value quoted
    Go's ``%q`` way; ``GroupBy`` is the resource's label. No metric selector: the HPA's manifest
    sets none."""
    assert pods, "the adapter builds a query for the pods it lists: at least one"
    names = "|".join(pods)
    matchers = [f"namespace={_go_quote(namespace)}"]
    matchers.append(
        f"{resource_label}={_go_quote(names)}" if len(pods) == 1 else f"{resource_label}=~{_go_quote(names)}"
    )
    filled = metrics_query.replace("<<.LabelMatchers>>", ",".join(matchers)).replace("<<.GroupBy>>", resource_label)
    assert "<<" not in filled, f"a template field this helper does not fill: {filled}"
    return filled


def _go_quote(value: str) -> str:
    return json.dumps(value)  # the same as Go's %q for the printable ASCII of label values


# --- Grafana's variables --------------------------------------------------------------------------


def grafana_variables(text: str) -> set[str]:
    """The variable names ``text`` uses, in any of Grafana's spellings."""
    return {a or b for a, b in _GRAFANA_VAR.findall(text)}


def grafana_expr(expr: str, values: dict[str, str]) -> str:
    """``expr`` with its variables replaced as Grafana replaces them before sending the query."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr}")
        return values[name]

    return _GRAFANA_VAR.sub(one, expr)
