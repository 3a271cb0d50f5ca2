"""The Grafana dashboard (deploy/grafana/kvgate.json) against a real Prometheus scraping a real
kvgate: every panel's query answers with data after mixed traffic (cache hits, each miss cause
the simulator can provoke, a routed turn, an upstream error, the built-in engine, an alert
delivery), and the miss and dollar counters equal what the store recorded."""

from __future__ import annotations

import json
import random
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import openai
import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY, ONE_SECOND_OPENAI_TTL

REPO = Path(__file__).resolve().parent.parent.parent
DASHBOARD = REPO / "deploy" / "grafana" / "kvgate.json"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CAUSES = ["expired", "partial_eviction", "prompt_changed", "model_switch", "routed_away",
          "engine_restarted", "below_minimum"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def promql(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def grafana_to_promql(expr: str) -> str:
    """A panel's expression as Grafana would send it, with its variables at their defaults."""
    for name, value in {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h",
                        "${model}": ".*", "$model": ".*"}.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a Grafana variable this test does not know: {expr}"
    return expr


def panel_targets(dashboard: dict) -> list[tuple[str, str]]:
    out = []
    for panel in dashboard["panels"]:
        for inner in [panel] + panel.get("panels", []):
            for target in inner.get("targets", []):
                out.append((inner["title"], target["expr"]))
    return out


def long_text(seed: int, n: int = 1300) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(10**6)}" for _ in range(n))


@pytest.fixture
def grafana_gw(kvgate_process_class, kvgate_bin, sim, bundled_model, tmp_path):
    """kvgate on the simulator (OpenAI's idle TTL at 1 s) and the built-in engine, with a router
    and an alert channel that cannot be reached (its deliveries fail)."""
    hook = free_port()

    class GrafanaKvgate(kvgate_process_class):
        def _write_config(self):
            super()._write_config()
            text = self.config_path.read_text()
            text = text.replace("providers:\n", "providers:\n  - {name: local, type: local, "
                                f"model_path: {bundled_model}, kv_cache_tokens: 2048, threads: 1, "
                                "max_output_tokens_default: 8}\n")
            text = text.replace("models:\n", "models:\n  - {name: smollm2, provider: local}\n")
            text += f"""\
routers:
  - name: chain
    strategy: fallback
    targets: [{{model: gpt-4o-mini}}, {{model: deepseek-chat}}]
    fallback_on: [500, 502, 503]
    retries: 0
    affinity: none
alerts:
  channels:
    - {{name: hook, type: webhook, url: "http://127.0.0.1:{hook}/hook", secret: whsec_c2VjcmV0LWtleQ==}}
""" + ONE_SECOND_OPENAI_TTL
            self.config_path.write_text(text)

    kg = GrafanaKvgate(kvgate_bin, tmp_path / "grafana", sim.port, name="grafana").start(timeout=60)
    sim.client.config(openai_ttl=1)
    yield kg.gateway()
    sim.client.config(openai_ttl=300)
    assert kg.terminate() == 0, kg.stderr_tail()


def drive_traffic(gw, sim):
    client = gw.client()

    def ask(model, messages, thread):
        return client.chat.completions.create(model=model, messages=messages, max_tokens=8,
                                              extra_body={"thread_identifier": thread})

    # Hits, then expired, prompt_changed and model_switch on one thread.
    system = {"role": "system", "content": long_text(7)}
    msgs = [system, {"role": "user", "content": "first"}]
    ask("gpt-4o-mini", msgs, "graf-1")
    msgs = msgs + [{"role": "user", "content": "second"}]
    ask("gpt-4o-mini", msgs, "graf-1")                      # a hit
    time.sleep(1.5)                                          # past the 1 s idle TTL
    msgs = msgs + [{"role": "user", "content": "third"}]
    ask("gpt-4o-mini", msgs, "graf-1")                      # expired
    edited = [{"role": "system", "content": "EDITED " + system["content"]}] + msgs[1:]
    ask("gpt-4o-mini", edited, "graf-1")                    # prompt_changed
    ask("deepseek-chat", edited + [{"role": "user", "content": "q"}], "graf-1")  # model_switch
    # below_minimum: a short thread.
    short = [{"role": "user", "content": "hello"}]
    ask("gpt-4o-mini", short, "graf-2")
    ask("gpt-4o-mini", short + [{"role": "user", "content": "again"}], "graf-2")
    # Anthropic: a write, then a read.
    claude = [{"role": "system", "content": long_text(8)}, {"role": "user", "content": "hi"}]
    ask("claude-sonnet-4-5", claude, "graf-3")
    ask("claude-sonnet-4-5", claude + [{"role": "user", "content": "more"}], "graf-3")
    # A routed turn that falls back (target != model), and an upstream error.
    sim.client.add_faults({"path": "/openai/", "status": 503, "count": 1})
    ask("chain", [{"role": "user", "content": "route me"}], "graf-4")
    sim.client.add_faults({"path": "/openai/", "status": 500, "count": 1})
    with pytest.raises(openai.APIStatusError):
        client.with_options(max_retries=0).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "fail"}], max_tokens=8)
    # The built-in engine.
    ask("smollm2", [{"role": "user", "content": "Say hi"}], "graf-5")
    # A client's W3C trace: its id becomes the latency histograms' exemplar.
    client.chat.completions.create(
        model="deepseek-chat", messages=[{"role": "user", "content": "traced"}], max_tokens=8,
        extra_headers={"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"})
    # An alert delivery (to a port nothing listens on).
    status, _, answer = gw.admin("POST", "/api/channels/hook/test", {})
    assert status == 202, (status, answer)
    turns = gw.wait_turns("graf-1", 5)
    causes = [(t["cache_diagnosis"] or {}).get("cause") for t in turns]
    assert causes == [None, None, "expired", "prompt_changed", "model_switch"], causes
    routed = gw.wait_turns("graf-4", 1)[0]
    assert routed["model"] == "chain" and routed["target"] == "deepseek-chat", routed


