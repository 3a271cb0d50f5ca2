"""The read API's fixes the dashboard relies on: a request is found by the id the client got in
the response body, times are RFC 3339 as well as unix microseconds, the overview and the live
probe answer, and whether a token is required is public."""
import json
import time
import urllib.parse

import pytest

from gwctl import ADMIN_TOKEN


@pytest.mark.parametrize("model", ["gpt-4o-mini", "claude-sonnet-4-5", "deepseek-chat"])
@pytest.mark.parametrize("stream", [False, True])
def test_request_found_by_the_response_body_id(gw, model, stream):
    client = gw.client()
    kw = dict(model=model, messages=[{"role": "user", "content": "which id?"}], max_tokens=8,
              extra_body={"thread_identifier": f"rid-{model}-{stream}"})
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **kw))
        body_id = chunks[0].id
        assert all(c.id == body_id for c in chunks)
    else:
        body_id = client.chat.completions.create(**kw).id
    # Each provider's own form (DeepSeek's are UUIDs).
    assert body_id.startswith({"gpt-4o-mini": "chatcmpl", "claude-sonnet-4-5": "msg_"}.get(model, ""))
    assert body_id
    rec = gw.wait_request(body_id)
    assert rec["response_id"] == body_id
    assert rec["request_id"].startswith("req_") and rec["model"] == model
    assert gw.admin_get(f"/api/requests/{rec['request_id']}")[2] == rec
    listed = gw.admin_get(f"/api/requests?thread_id={urllib.parse.quote(rec['thread_id'])}")[2]
    assert listed["requests"][0]["response_id"] == body_id
    # The list and the detail use the same usage names.
    assert listed["requests"][0]["usage"].keys() == rec["usage"].keys()



@pytest.mark.parametrize("stream", [False, True])
def test_request_readable_right_after_the_response(gw, stream):
    """Read-after-write: the record is readable the moment the answer is complete, by the body's
    id and by x-request-id, with no wait for the store's group commit."""
    client = gw.client()
    for i in range(10):
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": f"read me {i}"}],
            max_tokens=8, stream=stream, extra_body={"thread_identifier": f"raw-{stream}-{i}"})
        request_id = raw.headers["x-request-id"]
        if stream:
            body_id = [c.id for c in raw.parse()][0]
        else:
            body_id = raw.parse().id
        st, _, by_body = gw.admin_get(f"/api/requests/{urllib.parse.quote(body_id)}")
        assert st == 200, (i, body_id, by_body)
        st, _, by_kvgate = gw.admin_get(f"/api/requests/{request_id}")
        assert st == 200, (i, request_id, by_kvgate)
        assert by_body["request_id"] == request_id and by_body["response_id"] == body_id
        assert by_body["thread_id"] == f"raw-{stream}-{i}" and by_body["status"] == "ok"
        assert by_body["stream"] == stream and by_body["usage"]["output"] is not None
        assert by_kvgate["response_id"] == body_id

def test_since_and_until_take_rfc3339_and_micros(gw):
    client = gw.client()
    before = time.time()
    client.chat.completions.create(model="gpt-4o-mini", max_tokens=4,
                                   messages=[{"role": "user", "content": "timed"}],
                                   extra_body={"thread_identifier": "timed-1"})
    rec = gw.wait_turns("timed-1", 1)[0]
    since_iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(before - 1))
    since_us = int((before - 1) * 1e6)
    for since in (since_iso, str(since_us), since_iso.replace("Z", "+00:00")):
        st, _, body = gw.admin_get(f"/api/requests?thread_id=timed-1&since={urllib.parse.quote(since)}")
        assert st == 200 and [r["request_id"] for r in body["requests"]] == [rec["request_id"]], since
        st, _, body = gw.admin_get(f"/api/threads?since={urllib.parse.quote(since)}&q=timed-")
        assert st == 200 and [t["thread_id"] for t in body["threads"]] == ["timed-1"], since
    # An unencoded '+' in an offset reads as a space; it is taken for the '+' it was.
    st, _, body = gw.admin_get(f"/api/requests?thread_id=timed-1&since={since_iso[:-1]}+00:00")
    assert st == 200 and len(body["requests"]) == 1
    st, _, body = gw.admin_get("/api/requests?thread_id=timed-1&until=2020-01-01T00:00:00Z")
    assert st == 200 and body["requests"] == []
    st, _, body = gw.admin_get("/api/threads?until=2020-01-01T00:00:00.5-05:00&q=timed-")
    assert st == 200 and body["threads"] == []
    st, _, body = gw.admin_get("/api/requests?since=yesterday")
    assert st == 400 and "RFC 3339" in body["error"]["message"] and body["error"]["param"] is None


def test_overview_live_and_access(gw):
    client = gw.client()
    st, _, live = gw.admin_get("/api/live?thread_id=ov-1")
    assert st == 200 and live["thread"] == {"turns": 0, "last_seq": 0}
    client.chat.completions.create(model="deepseek-chat", max_tokens=4,
                                   messages=[{"role": "user", "content": "overview"}],
                                   extra_body={"thread_identifier": "ov-1"})
    gw.wait_turns("ov-1", 1)
    st, _, after = gw.admin_get("/api/live?thread_id=ov-1")
    assert after["last_seq"] > live["last_seq"] and after["thread"]["turns"] == 1
    for window, points in (("1h", 60), ("24h", 96), ("7d", 84)):
        st, _, ov = gw.admin_get(f"/api/overview?window={window}")
        assert st == 200 and len(ov["series"]) == points, window
        ds = [m for m in ov["by_model"] if m["model"] == "deepseek-chat"]
        assert ds and ds[0]["requests"] >= 1 and ds[0]["provider"] == "ds"
        assert sum(p["requests"] for p in ov["series"]) == ov["totals"]["requests"]
    assert gw.admin_get("/api/overview?window=2d")[0] == 400
    assert gw.admin_get("/api/overview", token=None)[0] == 401
    st, _, access = gw.request("GET", "/api/access")
    assert st == 200 and access == {"token_required": True, "warning": None}
    assert gw.request("POST", "/api/access")[0] == 405
