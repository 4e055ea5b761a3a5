"""docker/k8s/metrics/grafana-dashboard.json is a dashboard Grafana imports as it is, on the HPA's own
series: panel ids unique and laid out without overlap, every query target with an expression, every
variable it uses defined, one datasource variable for all, and the autoscaling panel showing exactly
what prometheus-adapter hands the HPA, with the HPA's target as its threshold. That every query
parses and returns data is tests/live/test_autoscaling_signal_live.py's, on a real Prometheus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import prometheus as prom

ROOT = Path(__file__).resolve().parents[2]
METRICS = ROOT / "docker" / "k8s" / "metrics"
# What Grafana sends for ``namespace="$namespace",pod=~"$pod"``: the namespace chosen and the pods
# chosen as a regex, the adapter's own form for several pods.
GRAFANA_LABEL_MATCHERS = 'namespace="$namespace",pod=~"$pod"'


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    return json.loads((METRICS / "grafana-dashboard.json").read_text())


def targets(board: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(p, t) for p in board["panels"] for t in p.get("targets", [])]


def test_it_is_a_dashboard_grafana_imports(board):
    assert board["schemaVersion"] >= 36 and board["uid"] and board["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), ids
    for p in board["panels"]:
        if p["type"] == "row":
            assert not p.get("targets"), p["title"]
            continue
        assert p["targets"], f"{p['title']} queries nothing"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        assert all(t.get("expr", "").strip() for t in p["targets"]), p["title"]


def test_panels_do_not_overlap(board):
    cells: dict[tuple[int, int], str] = {}
    for p in board["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for y in range(g["y"], g["y"] + g["h"]):
            for x in range(g["x"], g["x"] + g["w"]):
                assert (x, y) not in cells, (p["title"], cells[(x, y)])
                cells[(x, y)] = p["title"]


def test_every_variable_used_is_defined(board):
    defined = {v["name"] for v in board["templating"]["list"]}
    used: set[str] = set()
    for p, t in targets(board):
        used |= prom.grafana_variables(t["expr"]) | prom.grafana_variables(json.dumps(t.get("datasource", {})))
        used |= prom.grafana_variables(json.dumps(p.get("datasource", {}))) | prom.grafana_variables(p["title"])
    for v in board["templating"]["list"]:
        used |= prom.grafana_variables(json.dumps(v))
    assert used - defined - prom.GRAFANA_BUILTINS == set()
    assert {"namespace", "pod"} <= used


def test_one_prometheus_datasource_variable_serves_every_query(board):
    (ds,) = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert ds["query"] == "prometheus"
    ref = {"type": "prometheus", "uid": f"${{{ds['name']}}}"}
    for p, t in targets(board):
        assert p["datasource"] == ref and t["datasource"] == ref, p["title"]
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            assert v["datasource"] == ref, v["name"]


def test_every_query_is_scoped_to_the_namespace_and_pods(board):
    """Each series a panel reads is the chosen pods' (the HPA's scope), never another tier's."""
    for p, t in targets(board):
        selectors = t["expr"].count("{")
        assert selectors and t["expr"].count(GRAFANA_LABEL_MATCHERS) == selectors, (p["title"], t["expr"])


def test_the_autoscaling_panel_is_what_the_adapter_hands_the_hpa(board):
    values = yaml.safe_load((METRICS / "prometheus-adapter-values.yaml").read_text())
    (rule,) = values["rules"]["custom"]
    hpa_query = (
        rule["metricsQuery"].replace("<<.LabelMatchers>>", GRAFANA_LABEL_MATCHERS).replace("<<.GroupBy>>", "pod")
    )
    (panel,) = [p for p, t in targets(board) if t["expr"] == hpa_query]
    hpa = yaml.safe_load((ROOT / "docker" / "k8s" / "base" / "hpa.yaml").read_text())
    (pods,) = [m["pods"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps if s["value"] is not None] == [float(pods["target"]["averageValue"])]
    assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "line"
    assert panel["fieldConfig"]["defaults"]["unit"] == "µs"


def test_the_adapter_fills_its_template_as_upstream_does():
    """prometheus-adapter's ``Build``: the namespace first, then the pod, ``=`` for one name and
    ``=~`` over the names joined by ``|`` for several; ``GroupBy`` the resource's label."""
    template = 'sum by (<<.GroupBy>>) (rate(x{a="b",<<.LabelMatchers>>}[1m]))'
    assert prom.adapter_query(template, "ns", ["p-1"]) == 'sum by (pod) (rate(x{a="b",namespace="ns",pod="p-1"}[1m]))'
    assert prom.adapter_query(template, "ns", ["p-1", "p-2"]) == (
        'sum by (pod) (rate(x{a="b",namespace="ns",pod=~"p-1|p-2"}[1m]))'
    )
    assert prom.grafana_expr(
        'x{pod=~"$pod"}[$__rate_interval] ${pod:regex}', {"pod": "a", "__rate_interval": "1m"}
    ) == ('x{pod=~"a"}[1m] a')
