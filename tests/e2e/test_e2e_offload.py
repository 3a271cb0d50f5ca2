"""The built-in engine's offload tiers through the gateway, a file (`offload: {disk, bytes}`) and
host memory (`offload: {host_bytes}`): a conversation whose KV blocks a small pool evicted is
served from the tier on its next request, with the same greedy answer, and the client's usage,
the recorded turn, /api/engine/lookup, /api/engine and /metrics all tell the same split of its
cached tokens between the pool and the tier."""
import json
import re

import pytest

from gwctl import ADMIN_TOKEN, GATEWAY_KEY

BLOCK = 16
SLOT_BYTES = {"disk": 372_736,  # one SmolLM2-135M block in the tier file (docs/engine.md)
              "host": 368_640}  # the block itself: host slots have no header

SYSTEM_A = ("You are a careful assistant for a hardware store. " * 30).strip()
SYSTEM_B = ("Answer as a ship's navigator who reads the stars every night. " * 33).strip()


@pytest.fixture(params=["disk", "host"])
def offload_gw(request, kvgate_bin, tmp_path, local_kvgate_class, bundled_model):
    kind = request.param
    tier = tmp_path / "local.kvtier"
    offload = (f"{{disk: {tier}, bytes: {64 * SLOT_BYTES[kind]}}}" if kind == "disk"
               else f"{{host_bytes: {64 * SLOT_BYTES[kind]}}}")

    class OffloadKvgate(local_kvgate_class):
        def _write_config(self):
            self.config_path.write_text(f"""\
server:   {{listen: 127.0.0.1:0, admin_token: {ADMIN_TOKEN}, api_keys: [{GATEWAY_KEY}]}}
storage:  {{sqlite: {self.db_path}}}
providers:
  - {{name: local, type: local, model_path: {bundled_model}, kv_cache_tokens: 512, threads: 2,
     offload: {offload}}}
models:
  - {{name: smollm2, provider: local}}
""")

    kg = OffloadKvgate(kvgate_bin, tmp_path / "offload", sim_port=0, name="offload").start(timeout=60)
    yield kg.gateway(), tier, kind
    assert kg.terminate() == 0, kg.stderr_tail()


def ask(gw, system, thread):
    r = gw.client(timeout=180).chat.completions.create(
        model="smollm2", max_tokens=4, temperature=0,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hello?"}],
        extra_body={"thread_identifier": thread})
    return r, r.usage.model_dump()["prompt_tokens_details"]


def test_an_evicted_conversation_comes_back_from_the_tier(offload_gw):
    gw, tier, kind = offload_gw
    other = "host" if kind == "disk" else "disk"
    first, d1 = ask(gw, SYSTEM_A, "off-a")
    assert d1["cached_tokens"] == 0 and d1["cache_read_offload_tokens"] == 0
    second, _ = ask(gw, SYSTEM_B, "off-b")  # more than the pool has left: evicts A to the tier
    assert first.usage.prompt_tokens + second.usage.prompt_tokens > 512
    assert second.usage.prompt_tokens < 500
    assert (tier.exists() and tier.stat().st_size > 0) == (kind == "disk")

    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    st, _, lookup = gw.request("POST", "/api/engine/lookup", headers=headers, body=json.dumps(
        {"model": "smollm2", "messages": [{"role": "system", "content": SYSTEM_A},
                                          {"role": "user", "content": "Hello?"}]}))
    assert st == 200, lookup
    tiers = lookup["cached_tokens_by_tier"]
    assert tiers[kind] > 0 and other not in tiers, lookup
    assert lookup["cached_tokens"] == tiers["pool"] + tiers[kind]

    again, d2 = ask(gw, SYSTEM_A, "off-a")
    disk = d2["cache_read_offload_tokens"]
    assert d2["cache_read_offload_tier"] == kind, d2
    assert disk == tiers[kind] and d2["cached_tokens"] == lookup["cached_tokens"], (d2, lookup)
    assert disk % BLOCK == 0 and d2["cached_tokens"] % BLOCK == 0
    assert again.choices[0].message.content == first.choices[0].message.content

    turns = gw.wait_turns("off-a", 2)
    assert turns[0]["cache_read_by_tier"] == {"pool": 0, kind: 0}
    assert turns[1]["usage"]["cache_read"] == d2["cached_tokens"]
    assert turns[1]["cache_read_by_tier"] == {"pool": d2["cached_tokens"] - disk, kind: disk}

    st, _, engines = gw.admin_get("/api/engine")
    assert st == 200
    offload = engines["engines"][0]["offload"]
    assert offload["kind"] == kind
    assert offload["path"] == (str(tier) if kind == "disk" else "host memory")
    assert offload["capacity_blocks"] == 64 and offload["capacity_bytes"] == 64 * SLOT_BYTES[kind]
    assert offload["hit_tokens"] == disk and offload["restores"] == 1
    assert offload["stored_blocks"] >= disk // BLOCK and offload["corrupt_blocks"] == 0
    assert offload["used_bytes"] == offload["used_blocks"] * SLOT_BYTES[kind]

    st, _, text = gw.request("GET", "/metrics")
    assert st == 200
    text = text.decode() if isinstance(text, bytes) else str(text)
    m = re.search(r'^kvgate_engine_offload_hits_total\{provider="local"\} (\S+)$', text, re.M)
    assert m and float(m.group(1)) == disk, text[-3000:]
    m = re.search(r'^kvgate_engine_offload_restore_seconds_total\{provider="local"\} (\S+)$',
                  text, re.M)
    assert m and float(m.group(1)) > 0
