"""Tenant isolation between gateway keys (two keys of server.api_keys): the built-in engine's
prefix cache is salted per key (key B's cached_tokens say nothing of key A's prompts; the lookup
API answers per key too), unless the provider opts in to sharing it; another key's
previous_response_id answers exactly as an unknown one, on the engine (translated) and on a
provider that holds the conversation itself (passed through); and key B's X-Thread-Id names a
thread of its own, leaving key A's thread and its diagnosis untouched."""
from __future__ import annotations

import json
import random
import uuid

import openai
import pytest

from gwctl import ADMIN_TOKEN

KEY_A = "sk-tenant-a"
KEY_B = "sk-tenant-b"
BLOCK = 16
# A system prompt of a few hundred tokens: many 16-token blocks to hit (or not).
SECRET = ("Internal pricing memo for the spring catalogue, not for customers. " * 12).strip()


def spawn(kvgate_bin, kvgate_process_class, bundled_model, sim, workdir, share: bool):
    class TenantKvgate(kvgate_process_class):
        """Two gateway keys; the bundled model on the built-in engine as `smollm2`, and the
        simulator's OpenAI as `gpt-4o-mini`."""

        def _write_config(self):
            self.config_path.write_text(f"""\
server:   {{listen: 127.0.0.1:0, admin_token: {ADMIN_TOKEN}, api_keys: [{KEY_A}, {KEY_B}]}}
storage:  {{sqlite: {self.db_path}}}
providers:
  - {{name: local, type: local, model_path: {bundled_model}, kv_cache_tokens: 4096, threads: 2,
     share_prefix_cache_across_keys: {"true" if share else "false"}}}
  - {{name: openai, type: openai, base_url: http://127.0.0.1:{self.sim_port}/openai/v1,
     api_key: "${{SIM_OPENAI_KEY}}"}}
models:
  - {{name: smollm2, provider: local}}
  - {{name: gpt-4o-mini, provider: openai, upstream_model: gpt-4o-mini}}
""")

    return TenantKvgate(kvgate_bin, workdir, sim.port, name="tenants").start(timeout=60)


@pytest.fixture(scope="module")
def tenants(kvgate_bin, kvgate_process_class, bundled_model, sim, tmp_path_factory):
    kg = spawn(kvgate_bin, kvgate_process_class, bundled_model, sim,
               tmp_path_factory.mktemp("tenants"), share=False)
    yield kg.gateway()
    assert kg.terminate() == 0, kg.stderr_tail()


def key_ids(gw) -> dict[str, str]:
    """Secret -> key id: config keys are listed by id and name-less; match them by a request."""
    ids = {}
    for secret in (KEY_A, KEY_B):
        r = gw.client(api_key=secret, timeout=60).chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "who am i"}])
        ids[secret] = gw.wait_request(r.headers["x-request-id"])["api_key_id"]
    assert ids[KEY_A] and ids[KEY_B] and ids[KEY_A] != ids[KEY_B], ids
    return ids


def ask_engine(gw, key: str, user: str):
    r = gw.client(api_key=key, timeout=120).chat.completions.create(
        model="smollm2", messages=[{"role": "system", "content": SECRET},
                                   {"role": "user", "content": user}],
        max_tokens=2, temperature=0)
    return r.usage.prompt_tokens_details.cached_tokens, r.usage.prompt_tokens


