"""Structured output and tool calling through `loom serve` with the official openai client: replies
constrained by JSON schemas validate (jsonschema, the reference validator), tool calls round-trip
(call, tool result, final answer) on SmolLM2 and Gemma 3, streamed and not, and hostile schemas,
grammars and tool definitions get 4xx while the server keeps serving."""
import concurrent.futures
import json
import random

import jsonschema
import openai
import pytest
import requests

from conftest import ROOT, LoomServer, model_path


@pytest.fixture(scope="module")
def smol(loom_bin):
    with LoomServer(loom_bin, model_path("smollm2"), "--parallel", "4", "-c", "4096") as s:
        yield s


@pytest.fixture(scope="module")
def gemma(loom_bin):
    with LoomServer(loom_bin, model_path("gemma3"), "--parallel", "2", "-c", "2048") as s:
        yield s


@pytest.fixture(scope="module")
def smol_hermes(loom_bin):
    """SmolLM2 with a ChatML template that has Hermes-style tool calls (llama-server's
    --chat-template-file), for the native path: tools rendered by the template, <tool_call> parsed."""
    with LoomServer(loom_bin, model_path("smollm2"), "--parallel", "2", "-c", "2048", "--chat-template-file",
                    ROOT / "tests" / "py" / "templates" / "tools_hermes.jinja") as s:
        yield s


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def still_serving(server):
    r = requests.post(server.url + "/v1/chat/completions", timeout=60,
                      json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    assert r.status_code == 200, r.text


# ---- structured output -------------------------------------------------------------------------

def leaf(rng):
    kind = rng.choice(["string", "integer", "number", "boolean", "enum", "array", "null_or_int"])
    if kind == "string":
        return {"type": "string", "minLength": rng.choice([0, 1]), "maxLength": rng.randint(3, 12)}
    if kind == "integer":
        lo = rng.randint(-500, 500)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.choice([0, 1, 9, 99, 5000])}
    if kind == "number":
        lo = rng.choice([-10, -1.5, 0, 0.5, 3])
        return {"type": "number", "minimum": lo, "exclusiveMaximum": lo + rng.choice([1.5, 2, 40])}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", "cyan", 7, None, True], rng.randint(1, 4))}
    if kind == "null_or_int":
        return {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 0, "maximum": 9}]}
    items = {"type": "string", "maxLength": 6} if rng.random() < 0.5 else {"type": "integer", "minimum": 0, "maximum": 99}
    lo = rng.randint(0, 2)
    return {"type": "array", "items": items, "minItems": lo, "maxItems": lo + rng.randint(0, 2)}


def schema_for(rng, depth=0):
    names = rng.sample(["name", "age", "city", "score", "tags", "ok", "kind", "size", "note"], rng.randint(1, 3))
    props = {}
    for n in names:
        props[n] = schema_for(rng, depth + 1) if depth == 0 and rng.random() < 0.3 else leaf(rng)
    required = [n for n in names if rng.random() < 0.7] or names[:1]
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def test_fifty_generated_schemas_all_validate(smol):
    rng = random.Random(1234)
    schemas = [schema_for(rng) for _ in range(50)]
    c = client(smol)

    def ask(s):
        r = c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Describe a person as JSON."}], temperature=0,
            max_tokens=160, response_format={"type": "json_schema", "json_schema": {"name": "reply", "schema": s}})
        return r.choices[0]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        choices = list(pool.map(ask, schemas))
    for s, ch in zip(schemas, choices):
        assert ch.finish_reason == "stop", (s, ch.message.content)
        value = json.loads(ch.message.content)
        jsonschema.validate(value, s)
        # Properties come out in the schema's order.
        assert list(value) == [k for k in s["properties"] if k in value]


def test_json_object_grammar_and_streaming(smol):
    c = client(smol)
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "A cat as JSON"}], temperature=0,
                                  max_tokens=80, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].message.content.startswith("{")
    # llama-server's fields: a GBNF grammar, and a top-level json_schema; streamed as well.
    r = requests.post(smol.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "Is the sky blue?"}], "temperature": 0, "max_tokens": 5,
        "grammar": 'root ::= ("yes" | "no") "."'})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] in ("yes.", "no.")
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 7}}, "required": ["n"]}
    stream = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Pick a number"}],
                                       temperature=0.7, seed=5, max_tokens=30, stream=True,
                                       extra_body={"json_schema": schema})
    text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    jsonschema.validate(json.loads(text), schema)