def stored_requests(gw) -> list[dict]:
    rows, cursor = [], ""
    while True:
        page = gw.admin_get(f"/api/requests?limit=500&cursor={cursor}")[2]
        rows += page["requests"]
        cursor = page["next_cursor"]
        if not cursor:
            return rows


def test_every_dashboard_panel_has_data_and_counters_match_the_store(grafana_gw, sim, tmp_path):
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.fail("prometheus is not installed (scripts/setup.sh installs the Debian package)")
    dashboard = json.loads(DASHBOARD.read_text())
    assert any(i["type"] == "datasource" and i["pluginId"] == "prometheus"
               for i in dashboard["__inputs"])
    targets = panel_targets(dashboard)
    assert len(targets) >= 15, targets
    gw = grafana_gw
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""\
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: kvgate
    static_configs: [{{targets: ['127.0.0.1:{gw.port}']}}]
""")
    log = open(tmp_path / "prom.log", "w")
    proc = subprocess.Popen([prometheus, f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}",
                             "--enable-feature=exemplar-storage"],
                            stdout=subprocess.DEVNULL, stderr=log)
    try:
        # A scrape before the traffic, so that increase() and rate() see the counters move.
        wait_for(port, 'up{job="kvgate"} == 1', tmp_path)
        drive_traffic(gw, sim)
        time.sleep(0.5)  # the store's group commit
        rows = [r for r in stored_requests(gw)]
        overview = gw.admin_get("/api/overview?window=1h")[2]

        # The store's sums, and /metrics must show them once Prometheus scraped after the last
        # request: wait for the scrape, then compare.
        lost = {c["cause"]: c for c in overview["lost_by_cause"]}
        assert {"expired", "prompt_changed", "model_switch", "below_minimum"} <= set(lost), lost
        misses = sum(c["requests"] for c in lost.values())
        wait_for(port, f"sum(kvgate_cache_misses_total) >= {misses}", tmp_path)
        time.sleep(2.2)  # two more scrapes: rate() windows hold 2+ points after the traffic
        by_cause = {r["metric"]["cause"]: float(r["value"][1]) for r in
                    promql(port, "sum by (cause) (kvgate_cache_misses_total)")}
        cost_by_cause = {r["metric"]["cause"]: float(r["value"][1]) for r in
                         promql(port, "sum by (cause) (kvgate_cache_miss_cost_usd_total)")}
        # Every cause is pre-created (0 where none happened).
        assert set(by_cause) == set(CAUSES), by_cause
        for cause in CAUSES:
            stored = lost.get(cause, {"requests": 0, "cost_missed_usd": 0.0})
            assert by_cause[cause] == stored["requests"], (cause, by_cause, lost)
            assert cost_by_cause[cause] == pytest.approx(stored["cost_missed_usd"], abs=1e-12), (
                cause, cost_by_cause, lost)
        assert cost_by_cause["expired"] > 0 and cost_by_cause["prompt_changed"] > 0

        spent = float(promql(port, "sum(kvgate_cost_usd_total)")[0]["value"][1])
        assert spent == pytest.approx(overview["totals"]["cost_usd"], abs=1e-12), overview["totals"]
        # The counter adds each turn's saving when positive (a first Anthropic turn's writes cost
        # more than they save: it adds 0, where the overview's net saved_usd goes down).
        saved = float(promql(port, "sum(kvgate_cache_saved_usd_total)")[0]["value"][1])
        positive = sum(max(0.0, r["cost_usd"]["saved"]) for r in rows)
        assert saved > 0 and saved == pytest.approx(positive, abs=1e-12), (saved, positive)
        per_model = {(r["metric"]["model"], r["metric"]["target"]): float(r["value"][1]) for r in
                     promql(port, "sum by (model, target) (kvgate_requests_total)")}
        assert per_model.get(("chain", "deepseek-chat")) == 1, per_model
        # The router's other target is there from startup, at 0.
        assert per_model.get(("chain", "gpt-4o-mini")) == 0, per_model
        errors = promql(port, 'kvgate_upstream_errors_total{provider="openai",code="500"}')
        assert errors and float(errors[0]["value"][1]) >= 1, errors

        # Prometheus scraped OpenMetrics (it asks for it first) and kept the exemplars: the
        # client's trace id, and kvgate's request id hex for a request without a traceparent.
        now = time.time()
        url = (f"http://127.0.0.1:{port}/api/v1/query_exemplars?" + urllib.parse.urlencode(
            {"query": "kvgate_request_duration_seconds_bucket", "start": now - 300, "end": now}))
        with urllib.request.urlopen(url, timeout=5) as r:
            found = json.loads(r.read())
        assert found["status"] == "success", found
        trace_ids = {e["labels"]["trace_id"] for s in found["data"] for e in s["exemplars"]}
        assert TRACE_ID in trace_ids, trace_ids
        request_hex = {r["request_id"].split("_", 1)[1] for r in rows}
        assert trace_ids & request_hex, (trace_ids, sorted(request_hex)[:3])
        st, headers, body = gw.request("GET", "/metrics",
                                       headers={"Accept": "application/openmetrics-text"})
        text = body.decode() if isinstance(body, bytes) else str(body)
        assert st == 200 and text.endswith("# EOF\n"), text[-200:]
        assert f'# {{trace_id="{TRACE_ID}"}}' in text
        assert headers["content-type"].startswith("application/openmetrics-text"), headers
        st, headers, body = gw.request("GET", "/metrics")
        plain = body.decode() if isinstance(body, bytes) else str(body)
        assert headers["content-type"].startswith("text/plain; version=0.0.4"), headers
        assert "# EOF" not in plain and "trace_id" not in plain

        empty = []
        for title, expr in targets:
            query = grafana_to_promql(expr)
            result = promql(port, query)
            if not result:
                empty.append((title, query))
        assert not empty, "panels without data:\n" + "\n".join(f"{t}: {q}" for t, q in empty)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def wait_for(port: int, expr: str, tmp_path, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if promql(port, expr):
                return
        except OSError:
            pass
        time.sleep(0.25)
    pytest.fail(f"never true in Prometheus: {expr}\n" + (tmp_path / "prom.log").read_text()[-2000:])
