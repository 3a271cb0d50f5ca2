"""n > 1 on the built-in engine through the gateway, with the OpenAI SDK: the choices are forked
from one prefilled prompt, so usage counts the prompt once and the completion tokens of every
choice; streaming chunks carry each choice's index; seeded choices repeat; a schema constrains
every choice; an n the engine cannot run is a 400 naming the field."""
import json

import openai
import pytest

from gwctl import ADMIN_TOKEN

STORY = [{"role": "user", "content": "Tell me a short story about a lighthouse keeper."}]


def engine_state(gw):
    st, _, body = gw.request("GET", "/api/engine", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert st == 200, body
    return body["engines"][0]


def test_choices_count_the_prompt_once_and_every_choices_tokens(local_gw):
    client = local_gw.client(timeout=300)
    forks_before = engine_state(local_gw)["forks"]
    r = client.chat.completions.create(model="smollm2", messages=STORY, max_tokens=12, n=3,
                                       temperature=1.0, seed=42, logprobs=True,
                                       extra_body={"thread_identifier": "choices-1"})
    assert [c.index for c in r.choices] == [0, 1, 2]
    texts = [c.message.content for c in r.choices]
    assert len(set(texts)) >= 2, texts  # seed + index each: the choices differ
    # Each choice's logprobs list its tokens: the completion is their sum, the prompt counted once.
    per_choice = [len(c.logprobs.content) for c in r.choices]
    assert all(n > 0 for n in per_choice)
    single = client.chat.completions.create(model="smollm2", messages=STORY, max_tokens=1)
    assert r.usage.prompt_tokens == single.usage.prompt_tokens
    assert r.usage.completion_tokens == sum(per_choice)
    (turn,) = local_gw.wait_turns("choices-1", 1)
    u = turn["usage"]
    assert u["output"] == r.usage.completion_tokens
    assert u["cache_read"] + u["cache_write_no_ttl"] + u["uncached"] == r.usage.prompt_tokens
    assert engine_state(local_gw)["forks"] == forks_before + 2

    again = client.chat.completions.create(model="smollm2", messages=STORY, max_tokens=12, n=3,
                                           temperature=1.0, seed=42)
    assert [c.message.content for c in again.choices] == texts


def test_streamed_choices_carry_their_index_and_equal_the_whole_answer(local_gw):
    client = local_gw.client(timeout=300)
    kwargs = dict(model="smollm2", messages=STORY, max_tokens=10, n=2, temperature=0.8, seed=5)
    whole = client.chat.completions.create(**kwargs)
    texts, finishes, roles, usage = ["", ""], [None, None], [0, 0], None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                **kwargs):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.role:
                roles[c.index] += 1
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                assert finishes[c.index] is None, "two finish chunks for one choice"
                finishes[c.index] = c.finish_reason
    assert roles == [1, 1]
    assert texts == [c.message.content for c in whole.choices]
    assert finishes == [c.finish_reason for c in whole.choices]
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens == whole.usage.prompt_tokens


def test_a_schema_constrains_every_choice(local_gw):
    schema = {"type": "object", "additionalProperties": False, "required": ["answer"],
              "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}}}
    r = local_gw.client(timeout=300).chat.completions.create(
        model="smollm2", n=3, temperature=1.0, max_tokens=30,
        messages=[{"role": "user", "content": "Is the sea salty? Answer in JSON."}],
        response_format={"type": "json_schema",
                         "json_schema": {"name": "answer", "schema": schema, "strict": True}})
    assert len(r.choices) == 3
    for c in r.choices:
        assert c.finish_reason == "stop"
        assert json.loads(c.message.content)["answer"] in ("yes", "no")


@pytest.mark.parametrize("n", [0, 129, "2", 2.5])
def test_an_n_the_engine_cannot_run_is_a_400_naming_n(local_gw, n):
    with pytest.raises(openai.BadRequestError) as exc:
        local_gw.client(timeout=60).chat.completions.create(
            model="smollm2", messages=STORY, max_tokens=2, extra_body={"n": n})
    assert exc.value.body["param"] == "n", exc.value.body
    assert "n must be an integer between 1 and" in exc.value.body["message"]
