"""`loom serve` through the official openai client: chat and completions, streaming and not,
16 concurrent greedy streams equal to their solo runs (continuous batching), a disconnecting
client frees its slot, a full queue answers 503, SIGTERM drains."""
import http.client
import json
import re
import threading
import time
import urllib.request

import openai
import pytest
import requests

from conftest import LoomServer, model_path, run_loom


def client(server, **kw):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=kw.pop("api_key", "unused"), max_retries=0, timeout=300, **kw)


def metrics(server) -> dict:
    text = requests.get(server.url + "/metrics", timeout=10).text
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def test_models_health_and_metrics_format(loom_server):
    models = client(loom_server).models.list()
    assert [m.id for m in models.data] == ["SmolLM2-135M-Instruct-Q4_1"]
    h = requests.get(loom_server.url + "/health", timeout=10)
    assert h.status_code == 200 and h.json()["status"] == "ok" and h.json()["slots_total"] == 16
    m = metrics(loom_server)
    for name in ["loom_prompt_tokens_total", "loom_generated_tokens_total", "loom_queue_depth", "loom_slots_busy",
                 "loom_kv_cache_used_cells", "loom_kv_cache_cells", "loom_generation_tokens_per_second",
                 "loom_time_to_first_token_seconds_count", "loom_requests_cancelled_total"]:
        assert name in m, name
    assert m["loom_slots_total"] == 16 and m["loom_kv_cache_cells"] == 16 * 1024
    # Every sample line is "name{labels} value" and every family has HELP and TYPE.
    text = requests.get(loom_server.url + "/metrics", timeout=10).text
    for line in text.splitlines():
        assert line.startswith("# ") or re.fullmatch(r'[a-z_]+(\{[^}]*\})? [-+0-9.eInf]+', line), line


