"""Automatic threads: agent frameworks that send no thread id still get threads, inferred from the
prompt (each turn continues the previous turn's prompt and answer), scoped by tenant, marked
`thread_source: auto`; agents' session headers name threads; `threads: {auto: false}` turns the
inference off. Real kvgate, the provider simulator, the official OpenAI SDK."""

from __future__ import annotations

import uuid

from gwctl import with_config_tail

MODEL = "gpt-4o-mini"
TOOLS = [{"type": "function", "function": {
    "name": "search", "description": "Searches the docs.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


def system_prompt(tag: str) -> str:
    # Long enough to be cached (the simulator caches prompts of 1,024 tokens and more).
    return f"You are agent {tag}. " + " ".join(f"rule{i}-{tag}" for i in range(1400))


def answer_message(resp) -> dict:
    """The assistant message as an agent framework appends it to its history."""
    return {"role": "assistant", "content": resp.choices[0].message.content}


def run_tool_loop(client, tag: str, turns: int, on_turn=None) -> list[str]:
    """A tool loop as pydantic-ai or LangChain sends it: the whole history each turn, no thread
    id anywhere. Returns each turn's x-request-id."""
    messages = [{"role": "system", "content": system_prompt(tag)},
                {"role": "user", "content": f"Find the release notes for {tag}."}]
    request_ids = []
    for turn in range(1, turns + 1):
        if on_turn:
            on_turn(turn)
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, tools=TOOLS)
        resp = raw.parse()
        request_ids.append(raw.headers["x-request-id"])
        call_id = f"call_{tag}_{turn}"
        # The model's answer, then the tool call it made and the tool's output.
        messages.append(answer_message(resp))
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "search", "arguments": f'{{"q": "page {turn}"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": call_id,
                         "content": f"result page {turn}: " + " ".join(["text"] * 40)})
    return request_ids


def test_a_tool_loop_without_thread_id_is_one_automatic_thread(gw, sim):
    client = gw.client()
    tag = uuid.uuid4().hex[:8]
    # The simulator's cache forgets everything before turn 7: that turn's miss must be diagnosed,
    # which only happens to a turn that kvgate placed in its thread.
    ids = run_tool_loop(client, tag, 12, on_turn=lambda t: t == 7 and sim.client.reset())
    records = [gw.wait_request(i) for i in ids]
    thread_ids = {r["thread_id"] for r in records}
    assert len(thread_ids) == 1, thread_ids
    thread_id = thread_ids.pop()
    assert thread_id.startswith("auto-"), thread_id
    assert all(r["thread_source"] == "auto" for r in records)
    assert all(r["thread_parent"] is None for r in records)

    turns = gw.wait_turns(thread_id, 12)
    assert [t["request_id"] for t in turns] == ids
    assert all(t["thread_source"] == "auto" for t in turns)
    diagnosed = [i + 1 for i, t in enumerate(turns) if t["cache_diagnosis"]]
    assert diagnosed == [7], [(i + 1, t["cache_diagnosis"]) for i, t in enumerate(turns)]
    # Every other turn read the cache the previous one wrote.
    assert all((t["usage"]["cache_read"] or 0) > 0 for t in turns[1:6] + turns[7:])
    _, body = gw.thread(thread_id)
    assert body["summary"]["thread_source"] == "auto"

    # Listed among the threads, like a named one.
    st, _, listed = gw.admin_get("/api/threads?id_prefix=auto-&limit=500")
    assert st == 200
    assert thread_id in [t["thread_id"] for t in listed["threads"]]


def test_two_tenants_with_identical_prompts_never_share_a_thread(spawn_kvgate):
    kg = spawn_kvgate(name="two-keys", api_keys="[sk-gw-a, sk-gw-b]")
    gw = kg.gateway()
    tag = uuid.uuid4().hex[:8]
    per_key = {}
    for key in ("sk-gw-a", "sk-gw-b"):
        ids = run_tool_loop(gw.client(api_key=key), tag, 3)
        records = [gw.wait_request(i) for i in ids]
        per_key[key] = {r["thread_id"] for r in records}
        assert len(per_key[key]) == 1, (key, per_key[key])
        assert all(r["thread_source"] == "auto" for r in records)
    assert per_key["sk-gw-a"].isdisjoint(per_key["sk-gw-b"])


def test_without_gateway_keys_the_client_credential_is_the_tenant(spawn_kvgate):
    kg = spawn_kvgate(name="no-keys", api_keys="[]")
    gw = kg.gateway()
    tag = uuid.uuid4().hex[:8]
    threads = []
    for credential in ("sk-client-one", "sk-client-two"):
        ids = run_tool_loop(gw.client(api_key=credential), tag, 3)
        records = [gw.wait_request(i) for i in ids]
        assert len({r["thread_id"] for r in records}) == 1
        threads.append(records[0]["thread_id"])
    assert threads[0] != threads[1]


