"""Why the cache missed, through the gateway: each cause on the turn where it happened."""
import random
import time

import pytest

from gwctl import ONE_SECOND_OPENAI_TTL, with_config_tail


@pytest.fixture
def short_ttl_gw(kvgate_bin, sim, tmp_path, kvgate_process_class):
    # The usual kvgate, with OpenAI's idle TTL at 1 s.
    ShortTtlKvgate = with_config_tail(kvgate_process_class, ONE_SECOND_OPENAI_TTL)
    kg = ShortTtlKvgate(kvgate_bin, tmp_path / "ttl", sim.port, name="ttl").start()
    sim.client.config(openai_ttl=1)
    yield kg.gateway()
    sim.client.config(openai_ttl=300)
    assert kg.terminate() == 0


def long_text(seed, n=1300):
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(10**6)}" for _ in range(n))


def ask(client, model, messages, thread):
    return client.chat.completions.create(model=model, messages=messages, max_tokens=8,
                                          extra_body={"thread_identifier": thread})


def test_causes_on_the_right_turns(short_ttl_gw):
    gw = short_ttl_gw
    client = gw.client()
    system = {"role": "system", "content": long_text(1)}
    msgs = [system, {"role": "user", "content": "first question"}]
    ask(client, "gpt-4o-mini", msgs, "diag-1")                         # turn 0: first, nothing to say
    msgs = msgs + [{"role": "user", "content": "second question"}]
    ask(client, "gpt-4o-mini", msgs, "diag-1")                         # turn 1: reads as expected
    time.sleep(1.5)                                                   # past the (1 s) idle TTL
    msgs = msgs + [{"role": "user", "content": "third question"}]
    ask(client, "gpt-4o-mini", msgs, "diag-1")                         # turn 2: expired
    edited = [{"role": "system", "content": "EDITED " + system["content"]}] + msgs[1:]
    ask(client, "gpt-4o-mini", edited, "diag-1")                       # turn 3: prompt_changed at 0
    ask(client, "deepseek-chat", edited + [{"role": "user", "content": "q5"}], "diag-1")  # switch
    turns = gw.wait_turns("diag-1", 5)
    causes = [(t["cache_diagnosis"] or {}).get("cause") for t in turns]
    assert causes == [None, None, "expired", "prompt_changed", "model_switch"], causes
    changed = turns[3]["cache_diagnosis"]
    assert changed["message_index"] == 0 and changed["char_offset"] < 64, changed
    assert turns[4]["cache_diagnosis"]["previous_model"] == "gpt-4o-mini"

    short = [{"role": "user", "content": "hello there"}]
    ask(client, "gpt-4o-mini", short, "diag-2")
    ask(client, "gpt-4o-mini", short + [{"role": "user", "content": "again"}], "diag-2")
    turns = gw.wait_turns("diag-2", 2)
    assert turns[1]["cache_diagnosis"]["cause"] == "below_minimum", turns[1]


def test_diagnosis_continues_across_a_restart(kvgate_bin, sim, tmp_path, kvgate_process_class):
    """The last turn of a thread is stored with its prompt fingerprint; a restarted kvgate reads it
    back, so the thread's first turn after the restart is still compared with the one before."""
    kg = kvgate_process_class(kvgate_bin, tmp_path / "restart", sim.port, name="restart").start()
    system = {"role": "system", "content": long_text(7)}
    msgs = [system, {"role": "user", "content": "before the restart"}]
    ask(kg.gateway().client(), "gpt-4o-mini", msgs, "diag-restart")
    ask(kg.gateway().client(), "gpt-4o-mini", [{"role": "user", "content": "no thread"}],
        "")  # an empty thread id: an automatic thread, remembered too
    kg.gateway().wait_turns("diag-restart", 1)
    assert kg.terminate() == 0

    kg.start()
    assert "restored the last turn of 2 threads for cache diagnosis" in kg.stderr_tail()
    gw = kg.gateway()
    edited = [{"role": "system", "content": "EDITED " + system["content"]}] + msgs[1:] + \
        [{"role": "user", "content": "after the restart"}]
    ask(gw.client(), "gpt-4o-mini", edited, "diag-restart")
    turns = gw.wait_turns("diag-restart", 2)
    diagnosis = turns[1]["cache_diagnosis"]
    assert diagnosis and diagnosis["cause"] == "prompt_changed", turns[1]
    assert diagnosis["message_index"] == 0 and diagnosis["char_offset"] < 64, diagnosis
    assert kg.terminate() == 0
