"""Malformed and hostile requests against `loom serve`: each gets the right 4xx in OpenAI's error
shape, and the server keeps serving (a real completion works after every one of them)."""
import json
import re
import socket

import pytest
import requests

from conftest import LoomServer, model_path

KEY = "sekrit-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


@pytest.fixture(scope="module")
def server(loom_bin):
    with LoomServer(loom_bin, model_path("smollm2"), "--parallel", "2", "-c", "256", "--max-body", "65536",
                    "--api-key", KEY) as s:
        yield s


def msgs(content="Hi"):
    return [{"role": "user", "content": content}]


def chat(**kw):
    return json.dumps({"messages": msgs(), "max_tokens": 4, **kw})


# (name, method, path, body (str/bytes/None), headers, expected status, expected error param or None)
CASES = [
    ("malformed json", "POST", CHAT, '{"messages": [', AUTH, 400, None),
    ("empty body", "POST", CHAT, "", AUTH, 400, None),
    ("body is an array", "POST", CHAT, "[1, 2]", AUTH, 400, None),
    ("body is a string", "POST", CHAT, '"hello"', AUTH, 400, None),
    ("body is null", "POST", CHAT, "null", AUTH, 400, None),
    ("trailing garbage", "POST", CHAT, chat() + "}}", AUTH, 400, None),
    ("invalid utf-8", "POST", CHAT, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', AUTH, 400, None),
    ("nul bytes", "POST", CHAT, b"\x00\x00\x00", AUTH, 400, None),
    ("messages missing", "POST", CHAT, json.dumps({"max_tokens": 3}), AUTH, 400, "messages"),
    ("messages not an array", "POST", CHAT, json.dumps({"messages": "hi"}), AUTH, 400, "messages"),
    ("messages empty", "POST", CHAT, json.dumps({"messages": []}), AUTH, 400, "messages"),
    ("message not an object", "POST", CHAT, json.dumps({"messages": ["hi"]}), AUTH, 400, "messages[0]"),
    ("role missing", "POST", CHAT, json.dumps({"messages": [{"content": "hi"}]}), AUTH, 400, "messages[0].role"),
    ("role unknown", "POST", CHAT, json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}), AUTH, 400,
     "messages[0].role"),
    ("role is a number", "POST", CHAT, json.dumps({"messages": [{"role": 7, "content": "hi"}]}), AUTH, 400,
     "messages[0].role"),
    ("content is a number", "POST", CHAT, json.dumps({"messages": [{"role": "user", "content": 42}]}), AUTH, 400,
     "messages[0].content"),
    ("content image part", "POST", CHAT, json.dumps({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}), AUTH, 400, "messages[0].content"),
    ("user content null", "POST", CHAT, json.dumps({"messages": [{"role": "user", "content": None}]}), AUTH, 400,
     "messages[0].content"),
    ("temperature string", "POST", CHAT, chat(temperature="hot"), AUTH, 400, "temperature"),
    ("temperature negative", "POST", CHAT, chat(temperature=-1), AUTH, 400, "temperature"),
    ("temperature too high", "POST", CHAT, chat(temperature=5), AUTH, 400, "temperature"),
    ("top_p above 1", "POST", CHAT, chat(top_p=1.5), AUTH, 400, "top_p"),
    ("top_k negative", "POST", CHAT, chat(top_k=-3), AUTH, 400, "top_k"),
    ("min_p bool", "POST", CHAT, chat(min_p=True), AUTH, 400, "min_p"),
    ("max_tokens zero", "POST", CHAT, chat(max_tokens=0), AUTH, 400, "max_tokens"),
    ("max_tokens negative", "POST", CHAT, chat(max_tokens=-5), AUTH, 400, "max_tokens"),
    ("max_tokens string", "POST", CHAT, chat(max_tokens="10"), AUTH, 400, "max_tokens"),
    ("max_tokens fractional", "POST", CHAT, chat(max_tokens=2.5), AUTH, 400, "max_tokens"),
    ("n above the cap", "POST", CHAT, chat(n=9), AUTH, 400, "n"),
    ("n zero", "POST", CHAT, chat(n=0), AUTH, 400, "n"),
    ("stop is a number", "POST", CHAT, chat(stop=5), AUTH, 400, "stop"),
    ("five stop strings", "POST", CHAT, chat(stop=["a", "b", "c", "d", "e"]), AUTH, 400, "stop"),
    ("stop array with a number", "POST", CHAT, chat(stop=["a", 1]), AUTH, 400, "stop"),
    ("seed is a string", "POST", CHAT, chat(seed="abc"), AUTH, 400, "seed"),
    ("stream is a string", "POST", CHAT, chat(stream="yes"), AUTH, 400, "stream"),
    ("stream_options not an object", "POST", CHAT, chat(stream=True, stream_options=3), AUTH, 400, "stream_options"),
    ("presence_penalty too big", "POST", CHAT, chat(presence_penalty=3), AUTH, 400, "presence_penalty"),
    ("frequency_penalty string", "POST", CHAT, chat(frequency_penalty="x"), AUTH, 400, "frequency_penalty"),
    ("model is a number", "POST", CHAT, chat(model=3), AUTH, 400, "model"),
    ("tool with a bad name", "POST", CHAT, chat(tools=[{"type": "function", "function": {"name": "no spaces"}}]),
     AUTH, 400, "tools[0]"),
    ("legacy functions", "POST", CHAT, chat(functions=[{"name": "f"}]), AUTH, 400, "functions"),
    ("logprobs not a boolean", "POST", CHAT, chat(logprobs="yes"), AUTH, 400, "logprobs"),
    ("logit_bias id outside the vocabulary", "POST", CHAT, chat(logit_bias={"99999999": 5}), AUTH, 400, "logit_bias"),
    ("logit_bias value out of range", "POST", CHAT, chat(logit_bias={"1": -101}), AUTH, 400, "logit_bias"),
    ("logit_bias not an object", "POST", CHAT, chat(logit_bias=[3]), AUTH, 400, "logit_bias"),
    ("unknown response format", "POST", CHAT, chat(response_format={"type": "xml"}), AUTH, 400,
     "response_format"),
    ("schema with an unsupported keyword", "POST", CHAT,
     chat(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "string",
                                                                                       "pattern": "a+"}}}),
     AUTH, 400, "response_format"),
    ("prompt longer than the context", "POST", CHAT, json.dumps({"messages": msgs("hello " * 400)}), AUTH, 400,
     "messages"),
    ("completion prompt missing", "POST", COMP, json.dumps({"max_tokens": 3}), AUTH, 400, "prompt"),
    ("completion prompt is a number", "POST", COMP, json.dumps({"prompt": 12}), AUTH, 400, "prompt"),
    ("completion prompt token out of vocabulary", "POST", COMP, json.dumps({"prompt": [1, 2, 99999999]}), AUTH, 400,
     "prompt"),
    ("completion negative token", "POST", COMP, json.dumps({"prompt": [1, -2]}), AUTH, 400, "prompt"),
    ("completion seventeen prompts", "POST", COMP, json.dumps({"prompt": ["a"] * 17}), AUTH, 400, "prompt"),
    ("completion logprobs above the cap", "POST", COMP, json.dumps({"prompt": "a", "logprobs": 21}), AUTH, 400,
     "logprobs"),
    ("completion prompt too long", "POST", COMP, json.dumps({"prompt": list(range(1, 300))}), AUTH, 400, "prompt"),
    ("completion echo", "POST", COMP, json.dumps({"prompt": "a", "echo": True}), AUTH, 400, "echo"),
    ("deeply nested json", "POST", CHAT, "[" * 20000 + "]" * 20000, AUTH, 400, None),
    ("body over the limit", "POST", CHAT, json.dumps({"messages": msgs("x" * 70000)}), AUTH, 413, None),
    ("misspelt field is named", "POST", CHAT, chat(temprature=0.5), AUTH, 400, "temprature"),
    ("unknown completion field", "POST", COMP, json.dumps({"prompt": "a", "messages": []}), AUTH, 400, "messages"),
    ("top_logprobs without logprobs", "POST", CHAT, chat(top_logprobs=3), AUTH, 400, "top_logprobs"),
    ("top_logprobs above the cap", "POST", CHAT, chat(logprobs=True, top_logprobs=50), AUTH, 400, "top_logprobs"),
    ("missing api key", "POST", CHAT, chat(), {}, 401, None),
    ("wrong api key", "POST", CHAT, chat(), {"Authorization": "Bearer nope"}, 401, None),
    ("key without Bearer", "POST", CHAT, chat(), {"Authorization": KEY}, 401, None),
    ("models without key", "GET", "/v1/models", None, {}, 401, None),
    ("unknown endpoint", "POST", "/v1/images/generations", chat(), AUTH, 404, None),
    ("embeddings without an input", "POST", "/v1/embeddings", json.dumps({"model": "x"}), AUTH, 400, "input"),
    ("unknown path", "GET", "/etc/passwd", None, {}, 404, None),
    ("GET on a POST endpoint", "GET", CHAT, None, AUTH, 405, None),
    ("DELETE on a POST endpoint", "DELETE", COMP, None, AUTH, 405, None),
]


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_bearer_scheme_is_case_insensitive(server, scheme):
    r = requests.get(server.url + "/v1/models", headers={"Authorization": f"{scheme} {KEY}"}, timeout=30)
    assert r.status_code == 200, r.text
    # The key itself is not.
    r = requests.get(server.url + "/v1/models", headers={"Authorization": f"{scheme} {KEY.upper()}"}, timeout=30)
    assert r.status_code == 401