def lookup(gw, user: str, api_key_id: str | None = None) -> dict:
    body = {"model": "smollm2", "messages": [{"role": "system", "content": SECRET},
                                             {"role": "user", "content": user}]}
    if api_key_id is not None:
        body["api_key_id"] = api_key_id
    st, _, answer = gw.request("POST", "/api/engine/lookup", body=json.dumps(body),
                               headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert st == 200, answer
    return answer


def test_prefix_cache_is_per_key(tenants):
    ids = key_ids(tenants)
    tag = uuid.uuid4().hex[:8]
    cached, prompt = ask_engine(tenants, KEY_A, f"Question {tag}?")
    assert cached == 0 and prompt > 8 * BLOCK
    # Key A's own next request reads its blocks; key B's identical prompt reads none of them.
    assert ask_engine(tenants, KEY_A, f"Question {tag}?")[0] >= 8 * BLOCK
    # The lookup API answers per key: only A holds this prompt (the admin sees whose it is).
    assert lookup(tenants, f"Question {tag}?", ids[KEY_B])["cached_tokens"] == 0
    assert lookup(tenants, f"Question {tag}?", ids[KEY_A])["cached_tokens"] >= 8 * BLOCK
    every = lookup(tenants, f"Question {tag}?")
    assert every["cached_tokens"] >= 8 * BLOCK
    assert set(every["cached_tokens_by_key"]) == {ids[KEY_A]}, every
    assert ask_engine(tenants, KEY_B, f"Question {tag}?")[0] == 0
    # Then B has cached it for itself, under its own salt.
    assert ask_engine(tenants, KEY_B, f"Question {tag}?")[0] >= 8 * BLOCK
    st, _, engine = tenants.admin_get("/api/engine")
    assert st == 200 and engine["engines"][0]["prefix_cache_scope"] == "per_key", engine


def test_sharing_the_prefix_cache_is_an_opt_in(kvgate_bin, kvgate_process_class, bundled_model,
                                               sim, tmp_path):
    kg = spawn(kvgate_bin, kvgate_process_class, bundled_model, sim, tmp_path / "shared",
               share=True)
    try:
        gw = kg.gateway()
        assert ask_engine(gw, KEY_A, "Shared question?")[0] == 0
        cached, _ = ask_engine(gw, KEY_B, "Shared question?")
        assert cached >= 8 * BLOCK  # A's blocks
        st, _, engine = gw.admin_get("/api/engine")
        assert st == 200 and engine["engines"][0]["prefix_cache_scope"] == "shared", engine
    finally:
        assert kg.terminate() == 0, kg.stderr_tail()


def not_found_error(exc: openai.BadRequestError, response_id: str) -> dict:
    assert exc.status_code == 400
    error = exc.response.json()["error"]
    # The same answer as for an id never made, but for the id it quotes.
    return {**error, "message": error["message"].replace(response_id, "<id>")}


@pytest.mark.parametrize("model", ["smollm2", "gpt-4o-mini"])
def test_previous_response_id_of_another_key_is_not_found(tenants, model):
    a = tenants.client(api_key=KEY_A, timeout=120)
    b = tenants.client(api_key=KEY_B, timeout=120)
    first = a.responses.create(model=model, input="Remember the code word: heron.",
                               max_output_tokens=4, temperature=0)
    unknown_id = "resp_" + uuid.uuid4().hex
    with pytest.raises(openai.BadRequestError) as unknown:
        b.responses.create(model=model, input="What was the code word?",
                           previous_response_id=unknown_id, max_output_tokens=4)
    with pytest.raises(openai.BadRequestError) as foreign:
        b.responses.create(model=model, input="What was the code word?",
                           previous_response_id=first.id, max_output_tokens=4)
    assert foreign.value.response.json()["error"]["code"] == "previous_response_not_found"
    # The same answer as for an id never made (on gpt-4o-mini, the provider's answer to that).
    assert not_found_error(foreign.value, first.id) == not_found_error(unknown.value, unknown_id)
    # Its own key still continues it.
    second = a.responses.create(model=model, input="What was the code word?",
                                previous_response_id=first.id, max_output_tokens=4)
    assert second.previous_response_id == first.id


def long_text(seed: int, n: int = 1300) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(10**6)}" for _ in range(n))


def test_thread_ids_are_per_key(tenants):
    ids = key_ids(tenants)
    thread = f"t-iso-{uuid.uuid4().hex[:8]}"

    def chat(key: str, messages: list[dict], thread_id: str = thread) -> str:
        r = tenants.client(api_key=key).chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=messages, max_tokens=8,
            extra_headers={"X-Thread-Id": thread_id})
        return r.headers["x-request-id"]

    a_msgs = [{"role": "system", "content": long_text(1)},
              {"role": "user", "content": "first from A"}]
    a1 = chat(KEY_A, a_msgs)
    a_msgs += [{"role": "user", "content": "second from A"}]
    a2 = chat(KEY_A, a_msgs)
    tenants.wait_turns(thread, 2)
    # Key B, same thread id, its own (different) conversation.
    b1 = chat(KEY_B, [{"role": "system", "content": long_text(2)},
                      {"role": "user", "content": "first from B"}])
    a_msgs += [{"role": "user", "content": "third from A"}]
    a3 = chat(KEY_A, a_msgs)
    scoped = f"{ids[KEY_B]}:{thread}"
    b_turns = tenants.wait_turns(scoped, 1)
    a_turns = tenants.wait_turns(thread, 3)
    # A's thread holds A's turns alone; B's turn is in a thread of B's own.
    assert [t["request_id"] for t in a_turns] == [a1, a2, a3]
    assert [t["request_id"] for t in b_turns] == [b1]
    assert tenants.wait_request(b1)["thread_id"] == scoped
    assert tenants.wait_request(a3)["thread_id"] == thread
    for rid in (a1, a2, a3):
        assert tenants.wait_request(rid)["api_key_id"] == ids[KEY_A]
    # The diagnosis: B's turn is the first of its thread (nothing to compare), and A's third turn
    # was compared with A's second (it read what it should), not with B's prompt.
    assert b_turns[0]["cache_diagnosis"] is None, b_turns[0]
    assert a_turns[2]["cache_diagnosis"] is None, a_turns[2]
    # A client of B that names its thread like B's scoped one gets a thread of its own still.
    b2 = chat(KEY_B, [{"role": "user", "content": "spoof"}], thread_id=f"{ids[KEY_A]}:{thread}")
    assert tenants.wait_request(b2)["thread_id"] == f"{ids[KEY_B]}:{ids[KEY_A]}:{thread}"
