"""Graceful shutdown: SIGTERM exits 0 and loses no telemetry of a request a client saw answered."""

from __future__ import annotations

import threading
import time
import uuid

import openai

from gwctl import Gateway


def turn_ids(gw: Gateway, thread_id: str) -> set[str]:
    st, body = gw.thread(thread_id)
    if st == 404:
        return set()
    assert st == 200, (st, body)
    return {t["request_id"] for t in body.get("turns") or []}


def test_sigterm_idle_exit_and_persistence(spawn_kvgate, sim):
    kg = spawn_kvgate("idle")
    thread = f"t-idle-{uuid.uuid4().hex[:8]}"
    raw = kg.gateway().client().chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "persist me"}],
        extra_body={"thread_identifier": thread})
    raw.parse()
    rid = raw.headers.get("x-request-id")
    assert rid
    assert kg.terminate() == 0, kg.stderr_tail()
    again = spawn_kvgate("idle-restart", db_path=kg.db_path)
    assert turn_ids(again.gateway(), thread) == {rid}
    assert again.terminate() == 0, again.stderr_tail()


def test_sigterm_under_load_keeps_answered_requests(spawn_kvgate, sim):
    kg = spawn_kvgate("load")
    gw = kg.gateway()
    n_clients = 32
    run = uuid.uuid4().hex[:8]
    # Slow the upstream a little so that requests are in flight when SIGTERM arrives.
    sim.client.add_faults({"path": "/openai/", "latency_ms": 40, "count": 0})
    answered: list[list[str]] = [[] for _ in range(n_clients)]
    failures: list[str | None] = [None] * n_clients
    total = [0]
    lock = threading.Lock()

    def worker(i: int):
        client = gw.client(timeout=20)
        thread = f"t-load-{run}-{i}"
        for k in range(400):
            try:
                kwargs = dict(model="gpt-4o-mini",
                              messages=[{"role": "user", "content": f"client {i} request {k}"}],
                              extra_body={"thread_identifier": thread})
                if i % 2:
                    raw = client.chat.completions.with_raw_response.create(
                        stream=True, stream_options={"include_usage": True}, **kwargs)
                    rid = raw.headers.get("x-request-id")
                    if raw.http_response.status_code == 200 and rid:
                        answered[i].append(rid)  # answered: 200 with an id, even if cut later
                    for _ in raw.parse():
                        pass
                else:
                    raw = client.chat.completions.with_raw_response.create(**kwargs)
                    raw.parse()
                    rid = raw.headers.get("x-request-id")
                    assert rid, "no x-request-id header"
                    answered[i].append(rid)
                with lock:
                    total[0] += 1
            except Exception as e:  # the gateway went away: this client is done
                failures[i] = f"{type(e).__name__}: {e}"
                return

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n_clients)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while total[0] < 3 * n_clients and time.monotonic() < deadline:
        time.sleep(0.02)
    assert total[0] >= n_clients, f"only {total[0]} requests completed before SIGTERM"
    rc = kg.terminate(timeout=45)
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "client threads still running after shutdown"
    assert rc == 0, f"kvgate exited with {rc} after SIGTERM under load:\n{kg.stderr_tail()}"
    n_answered = sum(len(a) for a in answered)
    assert n_answered >= n_clients
    sim.client.clear_faults()

    again = spawn_kvgate("load-restart", db_path=kg.db_path)
    gw2 = again.gateway()
    missing = {}
    for i in range(n_clients):
        stored = turn_ids(gw2, f"t-load-{run}-{i}")
        lost = [rid for rid in answered[i] if rid not in stored]
        if lost:
            missing[i] = lost
    assert not missing, (f"{sum(len(v) for v in missing.values())} of {n_answered} answered "
                         f"requests are not in the store after SIGTERM: {missing}")
    assert again.terminate() == 0, again.stderr_tail()


def test_requests_cut_at_the_drain_deadline_are_recorded_as_shutdown(spawn_kvgate, sim):
    """A stream still running when server.drain_timeout_ms passes is cut by kvgate, and its turn
    says so ("shutdown"), rather than blaming the client ("client_disconnected")."""
    kg = spawn_kvgate("cut", drain_timeout_ms=500)
    gw = kg.gateway()
    thread = f"t-cut-{uuid.uuid4().hex[:8]}"
    # Each chunk of the upstream stream arrives 300 ms after the last: the stream outlives the
    # drain deadline.
    sim.client.add_faults({"path": "/openai/", "chunk_delay_ms": 300, "count": 0})
    started = threading.Event()
    raised: list[Exception] = []

    def stream():
        try:
            s = gw.client(timeout=30).chat.completions.create(
                model="gpt-4o-mini", stream=True,
                messages=[{"role": "user", "content": "a long answer please"}],
                extra_body={"thread_identifier": thread})
            for _ in s:
                started.set()
        except Exception as e:  # the stream is cut: expected
            raised.append(e)

    t = threading.Thread(target=stream, daemon=True)
    t.start()
    assert started.wait(10), "the stream did not start"
    assert kg.terminate(timeout=30) == 0, kg.stderr_tail()
    t.join(10)
    sim.client.clear_faults()
    assert "drain timeout" in kg.stderr_tail()
    # The client learns why: the stream ends with an error event, not a truncated body (which the
    # SDK reports as a bare protocol error).
    assert len(raised) == 1, "the cut stream ended as if it were whole"
    assert isinstance(raised[0], openai.APIError), repr(raised[0])
    assert raised[0].code == "server_shutting_down", raised[0].body
    again = spawn_kvgate("cut-restart", db_path=kg.db_path)
    st, body = again.gateway().thread(thread)
    assert st == 200, body
    [turn] = body["turns"]
    assert turn["status"] == "shutdown", turn
    assert "drain_timeout_ms" in turn["error"], turn
    assert again.terminate() == 0, again.stderr_tail()