def test_log_names_the_peer_of_closed_connections(server):
    raw(server, b"GARBAGE\r\n\r\n")
    raw(server, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    import time
    time.sleep(0.2)
    lines = server.log().splitlines()
    assert not any(":-1 " in line for line in lines), [l for l in lines if ":-1" in l][:3]
    assert any(re.match(r"loom serve: 127\.0\.0\.1:\d+ \"GET /health\" 200", l) for l in lines)


def check_still_serving(server):
    r = requests.post(server.url + COMP, json={"prompt": "Hello", "max_tokens": 2, "temperature": 0}, headers=AUTH,
                      timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 2


def test_there_are_at_least_30_cases():
    assert len(CASES) >= 30 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hostile_request(server, case):
    name, method, path, body, headers, status, param = case
    h = dict(headers)
    if body is not None:
        h.setdefault("Content-Type", "application/json")
    r = requests.request(method, server.url + path, data=body, headers=h, timeout=60)
    assert r.status_code == status, f"{name}: {r.status_code} {r.text[:300]}"
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]
    if param is not None:
        assert err["param"] == param, err
    if name.startswith("prompt longer") or name == "completion prompt too long":
        assert err["code"] == "context_length_exceeded"
    check_still_serving(server)


def raw(server, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


@pytest.mark.parametrize("data", [
    b"GARBAGE\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mess",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\nabc\r\n",
], ids=["garbage request line", "truncated body", "negative length", "huge request line", "bad chunked encoding"])
def test_broken_http_is_refused_and_the_server_survives(server, data):
    out = raw(server, data)
    assert out == b"" or out.startswith(b"HTTP/1.1 4"), out[:200]
    check_still_serving(server)


def test_abrupt_disconnects_during_requests(server):
    body = json.dumps({"messages": msgs("Tell me a story"), "max_tokens": 50, "stream": True}).encode()
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                      b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                      b"\r\n\r\n" + body)
            s.recv(100)
    check_still_serving(server)


def test_random_mutations_of_valid_requests(server):
    """Valid bodies with fields swapped for random JSON values or bytes flipped: every answer is
    200 or a 4xx in OpenAI's error shape, never a crash or a 5xx."""
    import random
    rng = random.Random(1234)
    values = [None, True, False, 0, -1, 1.5, 1e308, -1e308, 2 ** 63, -(2 ** 63) - 1, "", "x", "\u0000", "😀" * 3,
              [], [1], ["a"], {}, {"a": 1}, [[[]]], "A" * 3000]
    base = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0.5, "top_p": 0.9,
            "top_k": 5, "min_p": 0.1, "seed": 3, "stop": ["x"], "stream": False, "n": 1,
            "presence_penalty": 0.1, "frequency_penalty": 0.1}
    statuses = {}
    for i in range(150):
        body = json.loads(json.dumps(base))
        for _ in range(rng.randint(1, 3)):
            key = rng.choice([k for k in body if k != "max_tokens"] + ["messages.0.role", "messages.0.content",
                                                                        "extra_" + str(i)])
            if key.startswith("messages.0."):
                if isinstance(body.get("messages"), list) and body["messages"] and isinstance(body["messages"][0], dict):
                    body["messages"][0][key.split(".")[2]] = rng.choice(values)
            elif rng.random() < 0.2:
                body.pop(key, None)
            else:
                body[key] = rng.choice(values)
        data = json.dumps(body).encode()
        if rng.random() < 0.3:  # flip a few bytes too
            b = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            data = bytes(b)
        r = requests.post(server.url + CHAT, data=data, headers={**AUTH, "Content-Type": "application/json"},
                          timeout=120)
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        assert r.status_code in (200, 400), (r.status_code, data[:300], r.text[:300])
        if r.status_code == 400:
            assert r.json()["error"]["message"]
        elif body.get("stream") is not True:
            assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    assert statuses.get(400, 0) > 50 and statuses.get(200, 0) > 5, statuses
    check_still_serving(server)
