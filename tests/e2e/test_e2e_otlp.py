"""OpenTelemetry export (telemetry.otlp): a collector on 127.0.0.1 decodes every export with the
official opentelemetry-proto classes. A client's traceparent is continued, the request's span
carries the stored record's numbers, each upstream attempt is a child span whose id the upstream
got as its traceparent's parent, the GenAI metrics arrive, OTLP/JSON decodes too, and a collector
that refuses or is not there never slows a request (drops counted, retries seen)."""

from __future__ import annotations

import base64
import json
import secrets
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from gwctl import GATEWAY_KEY, with_config_tail

CHAT = "/v1/chat/completions"
SERVER, CLIENT = 2, 3  # Span.SpanKind


class Collector:
    """An OTLP/HTTP receiver: keeps every POST and answers `status` (with `retry_after`)."""

    def __init__(self, status: int = 200, retry_after: str | None = None):
        self.posts: list[dict] = []
        self.status = status
        self.retry_after = retry_after
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with collector.lock:
                    collector.posts.append({"path": self.path, "body": body, "at": time.monotonic(),
                                            "headers": {k.lower(): v for k, v in self.headers.items()}})
                self.send_response(collector.status)
                if collector.retry_after:
                    self.send_header("Retry-After", collector.retry_after)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def bodies(self, path: str) -> list[tuple[dict, bytes]]:
        with self.lock:
            return [(p["headers"], p["body"]) for p in self.posts if p["path"] == path]

    def spans(self, json_encoding: bool = False) -> list:
        out = []
        for _, body in self.bodies("/v1/traces"):
            request = trace_service_pb2.ExportTraceServiceRequest()
            if json_encoding:
                json_format.Parse(hex_ids_to_base64(body), request)
            else:
                request.ParseFromString(body)
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    out.extend(ss.spans)
        return out

    def metrics(self) -> list:
        out = []
        for _, body in self.bodies("/v1/metrics"):
            request = metrics_service_pb2.ExportMetricsServiceRequest()
            request.ParseFromString(body)
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    out.extend(sm.metrics)
        return out


def hex_ids_to_base64(body: bytes) -> str:
    """OTLP/JSON writes trace and span ids as hex (the OTLP spec); the protobuf JSON mapping
    json_format reads has bytes as base64."""
    doc = json.loads(body)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json.dumps(doc)


