"""Model names have a length cap: three 5 MB names once added 10.5 MB to the database. A name
over 256 bytes is a 400 `invalid_model` naming the limit, recorded with the name cut, and the
gateway keeps serving."""

from __future__ import annotations

import json

from gwctl import GATEWAY_KEY


def test_a_model_name_over_256_bytes_is_refused_and_never_stored_whole(gw):
    name = "m" * (1 << 20)
    for path, body in (("/v1/chat/completions",
                        {"model": name, "messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/messages/count_tokens",
                        {"model": name, "messages": [{"role": "user", "content": "hi"}]})):
        st, _, answer = gw.request("POST", path, json.dumps(body),
                                   headers={"Authorization": f"Bearer {GATEWAY_KEY}",
                                            "Content-Type": "application/json"})
        assert st == 400, (path, st, answer)
        text = json.dumps(answer)
        assert "256" in text and len(text) < 2000, (path, text[:300])
    still = gw.client().chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "still there?"}])
    assert still.choices[0].message.content
    # The refusal is recorded, with the name cut to 256 bytes (and "..." to say so).
    st, _, listed = gw.admin_get("/api/requests?limit=20")
    assert st == 200, listed
    models = [r["model"] for r in listed["requests"] if r["model"].startswith("mmmm")]
    assert models and all(len(m.encode()) <= 259 for m in models), [len(m) for m in models]