def test_a_second_continuation_of_a_turn_forks_and_names_its_parent(gw):
    client = gw.client()
    tag = uuid.uuid4().hex[:8]
    opening = [{"role": "system", "content": system_prompt(tag)},
               {"role": "user", "content": "Plan the release."}]
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=opening)
    first = gw.wait_request(raw.headers["x-request-id"])
    answer = answer_message(raw.parse())
    follow = opening + [answer, {"role": "user", "content": "Go on."}]
    main = client.chat.completions.with_raw_response.create(model=MODEL, messages=follow)
    regenerated = opening + [{"role": "assistant", "content": "Another answer."},
                             {"role": "user", "content": "Go on."}]
    branch = client.chat.completions.with_raw_response.create(model=MODEL, messages=regenerated)
    main_rec = gw.wait_request(main.headers["x-request-id"])
    branch_rec = gw.wait_request(branch.headers["x-request-id"])
    assert main_rec["thread_id"] == first["thread_id"]
    assert main_rec["thread_parent"] is None
    assert branch_rec["thread_id"] != first["thread_id"]
    assert branch_rec["thread_id"].startswith("auto-")
    assert branch_rec["thread_parent"] == first["thread_id"]
    _, body = gw.thread(branch_rec["thread_id"])
    assert body["summary"]["thread_parent"] == first["thread_id"]


def test_a_failed_turn_is_retried_in_the_same_thread(gw, sim):
    client = gw.client()
    tag = uuid.uuid4().hex[:8]
    opening = [{"role": "user", "content": f"hello {tag}"}]
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=opening)
    first = gw.wait_request(raw.headers["x-request-id"])
    follow = opening + [answer_message(raw.parse()), {"role": "user", "content": "more"}]
    sim.client.add_faults({"path": "/openai/v1/chat/completions", "status": 400, "count": 1})
    try:
        client.chat.completions.create(model=MODEL, messages=follow)
    except Exception:  # noqa: BLE001 - the 400 is the point
        pass
    retry = client.chat.completions.with_raw_response.create(model=MODEL, messages=follow)
    rec = gw.wait_request(retry.headers["x-request-id"])
    assert rec["thread_id"] == first["thread_id"]
    assert rec["thread_parent"] is None


def test_thread_sources_are_recorded(gw):
    client = gw.client()
    tag = uuid.uuid4().hex[:8]
    messages = [{"role": "user", "content": f"hi {tag}"}]

    def sent(**kw):
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, **kw)
        return gw.wait_request(raw.headers["x-request-id"])

    body = sent(extra_body={"thread_identifier": f"body-{tag}"})
    assert (body["thread_id"], body["thread_source"]) == (f"body-{tag}", "body")
    header = sent(extra_headers={"X-Thread-Id": f"hdr-{tag}"})
    assert (header["thread_id"], header["thread_source"]) == (f"hdr-{tag}", "header")
    # The session headers of coding agents: OpenAI Codex's and OpenCode's.
    codex = sent(extra_headers={"session_id": f"codex-{tag}"})
    assert (codex["thread_id"], codex["thread_source"]) == (f"codex-{tag}", "header")
    opencode = sent(extra_headers={"x-opencode-session": f"oc-{tag}"})
    assert (opencode["thread_id"], opencode["thread_source"]) == (f"oc-{tag}", "header")
    # A session header with a control character is refused like a bad X-Thread-Id.
    st, _, err = gw.request("POST", "/v1/chat/completions",
                            body='{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}',
                            headers={"Authorization": "Bearer sk-gw-test",
                                     "Content-Type": "application/json",
                                     "x-opencode-session": "a" * 600})
    assert st == 400 and "x-opencode-session" in err["error"]["message"], err

    # A Responses API chain.
    first = client.responses.with_raw_response.create(model=MODEL, input=f"start {tag}")
    parsed = first.parse()
    nxt = client.responses.with_raw_response.create(model=MODEL, input="and then?",
                                                    previous_response_id=parsed.id)
    chained = gw.wait_request(nxt.headers["x-request-id"])
    assert chained["thread_source"] == "response_chain", chained


def test_threads_auto_false_turns_inference_off(kvgate_process_class, kvgate_bin, sim, tmp_path):
    cls = with_config_tail(kvgate_process_class, "threads: {auto: false}\n")
    kg = cls(kvgate_bin, tmp_path / "auto-off", sim.port).start()
    try:
        gw = kg.gateway()
        ids = run_tool_loop(gw.client(), uuid.uuid4().hex[:8], 3)
        records = [gw.wait_request(i) for i in ids]
        assert all(r["thread_id"] == "" for r in records), [r["thread_id"] for r in records]
        assert all(r["thread_source"] is None for r in records)
    finally:
        kg.kill()


def test_threads_auto_must_be_a_boolean(kvgate_process_class, kvgate_bin, sim, tmp_path):
    cls = with_config_tail(kvgate_process_class, "threads: {auto: sometimes}\n")
    kg = cls(kvgate_bin, tmp_path / "auto-bad", sim.port)
    try:
        kg.start(timeout=10)
        raise AssertionError("kvgate started with threads.auto: sometimes")
    except Exception as e:  # noqa: BLE001 - the start must fail, naming the key
        assert "threads.auto" in (str(e) + kg.stderr_tail()), kg.stderr_tail()
    finally:
        kg.kill()
