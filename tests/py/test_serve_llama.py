"""llama-server's routes on `loom serve`: POST /tokenize and /detokenize against llama.cpp's own
tokenizer (llama-cpp-python), GET /props and /slots, hostile bodies of each answered with 4xx
while the server keeps serving, and the flags a launcher passes (--ctx-size, -np, --jinja,
--metrics, -ngl) accepted, unknown ones refused with their name."""
import json
import threading
import time
import urllib.error
import urllib.request

import llama_cpp
import pytest

from conftest import LoomServer, model_path, run_loom

TEXTS = ["Hello world", "  leading spaces and\ttabs\n", "Ünïcödé — 日本語のテキスト 🙂",
         "<|im_start|>user\nHi<|im_end|>", "x" * 3000, ""]


@pytest.fixture(scope="module")
def server(loom_bin):
    # The flags a llama-server launcher passes, as it spells them.
    with LoomServer(loom_bin, model_path("smollm2"), "--ctx-size", "1024", "-np", "2", "--jinja", "--metrics",
                    "-ngl", "0", "-t", "2") as s:
        yield s


@pytest.fixture(scope="module")
def oracle():
    return llama_cpp.Llama(model_path=str(model_path("smollm2")), vocab_only=True, verbose=False)


def call(server, method, path, body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(server.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("add_special,parse_special", [(False, True), (True, True), (False, False)])
def test_tokenize_matches_llama_cpp(server, oracle, text, add_special, parse_special):
    status, out = call(server, "POST", "/tokenize",
                       {"content": text, "add_special": add_special, "parse_special": parse_special})
    assert status == 200, out
    assert out["tokens"] == oracle.tokenize(text.encode(), add_bos=add_special, special=parse_special)


def test_tokenize_defaults_are_llama_servers(server, oracle):
    # add_special false, parse_special true.
    text = "<|im_start|>Hi"
    _, out = call(server, "POST", "/tokenize", {"content": text})
    assert out["tokens"] == oracle.tokenize(text.encode(), add_bos=False, special=True)
    assert len(out["tokens"]) == 2


def test_tokenize_with_pieces(server):
    _, out = call(server, "POST", "/tokenize", {"content": "Hello world 🙂", "with_pieces": True})
    pieces = out["tokens"]
    assert all(set(p) == {"id", "piece"} for p in pieces)
    text = b""
    for p in pieces:
        text += p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"])
    assert text.decode() == "Hello world 🙂"
    assert pieces[0]["piece"] == "Hello"


@pytest.mark.parametrize("text", TEXTS)
def test_detokenize_round_trips(server, text):
    _, tok = call(server, "POST", "/tokenize", {"content": text})
    status, out = call(server, "POST", "/detokenize", {"tokens": tok["tokens"]})
    assert status == 200
    assert out == {"content": text}


def test_props(server):
    status, p = call(server, "GET", "/props")
    assert status == 200
    assert p["total_slots"] == 2
    assert p["default_generation_settings"]["n_ctx"] == 1024
    assert p["default_generation_settings"]["params"]["temperature"] == 0.8
    assert p["model_path"].endswith("SmolLM2-135M-Instruct-Q4_1.gguf")
    assert "<|im_start|>" in p["chat_template"] and "{%" in p["chat_template"]
    assert p["bos_token"] == "<|im_start|>" and p["eos_token"] == "<|im_end|>"
    assert p["modalities"] == {"vision": False, "audio": False}
    assert p["build_info"].startswith("loom ")


def test_slots_show_a_running_request(server):
    status, slots = call(server, "GET", "/slots")
    assert status == 200 and [s["id"] for s in slots] == [0, 1]
    assert all(not s["is_processing"] and s["n_ctx"] == 1024 for s in slots)

    body = {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0.5, "top_k": 7, "seed": 11,
            "ignore_eos": True, "stream": True}
    req = urllib.request.Request(server.url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    done = threading.Event()

    def stream():
        with urllib.request.urlopen(req, timeout=300) as r:
            for _ in r:
                pass
        done.set()

    t = threading.Thread(target=stream)
    t.start()
    busy = None
    deadline = time.time() + 120
    while time.time() < deadline and not done.is_set():
        _, slots = call(server, "GET", "/slots")
        running = [s for s in slots if s["is_processing"] and s["next_token"]["n_decoded"] > 0]
        if running:
            busy = running[0]
            break
        time.sleep(0.05)
    t.join()
    assert busy, "no /slots answer showed the running request"
    assert busy["params"]["top_k"] == 7 and busy["params"]["temperature"] == 0.5 and busy["params"]["seed"] == 11
    assert busy["params"]["n_predict"] == 400
    assert 0 < busy["next_token"]["n_decoded"] <= 400
    assert busy["next_token"]["n_remain"] == 400 - busy["next_token"]["n_decoded"]
    _, after = call(server, "GET", "/slots")
    assert not any(s["is_processing"] for s in after)
    assert max(s["n_cached"] for s in after) > 400  # the finished request's cells stay for reuse


HOSTILE = [
    ("/tokenize", b"{not json"),
    ("/tokenize", b"[1, 2, 3]"),
    ("/tokenize", b"{}"),
    ("/tokenize", b'{"content": 42}'),
    ("/tokenize", b'{"content": ["a", "b"]}'),
    ("/tokenize", b'{"content": "a", "add_special": "yes"}'),
    ("/tokenize", b'{"content": "a", "bogus": 1}'),
    ("/tokenize", b"[" * 100000 + b"]" * 100000),
    ("/tokenize", b'{"content": "' + b"\xff\xfe" * 100 + b'"}'),
    ("/detokenize", b"{}"),
    ("/detokenize", b'{"tokens": "1 2"}'),
    ("/detokenize", b'{"tokens": [1, "2"]}'),
    ("/detokenize", b'{"tokens": [-1]}'),
    ("/detokenize", b'{"tokens": [49152]}'),
    ("/detokenize", b'{"tokens": [18446744073709551615]}'),
    ("/detokenize", b'{"tokens": [1.5]}'),
    ("/detokenize", b'{"tokens": [[1]]}'),
    ("/detokenize", b'{"tokens": [1], "content": "x"}'),
    ("/detokenize", b"\x00\x01\x02"),
]


@pytest.mark.parametrize("path,raw", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_bodies_get_4xx(server, path, raw):
    status, out = call(server, "POST", path, raw=raw)
    assert 400 <= status < 500, (status, out)
    assert out["error"]["message"]
    # The server still works.
    assert call(server, "POST", "/detokenize", {"tokens": [19556]}) == (200, {"content": "Hello"})


@pytest.mark.parametrize("method,path", [("GET", "/tokenize"), ("GET", "/detokenize"), ("POST", "/props"),
                                         ("POST", "/slots"), ("DELETE", "/slots")])
def test_wrong_methods_get_405(server, method, path):
    status, out = call(server, method, path, raw=b"{}" if method != "GET" else None)
    assert status == 405, out


def test_api_key_guards_the_llama_routes(loom_bin):
    with LoomServer(loom_bin, model_path("smollm2"), "--api-key", "sekrit", "-c", "256", "-t", "2",
                    "--parallel", "1") as s:
        for method, path, body in (("GET", "/props", None), ("GET", "/slots", None),
                                   ("POST", "/tokenize", {"content": "hi"}), ("POST", "/detokenize", {"tokens": [1]})):
            assert call(s, method, path, body)[0] == 401, path
        req = urllib.request.Request(s.url + "/props", headers={"Authorization": "Bearer sekrit"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert json.loads(r.read())["total_slots"] == 1
        assert call(s, "GET", "/health")[0] == 200


@pytest.mark.parametrize("flag", [["--flash-attn"], ["--mlock"], ["-fa", "on"], ["--n-cpu-moe", "3"]])
def test_launcher_flags_loom_lacks_are_refused_by_name(loom_bin, flag):
    r = run_loom(loom_bin, "serve", "-m", model_path("smollm2"), "--port", "0", *flag, check=False, timeout=60)
    assert r.returncode == 2
    assert flag[0] in r.stderr and "not expected" in r.stderr, r.stderr
