"""What changed in a prompt, through the gateway: the changed element's role and number, the text
around the change (secrets redacted), a timestamp that re-writes the cache on every turn named as a
volatile prefix with the dollars it lost, the overview's losses by cause, and excerpts turned off."""
import random

import pytest

# The simulator's OpenAI key, which the shared kvgate is configured with (conftest.py's
# SIM_OPENAI_KEY: importing it from conftest is ambiguous when tests/sim is collected too).
SIM_OPENAI_KEY = "sk-openai-sim"
from gwctl import with_config_tail


def long_text(seed, n=1300):
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(10**6)}" for _ in range(n))


def system_prompt(turn, tail):
    # The timestamp sits early, as it does in real agents; the provider key a careless template
    # pasted in sits beside it and must never be kept.
    return (f"You are a careful assistant (key {SIM_OPENAI_KEY}). "
            f"Current time: 2026-03-01T09:15:{turn:02d}Z. {tail}")


def run_thread(client, thread, turns=5):
    tail = long_text(len(thread))
    history = []
    for turn in range(turns):
        history.append({"role": "user", "content": f"question {turn}"})
        messages = [{"role": "system", "content": system_prompt(turn, tail)}] + history
        answer = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                                max_tokens=8,
                                                extra_headers={"X-Thread-Id": thread})
        history.append({"role": "assistant", "content": answer.choices[0].message.content})


def test_a_timestamp_in_the_system_prompt_is_shown_and_named_volatile(gw):
    thread = "excerpt-volatile-1"
    run_thread(gw.client(), thread)
    turns = gw.wait_turns(thread, 5)
    diagnoses = [t["cache_diagnosis"] for t in turns]
    assert diagnoses[0] is None
    for d in diagnoses[1:]:
        assert d and d["cause"] == "prompt_changed", diagnoses
        assert d["role"] == "system" and d["message_number"] == 1, d
        before, after = d["excerpt"]["before"], d["excerpt"]["after"]
        assert "Current time: 2026-03-01T09:15:" in before and "Current time:" in after, d
        assert before != after and len(before) <= 130 and len(after) <= 130, d
        assert SIM_OPENAI_KEY not in before + after + d["detail"], d
        assert "the system prompt (message 1) change" in d["detail"], d
    last = diagnoses[4]
    prev_second, this_second = 3, 4
    assert f"09:15:{prev_second:02d}Z" in last["excerpt"]["before"], last
    assert f"09:15:{this_second:02d}Z" in last["excerpt"]["after"], last
    # Turns 2 and 3 changed at the same place: no run yet; turn 3 on is the third in a row.
    assert "volatile" not in diagnoses[1] and "volatile" not in diagnoses[2], diagnoses
    assert diagnoses[3]["volatile"] is True and diagnoses[3]["turns_changed"] == 3, diagnoses[3]
    assert last["volatile"] is True and last["turns_changed"] == 4, last
    # The dollars lost are the turns' own missed costs, summed.
    missed = [t["cost_pico_usd"]["missed"] for t in turns[1:]]
    assert all(m > 0 for m in missed), [t["cost_pico_usd"] for t in turns]
    assert abs(last["lost_usd"] - sum(missed) / 1e12) < 1e-9, (last, missed)
    assert "on every turn" in last["detail"] and "lost over 4 turns" in last["detail"], last
    assert "move it after the cached part" in last["detail"], last

    # The overview adds the losses up by cause and lists the thread's volatile prefix.
    st, _, overview = gw.admin_get("/api/overview?window=1h")
    assert st == 200, overview
    changed = [c for c in overview["lost_by_cause"] if c["cause"] == "prompt_changed"]
    assert changed and changed[0]["requests"] >= 4, overview["lost_by_cause"]
    assert changed[0]["cost_missed_usd"] >= sum(missed) / 1e12 - 1e-9, overview["lost_by_cause"]
    found = [v for v in overview["volatile_prefixes"] if v["thread_id"] == thread]
    assert len(found) == 1, overview["volatile_prefixes"]
    entry = found[0]
    assert entry["model"] == "gpt-4o-mini" and entry["role"] == "system", entry
    assert entry["message_number"] == 1 and entry["turns_changed"] == 4, entry
    assert entry["char_offset"] == last["char_offset"], entry
    assert abs(entry["cost_missed_usd"] - last["lost_usd"]) < 1e-9, entry


def test_excerpts_off_keep_no_text(kvgate_bin, sim, tmp_path, kvgate_process_class):
    NoExcerpts = with_config_tail(kvgate_process_class, "diagnosis: {excerpts: false}\n")
    kg = NoExcerpts(kvgate_bin, tmp_path / "noexcerpts", sim.port, name="noexcerpts").start()
    try:
        gw = kg.gateway()
        thread = "excerpt-off-1"
        run_thread(gw.client(), thread, turns=4)
        turns = gw.wait_turns(thread, 4)
        for t in turns[1:]:
            d = t["cache_diagnosis"]
            assert d and d["cause"] == "prompt_changed", turns
            assert d["role"] == "system" and d["message_number"] == 1, d
            assert "excerpt" not in d, d
            assert "09:15" not in str(d), d
        # Volatile detection needs no text.
        assert turns[3]["cache_diagnosis"]["volatile"] is True, turns[3]
    finally:
        assert kg.terminate() == 0


def test_a_bad_diagnosis_section_is_a_clear_error(kvgate_bin, sim, tmp_path, kvgate_process_class):
    Bad = with_config_tail(kvgate_process_class, "diagnosis: {excerpt: false}\n")
    kg = Bad(kvgate_bin, tmp_path / "bad", sim.port, name="bad")
    with pytest.raises(RuntimeError):
        kg.start(timeout=10)
    assert 'diagnosis: unknown key "excerpt"' in kg.stderr_tail(), kg.stderr_tail()