def deep(n):
    s = {"type": "integer"}
    for _ in range(n):
        s = {"type": "array", "items": s}
    return s


def rf(schema):
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current temperature of a city in degrees Celsius",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                   "required": ["city"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                    "format": {"enum": ["12h", "24h"]}},
                   "required": ["city", "format"]}}}

HOSTILE = [
    ("huge schema", {"response_format": rf({"type": "object", "properties": {f"p{i}": {"type": "integer"}
                                                                             for i in range(3000)}})}),
    ("deeply nested schema", {"response_format": rf(deep(100))}),
    ("recursive $ref without input", {"response_format": rf({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})}),
    ("contradictory bounds", {"response_format": rf({"type": "integer", "minimum": 9, "maximum": 2})}),
    ("contradictory lengths", {"response_format": rf({"type": "string", "minLength": 9, "maxLength": 2})}),
    ("required but forbidden", {"response_format": rf({"type": "object", "required": ["x"],
                                                       "additionalProperties": False})}),
    ("empty enum", {"response_format": rf({"enum": []})}),
    ("huge enum", {"response_format": rf({"enum": list(range(5000))})}),
    ("unsupported keyword", {"response_format": rf({"type": "string", "pattern": "^a+$"})}),
    ("remote $ref", {"response_format": rf({"$ref": "http://example.com/schema.json"})}),
    ("schema is a number", {"response_format": rf(5)}),
    ("json_schema without schema", {"response_format": {"type": "json_schema"}}),
    ("deep anyOf", {"response_format": rf(json.loads('{"anyOf":[' * 60 + '{"type":"null"}' + ']}' * 60))}),
    ("left-recursive grammar", {"grammar": 'root ::= root "a" | "b"'}),
    ("grammar with an undefined rule", {"grammar": "root ::= x"}),
    ("grammar is not a string", {"grammar": ["root"]}),
    ("grammar and a schema", {"grammar": 'root ::= "a"', "json_schema": {"type": "string"}}),
    ("tool parameters not an object", {"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}),
    ("tool parameters unsupported", {"tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}}}]}),
    ("tools not an array", {"tools": {"type": "function"}}),
    ("tool without a function", {"tools": [{"type": "function"}]}),
    ("duplicate tool names", {"tools": [WEATHER, WEATHER]}),
    ("too many tools", {"tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(65)]}),
    ("tool_choice names an unknown tool", {"tools": [WEATHER], "tool_choice": {"type": "function",
                                                                             "function": {"name": "nope"}}}),
    ("tool_choice required without tools", {"tool_choice": "required"}),
    ("tool_choice of a bad kind", {"tools": [WEATHER], "tool_choice": "always"}),
    ("tools with a response format", {"tools": [WEATHER], "response_format": {"type": "json_object"}}),
    ("malformed tool_calls in history", {"messages": [{"role": "user", "content": "Hi"},
                                                      {"role": "assistant", "tool_calls": "x"}]}),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_structured_requests(smol, case):
    name, fields = case
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, **fields}
    r = requests.post(smol.url + "/v1/chat/completions", json=body, timeout=60)
    assert 400 <= r.status_code < 500, f"{name}: {r.status_code} {r.text[:300]}"
    err = r.json()["error"]
    assert err["message"] and err["param"], err
    still_serving(smol)


def test_truncated_tools_body_is_refused(smol):
    body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "tools": [WEATHER]})[:-20]
    r = requests.post(smol.url + "/v1/chat/completions", data=body, timeout=60,
                      headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    still_serving(smol)


# ---- tool calling ----------------------------------------------------------------------------

def call_of(server, messages, stream, max_tokens=60, **kw):
    """One request; returns (finish_reason, content, [(id, name, arguments)])."""
    c = client(server)
    r = c.chat.completions.create(model="m", messages=messages, temperature=0, max_tokens=max_tokens, stream=stream,
                                  **kw)
    if not stream:
        m = r.choices[0].message
        calls = [(t.id, t.function.name, t.function.arguments) for t in (m.tool_calls or [])]
        return r.choices[0].finish_reason, m.content, calls
    finish, content, calls = None, "", []
    for ch in r:
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content += d.content or ""
        for t in d.tool_calls or []:
            assert t.index == len(calls) and t.type == "function"
            calls.append((t.id, t.function.name, t.function.arguments))
        finish = ch.choices[0].finish_reason or finish
    return finish, content or None, calls


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_tool_round_trip(smol, gemma, which, stream):
    server = smol if which == "smollm2" else gemma
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    finish, content, calls = call_of(server, question, stream, tools=[WEATHER, TIME], tool_choice="required")
    assert finish == "tool_calls" and len(calls) == 1, (finish, content, calls)
    call_id, name, arguments = calls[0]
    assert call_id and name in ("get_weather", "get_time")
    tool = WEATHER if name == "get_weather" else TIME
    jsonschema.validate(json.loads(arguments), tool["function"]["parameters"])
    # The result goes back as a tool message after the assistant's call; the final answer is text.
    history = question + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps({"temperature_c": 21})}]
    finish, content, calls = call_of(server, history, stream, max_tokens=30, tools=[WEATHER, TIME], tool_choice="none")
    assert finish in ("stop", "length") and not calls and content, (finish, content)
    assert "tool_calls" not in content
    if which == "smollm2":
        assert "21" in content, content  # the tool's result reached the model


def test_named_tool_choice_and_auto(smol):
    q = [{"role": "user", "content": "What time is it in Tokyo?"}]
    finish, _, calls = call_of(smol, q, False, tools=[WEATHER, TIME],
                               tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert finish == "tool_calls" and [c[1] for c in calls] == ["get_time"]
    jsonschema.validate(json.loads(calls[0][2]), TIME["function"]["parameters"])
    # auto: either a valid call or a text answer, never the raw JSON of the generic format.
    finish, content, calls = call_of(smol, q, False, tools=[WEATHER, TIME])
    if calls:
        assert finish == "tool_calls"
        for _, name, args in calls:
            jsonschema.validate(json.loads(args), (TIME if name == "get_time" else WEATHER)["function"]["parameters"])
    else:
        assert finish == "stop" and content and not content.lstrip().startswith('{"')
    # parallel_tool_calls true lets one reply carry several calls (up to 8).
    finish, _, calls = call_of(smol, [{"role": "user", "content": "Weather in Paris and in Rome?"}], False,
                               max_tokens=200, tools=[WEATHER], tool_choice="required", parallel_tool_calls=True)
    assert finish == "tool_calls" and 1 <= len(calls) <= 8 and len({c[0] for c in calls}) == len(calls)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_native_hermes_round_trip(smol_hermes, stream):
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    finish, content, calls = call_of(smol_hermes, question, stream, tools=[WEATHER], tool_choice="required")
    assert finish == "tool_calls" and len(calls) == 1 and calls[0][1] == "get_weather", (finish, content, calls)
    jsonschema.validate(json.loads(calls[0][2]), WEATHER["function"]["parameters"])
    history = question + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": calls[0][0], "type": "function", "function": {"name": "get_weather",
                                                                               "arguments": calls[0][2]}}]},
        {"role": "tool", "tool_call_id": calls[0][0], "content": json.dumps({"temperature_c": 21})}]
    # auto on the native path: the model writes freely, here a text answer using the result.
    finish, content, calls = call_of(smol_hermes, history, stream, max_tokens=30, tools=[WEATHER])
    assert finish == "stop" and not calls and "21" in content, (finish, content, calls)


def test_chat_template_file_must_exist(loom_bin):
    import subprocess
    r = subprocess.run([str(loom_bin), "serve", "-m", str(model_path("smollm2")), "--chat-template-file",
                        "/nonexistent/t.jinja"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "chat-template-file" in r.stderr