def attrs(span) -> dict:
    out = {}
    for kv in span.attributes:
        which = kv.value.WhichOneof("value")
        if which == "array_value":
            out[kv.key] = [v.string_value for v in kv.value.array_value.values]
        else:
            out[kv.key] = getattr(kv.value, which)
    return out


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_until(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def otlp_tail(endpoint: str, **extra) -> str:
    options = ", ".join(f"{k}: {v}" for k, v in extra.items())
    return f"""\
telemetry:
  otlp: {{endpoint: {endpoint}, headers: {{x-honeycomb-team: team-key}}, export_interval_s: 1{', ' + options if options else ''}}}
routers:
  - name: chain
    strategy: fallback
    targets: [{{model: gpt-4o-mini}}, {{model: claude-sonnet-4-5}}]
    fallback_on: [429, 500, 502, 503, 504, 529, timeout, connect]
    retries: 0
    affinity: none
"""


@pytest.fixture
def otlp_gw(kvgate_bin, sim, tmp_path, kvgate_process_class):
    started = []

    def start(collector_url: str, name: str = "otlp", **extra):
        cls = with_config_tail(kvgate_process_class, otlp_tail(collector_url, **extra))
        kg = cls(kvgate_bin, tmp_path / name, sim.port, name=name).start()
        started.append(kg)
        return kg

    yield start
    for kg in started:
        if kg.alive:
            assert kg.terminate() == 0, kg.stderr_tail()


def chat(gw, model: str, thread: str, traceparent: str | None = None, content: str = "trace me"):
    headers = {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json",
               "X-Thread-Id": thread}
    if traceparent:
        headers["traceparent"] = traceparent
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": content}]})
    started = time.monotonic()
    st, hdrs, answer = gw.request("POST", CHAT, body=body, headers=headers)
    assert st == 200, (st, answer)
    return hdrs["x-request-id"], time.monotonic() - started


def test_a_clients_trace_gets_the_request_span_and_an_attempt_span_each(otlp_gw, sim):
    collector = Collector()
    try:
        kg = otlp_gw(collector.url)
        gw = kg.gateway()
        sim.client.add_faults({"path": "/openai/", "status": 503})  # the first target fails once
        trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
        thread = f"t-otlp-{uuid.uuid4().hex[:8]}"
        request_id, _ = chat(gw, "chain", thread, f"00-{trace_id}-{parent_id}-01")
        record = gw.wait_request(request_id)

        def of_trace():
            return [s for s in collector.spans() if s.trace_id.hex() == trace_id]
        spans = wait_until(lambda: len(of_trace()) >= 3 and of_trace())
        assert len(spans) == 3, [s.name for s in spans]
        (request,) = [s for s in spans if s.kind == SERVER]
        attempts = sorted((s for s in spans if s.kind == CLIENT), key=lambda s: s.start_time_unix_nano)
        assert request.parent_span_id.hex() == parent_id
        assert request.name == "chat chain"
        assert [a.parent_span_id for a in attempts] == [request.span_id] * 2
        assert request.start_time_unix_nano <= attempts[0].start_time_unix_nano
        assert attempts[1].end_time_unix_nano <= request.end_time_unix_nano

        a = attrs(request)
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.request.model"] == "chain"
        assert a["gen_ai.response.model"] == record["upstream_model"] == "claude-sonnet-4-5"
        assert a["gen_ai.provider.name"] == "anthropic"
        assert a["gen_ai.response.id"] == record["response_id"]
        assert a["kvgate.thread.id"] == record["thread_id"]
        assert a["kvgate.route.target"] == record["target"] == "claude-sonnet-4-5"
        # The cache attributes are the stored record's (a count not reported is absent).
        usage = record["usage"]
        for attr, value in [("gen_ai.usage.cache_read.input_tokens", usage["cache_read"]),
                            ("kvgate.usage.uncached_tokens", usage["uncached"]),
                            ("kvgate.usage.cache_write_5m_tokens", usage["cache_write_5m"]),
                            ("kvgate.usage.cache_write_1h_tokens", usage["cache_write_1h"]),
                            ("gen_ai.usage.output_tokens", usage["output"])]:
            assert a.get(attr) == value, (attr, a.get(attr), value)
        writes = [usage["cache_write_5m"], usage["cache_write_1h"], usage["cache_write_no_ttl"]]
        if None not in writes:
            assert a["gen_ai.usage.cache_creation.input_tokens"] == sum(writes)
            assert a["gen_ai.usage.input_tokens"] == sum(writes) + usage["cache_read"] + usage["uncached"]
        assert a["kvgate.cost.usd"] == pytest.approx(record["cost_usd"]["total"], abs=1e-12)
        diagnosis = record["cache_diagnosis"]
        assert a.get("kvgate.cache.diagnosis") == (diagnosis["cause"] if diagnosis else None)
        assert "error.type" not in a

        failed, served = attrs(attempts[0]), attrs(attempts[1])
        assert failed["kvgate.route.target"] == "gpt-4o-mini"
        assert failed["http.response.status_code"] == 503 and failed["error.type"]
        assert attempts[0].status.code == 2  # STATUS_CODE_ERROR
        assert served["kvgate.route.target"] == "claude-sonnet-4-5" and "error.type" not in served
        assert served["server.address"] == "127.0.0.1" and served["server.port"] == sim.port

        # Each upstream got a traceparent in the client's trace whose parent is its attempt span.
        got = [r["headers"].get("traceparent") for r in sim.client.requests()
               if r["path"].endswith(("/chat/completions", "/messages"))]
        assert got == [f"00-{trace_id}-{s.span_id.hex()}-01" for s in attempts], got

        # Without a traceparent: a new trace, a root span.
        request_id, _ = chat(gw, "gpt-4o-mini", thread + "-b")
        new = wait_until(lambda: [s for s in collector.spans()
                                  if s.kind == SERVER and s.trace_id.hex() != trace_id])
        assert new and not new[0].parent_span_id and len(new[0].trace_id) == 16

        # The GenAI metrics, cumulative histograms, within an export interval or two.
        def names():
            return {m.name: m for m in collector.metrics()}
        metrics = wait_until(lambda: "gen_ai.client.token.usage" in names() and names())
        assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= set(metrics)
        usage_metric = metrics["gen_ai.client.token.usage"].histogram
        assert usage_metric.aggregation_temporality == 2  # CUMULATIVE
        types = {attrs(p)["gen_ai.token.type"] for p in usage_metric.data_points}
        assert types == {"input", "output"}
        durations = metrics["gen_ai.client.operation.duration"].histogram.data_points
        assert sum(p.count for p in durations) >= 2
        headers, _ = collector.bodies("/v1/traces")[0]
        assert headers["content-type"] == "application/x-protobuf"
        assert headers["x-honeycomb-team"] == "team-key"
    finally:
        collector.close()


def test_otlp_json_decodes_with_the_protobuf_json_mapping(otlp_gw, sim):
    collector = Collector()
    try:
        gw = otlp_gw(collector.url, name="otlp-json", encoding="json").gateway()
        trace_id = secrets.token_hex(16)
        request_id, _ = chat(gw, "gpt-4o-mini", f"t-json-{uuid.uuid4().hex[:8]}",
                             f"00-{trace_id}-{secrets.token_hex(8)}-01")
        record = gw.wait_request(request_id)
        spans = wait_until(lambda: [s for s in collector.spans(json_encoding=True)
                                    if s.trace_id.hex() == trace_id])
        assert {s.kind for s in spans} == {SERVER, CLIENT}, spans
        (request,) = [s for s in spans if s.kind == SERVER]
        a = attrs(request)
        assert a["gen_ai.usage.output_tokens"] == record["usage"]["output"]
        assert a["gen_ai.request.model"] == "gpt-4o-mini"
        headers, _ = collector.bodies("/v1/traces")[0]
        assert headers["content-type"] == "application/json"
    finally:
        collector.close()


def test_an_unsampled_client_trace_exports_no_spans(otlp_gw, sim):
    collector = Collector()
    try:
        gw = otlp_gw(collector.url, name="otlp-unsampled").gateway()
        trace_id = secrets.token_hex(16)
        chat(gw, "gpt-4o-mini", f"t-uns-{uuid.uuid4().hex[:8]}", f"00-{trace_id}-{secrets.token_hex(8)}-00")
        # The upstream still gets the trace (unsampled), and the metrics still count the request.
        got = sim.client.requests()[-1]["headers"].get("traceparent", "")
        assert got.startswith(f"00-{trace_id}-") and got.endswith("-00"), got
        assert wait_until(lambda: collector.metrics())
        assert not [s for s in collector.spans() if s.trace_id.hex() == trace_id]
    finally:
        collector.close()


def test_a_refusing_or_absent_collector_never_slows_requests(otlp_gw, sim):
    refusing = Collector(status=503, retry_after="1")
    try:
        kg = otlp_gw(refusing.url, name="otlp-503")
        gw = kg.gateway()
        took = [chat(gw, "gpt-4o-mini", f"t-503-{i}")[1] for i in range(10)]
        assert max(took) < 1.0, took
        # The exporter retries after the collector's Retry-After (1 s), not at once.
        posts = wait_until(lambda: len(refusing.bodies("/v1/traces")) >= 2 and refusing.posts, 10)
        traces = [p for p in posts if p["path"] == "/v1/traces"]
        assert len(traces) >= 2
        assert traces[1]["at"] - traces[0]["at"] >= 0.9
    finally:
        refusing.close()

    # Nothing listening, a queue of 5: requests stay fast, the rest is dropped and counted.
    kg = otlp_gw(f"http://127.0.0.1:{closed_port()}", name="otlp-down", queue_size=5)
    gw = kg.gateway()
    took = [chat(gw, "gpt-4o-mini", f"t-down-{i}")[1] for i in range(30)]
    assert max(took) < 1.0, took

    def dropped():
        _, _, text = gw.request("GET", "/metrics")
        text = text.decode() if isinstance(text, bytes) else str(text)
        for line in text.splitlines():
            if line.startswith("kvgate_otlp_dropped_total"):
                return float(line.split()[-1])
        return 0.0
    assert wait_until(lambda: dropped() >= 10, 15), dropped()
    assert kg.terminate() == 0
    assert "otlp: dropped" in kg.stderr_tail(20000)


@pytest.mark.parametrize("tail, message", [
    ("telemetry:\n  otlp: {endpoint: localhost:4318}\n", "telemetry.otlp.endpoint"),
    ("telemetry:\n  otlp: {endpoint: http://c:4318, sample_ratio: 2}\n", "sample_ratio"),
    ("telemetry:\n  otlp: {endpoint: http://c:4318, encoding: xml}\n", "encoding"),
    ("telemetry:\n  otlp: {endpoint: http://c:4318, tracez: true}\n", "tracez"),
])
def test_config_errors_are_clear(kvgate_bin, sim, tmp_path, kvgate_process_class, tail, message):
    cls = with_config_tail(kvgate_process_class, tail)
    kg = cls(kvgate_bin, tmp_path / "bad", sim.port, name="bad")
    with pytest.raises(RuntimeError) as err:
        kg.start(timeout=10)
    assert message in str(err.value), str(err.value)[-2000:]