def test_chat_non_streaming(loom_server):
    r = client(loom_server).chat.completions.create(
        model="loom", messages=[{"role": "system", "content": "You are terse."},
                                {"role": "user", "content": "What is the capital of France?"}],
        max_tokens=24, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    c = r.choices[0]
    assert c.message.role == "assistant" and len(c.message.content.split()) >= 3
    assert c.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 10 and 0 < r.usage.completion_tokens <= 24
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_streaming_equals_non_streaming(loom_server):
    c = client(loom_server)
    msgs = [{"role": "user", "content": "Name three colors."}]
    full = c.chat.completions.create(model="loom", messages=msgs, max_tokens=30, temperature=0)
    stream = c.chat.completions.create(model="loom", messages=msgs, max_tokens=30, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    pieces, finish, usage, roles = [], None, None, []
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.role:
                roles.append(ch.delta.role)
            if ch.delta.content:
                pieces.append(ch.delta.content)
            if ch.finish_reason:
                finish = ch.finish_reason
    assert roles == ["assistant"]
    assert len(pieces) > 3  # it really streamed, piece by piece
    assert "".join(pieces) == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert usage.completion_tokens == full.usage.completion_tokens
    assert usage.prompt_tokens == full.usage.prompt_tokens


def test_completions_match_loom_run(loom_server, loom_bin):
    prompt = "The three primary colors are"
    r = client(loom_server).completions.create(model="loom", prompt=prompt, max_tokens=20, temperature=0)
    assert r.object == "text_completion"
    solo = json.loads(run_loom(loom_bin, "run", "-m", model_path("smollm2"), "-p", prompt, "-n", 20, "--temp", 0,
                               "--json").stdout)
    assert r.choices[0].text == solo["text"]
    assert r.usage.prompt_tokens == len(solo["prompt_tokens"])
    assert r.usage.completion_tokens == len(solo["tokens"])
    assert r.choices[0].finish_reason == ("length" if solo["stop_reason"] == "length" else "stop")
    # Streaming gives the same text; token ids are accepted as the prompt too.
    s = client(loom_server).completions.create(model="loom", prompt=prompt, max_tokens=20, temperature=0, stream=True)
    assert "".join(ch.choices[0].text for ch in s if ch.choices) == solo["text"]
    ids = client(loom_server).completions.create(model="loom", prompt=solo["prompt_tokens"], max_tokens=20,
                                                 temperature=0)
    assert ids.choices[0].text == solo["text"]


def test_sampling_parameters(loom_server):
    c = client(loom_server)
    kw = dict(model="loom", prompt="Once upon a time", max_tokens=16, temperature=0.9, top_p=0.9, seed=1234,
              presence_penalty=0.5, frequency_penalty=0.3, extra_body={"top_k": 20, "min_p": 0.02})
    a = c.completions.create(**kw).choices[0].text
    b = c.completions.create(**kw).choices[0].text
    assert a == b  # same seed, same text
    others = {c.completions.create(**{**kw, "seed": s}).choices[0].text for s in (1, 2, 3)}
    assert len(others | {a}) > 1  # the seed matters
    # stop strings end the text before them
    r = c.completions.create(model="loom", prompt="1, 2, 3, 4,", max_tokens=30, temperature=0, stop=[" 7"])
    assert r.choices[0].finish_reason == "stop" and "7" not in r.choices[0].text and "6" in r.choices[0].text


PROMPTS = [f"Write one sentence about the number {i}." if i % 2 else f"List {i} fruits, comma separated."
           for i in range(16)]


def test_16_concurrent_greedy_streams_equal_solo_runs(loom_server):
    c = client(loom_server)
    n_tok = 32
    solo = []
    for p in PROMPTS:  # one at a time: nothing else in the batch
        r = c.chat.completions.create(model="loom", messages=[{"role": "user", "content": p}], max_tokens=n_tok,
                                      temperature=0)
        solo.append((r.choices[0].message.content, r.usage.completion_tokens))
    before = metrics(loom_server)
    results = [None] * len(PROMPTS)
    start = threading.Barrier(len(PROMPTS))

    def stream(i):
        start.wait()
        s = c.chat.completions.create(model="loom", messages=[{"role": "user", "content": PROMPTS[i]}],
                                      max_tokens=n_tok, temperature=0, stream=True,
                                      stream_options={"include_usage": True})
        text, usage = "", None
        for ch in s:
            if ch.usage:
                usage = ch.usage.completion_tokens
            if ch.choices and ch.choices[0].delta.content:
                text += ch.choices[0].delta.content
        results[i] = (text, usage)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    after = metrics(loom_server)
    for i, (want, got) in enumerate(zip(solo, results)):
        assert got == want, f"stream {i} ({PROMPTS[i]!r}) differs from its solo run"
    # They really decoded together: on average many sequences per batched step.
    steps = after["loom_batch_steps_total"] - before["loom_batch_steps_total"]
    seqs = after["loom_batch_sequences_total"] - before["loom_batch_sequences_total"]
    assert steps > 0 and seqs / steps >= 6, (seqs, steps)
    # The solo runs left their prompts in the slots: the repeats reused them.
    assert after["loom_prompt_tokens_reused_total"] > before["loom_prompt_tokens_reused_total"]


def wait_for(pred, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_client_disconnect_frees_its_slot(loom_server):
    assert wait_for(lambda: metrics(loom_server)["loom_slots_busy"] == 0)
    before = metrics(loom_server)
    conn = http.client.HTTPConnection("127.0.0.1", loom_server.port, timeout=60)
    body = json.dumps({"prompt": "Tell me a very long story.", "max_tokens": 5000, "ignore_eos": True, "stream": True,
                       "temperature": 0})
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    got = b""
    while got.count(b"data: ") < 5:
        got += resp.read1(4096)
    busy = metrics(loom_server)
    assert busy["loom_slots_busy"] == 1 and busy["loom_kv_cache_used_cells"] > 0
    conn.sock.close()  # the client goes away mid-stream
    conn.close()
    t0 = time.time()
    assert wait_for(lambda: metrics(loom_server)["loom_slots_busy"] == 0, timeout=5.0), "slot still busy"
    freed_after = time.time() - t0
    m = metrics(loom_server)
    assert m["loom_requests_cancelled_total"] == before["loom_requests_cancelled_total"] + 1
    assert m["loom_kv_cache_used_cells"] == 0
    generated = m["loom_generated_tokens_total"]
    time.sleep(0.5)
    assert metrics(loom_server)["loom_generated_tokens_total"] == generated  # nothing decodes for it any more
    assert generated - before["loom_generated_tokens_total"] < 4000
    assert freed_after < 2.0


def test_full_queue_answers_503_with_retry_after(loom_bin):
    with LoomServer(loom_bin, model_path("smollm2"), "--parallel", "1", "--max-queue", "1", "-c", "512") as s:
        long = {"prompt": "Once", "max_tokens": 400, "ignore_eos": True, "temperature": 0}
        out = []
        ts = [threading.Thread(target=lambda: out.append(requests.post(s.url + "/v1/completions", json=long,
                                                                         timeout=300)))
              for _ in range(2)]
        for t in ts:
            t.start()
            time.sleep(0.3)
        assert wait_for(lambda: metrics(s)["loom_queue_depth"] == 1 and metrics(s)["loom_slots_busy"] == 1)
        r = requests.post(s.url + "/v1/completions", json=long, timeout=60)
        assert r.status_code == 503 and r.headers["Retry-After"].isdigit()
        assert r.json()["error"]["code"] == "queue_full"
        for t in ts:
            t.join(300)
        assert [x.status_code for x in out] == [200, 200]
        assert metrics(s)["loom_requests_rejected_queue_full_total"] == 1


def test_sigterm_drains_in_flight_requests(loom_bin):
    s = LoomServer(loom_bin, model_path("smollm2"), "--parallel", "2", "-c", "512", "--drain-timeout", "60").start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
        conn.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "Once upon a time", "max_tokens": 60, "ignore_eos": True, "stream": True, "temperature": 0}),
            headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        first = resp.read1(4096)
        assert b"data: " in first
        import signal
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        # New work is refused while the stream goes on.
        r = requests.post(s.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=30)
        assert r.status_code == 503
        assert requests.get(s.url + "/health", timeout=10).status_code == 503
        rest = first + resp.read()
        events = [json.loads(line[6:]) for line in rest.decode().split("\n") if line.startswith("data: {")]
        assert events[-1]["choices"][0]["finish_reason"] == "length"
        assert rest.rstrip().endswith(b"data: [DONE]")
        assert s.proc.wait(timeout=60) == 0
        assert "stopped" in s.log()
    finally:
        s.stop()


def test_one_log_line_per_request(loom_server):
    marker = f"/v1/nothing-{time.time_ns()}"
    requests.get(loom_server.url + marker, timeout=10)
    client(loom_server).completions.create(model="loom", prompt="Hi", max_tokens=3, temperature=0,
                                           extra_body={"ignore_eos": True})
    time.sleep(0.2)
    log = loom_server.log()
    assert sum(1 for line in log.splitlines() if marker in line) == 1
    line = [l for l in log.splitlines() if "POST /v1/completions" in l][-1]
    assert re.search(r'" 200 [0-9.]+ms prompt=\d+ reused=\d+ gen=3 ttft=[0-9.]+ms finish=length', line), line


def test_request_arriving_mid_stream_joins_the_running_batch(loom_server):
    c = client(loom_server)
    solo_b = c.completions.create(model="loom", prompt="The sun is", max_tokens=8, temperature=0).choices[0].text
    conn = http.client.HTTPConnection("127.0.0.1", loom_server.port, timeout=120)
    conn.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": True, "stream": True, "temperature": 0}),
        headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    got = b""
    while got.count(b"data: {") < 10:
        got += resp.read1(4096)
    before = metrics(loom_server)
    b = c.completions.create(model="loom", prompt="The sun is", max_tokens=8, temperature=0)
    after = metrics(loom_server)
    rest = resp.read()  # A goes on after B is done
    conn.close()
    assert b.choices[0].text == solo_b
    assert rest.count(b"data: {") > 20, "the long stream ended before the short request"
    # While B ran, the steps carried both sequences.
    steps = after["loom_batch_steps_total"] - before["loom_batch_steps_total"]
    seqs = after["loom_batch_sequences_total"] - before["loom_batch_sequences_total"]
    assert steps >= 8 and seqs >= 2 * 8 - 1 and seqs <= 2 * steps, (steps, seqs)
