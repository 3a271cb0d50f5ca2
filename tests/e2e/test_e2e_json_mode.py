"""response_format on the built-in engine, through kvgate with the OpenAI SDK: a pydantic model
through `beta.chat.completions.parse` (streaming and not), json_object, text as a no-op, an
invalid schema as a 400 naming the field, and the prefix cache still hit under a constraint."""
import json
from typing import Annotated, Literal, Optional

import openai
import pytest
from pydantic import BaseModel, Field


class Pet(BaseModel):
    kind: str = Field(max_length=20)
    legs: int


class Person(BaseModel):
    name: str = Field(max_length=40)
    age: int
    color: Literal["red", "green", "blue"]
    pet: Optional[Pet]
    tags: list[Annotated[str, Field(max_length=20)]] = Field(max_length=3)


ASK = [{"role": "system", "content": "You answer with JSON only."},
       {"role": "user", "content": "Invent a person: name, age, favourite color, pet and tags."}]


def test_parse_returns_the_pydantic_model(local_gw):
    client = local_gw.client(timeout=300)
    r = client.beta.chat.completions.parse(model="smollm2", messages=ASK, response_format=Person,
                                           max_tokens=300, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    assert isinstance(choice.message.parsed, Person), choice.message.content
    # The same JSON as text, and nothing around it.
    assert Person.model_validate_json(choice.message.content) == choice.message.parsed


def test_streamed_parse_returns_the_pydantic_model(local_gw):
    client = local_gw.client(timeout=300)
    with client.beta.chat.completions.stream(model="smollm2", messages=ASK, response_format=Person,
                                             max_tokens=300, temperature=0.8, seed=11) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].finish_reason == "stop", final.choices[0].message.content
    assert isinstance(final.choices[0].message.parsed, Person)


@pytest.mark.parametrize("stream", [False, True])
def test_json_object_is_an_object(local_gw, stream):
    client = local_gw.client(timeout=300)
    # json_object bounds no string: a prompt the model answers briefly (with another it may run
    # on inside one string until max_tokens, finish_reason "length", as with OpenAI).
    kwargs = dict(model="smollm2", max_tokens=300, temperature=0,
                  response_format={"type": "json_object"},
                  messages=[{"role": "user", "content": "Give me a JSON object describing a cat."}])
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **kwargs))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
    else:
        choice = client.chat.completions.create(**kwargs).choices[0]
        text, finish = choice.message.content, choice.finish_reason
    assert finish == "stop", text
    assert isinstance(json.loads(text), dict), text


def test_text_format_changes_nothing(local_gw):
    client = local_gw.client(timeout=300)
    kwargs = dict(model="smollm2", max_tokens=8, temperature=0,
                  messages=[{"role": "user", "content": "Say hello."}])
    plain = client.chat.completions.create(**kwargs).choices[0].message.content
    text = client.chat.completions.create(response_format={"type": "text"}, **kwargs)
    assert text.choices[0].message.content == plain


@pytest.mark.parametrize("schema, param", [
    ({"type": "object", "properties": {"age": {"type": "int"}}},
     "response_format.json_schema.schema.properties.age.type"),
    ({"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-z]+$"}}},
     "response_format.json_schema.schema.properties.id.pattern"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
     "response_format.json_schema.schema.required[0]"),
])
def test_invalid_schema_is_a_400_naming_the_field(local_gw, schema, param):
    with pytest.raises(openai.BadRequestError) as exc:
        local_gw.client(timeout=60).chat.completions.create(
            model="smollm2", max_tokens=4, messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "thing", "schema": schema, "strict": True}})
    assert exc.value.body["param"] == param, exc.value.body
    assert param in exc.value.body["message"], exc.value.body
    assert exc.value.code == "invalid_json_schema", exc.value.body


@pytest.mark.parametrize("fmt, param", [
    ({"type": "yaml"}, "response_format.type"),
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"schema": {}}}, "response_format.json_schema.name"),
])
def test_malformed_response_format_is_a_400(local_gw, fmt, param):
    with pytest.raises(openai.BadRequestError) as exc:
        local_gw.client(timeout=60).chat.completions.create(
            model="smollm2", max_tokens=4, messages=[{"role": "user", "content": "hi"}],
            response_format=fmt)
    assert exc.value.body["param"] == param, exc.value.body


def test_prefix_cache_still_hits_under_a_constraint(local_gw):
    """The constraint only masks sampling: the prompt's blocks are cached and reused as always."""
    client = local_gw.client(timeout=300)
    messages = [{"role": "system", "content": "You are a terse assistant. " * 20},
                {"role": "user", "content": "Give a JSON object with one key."}]
    usages = [client.chat.completions.create(model="smollm2", messages=messages, max_tokens=40,
                                             temperature=0, response_format={"type": "json_object"}
                                             ).usage for _ in range(2)]
    assert usages[0].prompt_tokens_details.cached_tokens == 0
    assert usages[1].prompt_tokens_details.cached_tokens >= (usages[1].prompt_tokens // 16) * 16 - 16
    assert usages[1].prompt_tokens_details.cached_tokens > 0
