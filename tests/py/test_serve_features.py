"""`loom serve`'s OpenAI request features beyond plain generation, through the official `openai`
client: logprobs / top_logprobs (checked against llama.cpp's own distribution for the first
token), logit_bias, seed, n > 1 and lists of prompts, streamed and not; hostile values of each
get a 400 and the server keeps serving."""
import ctypes
import json
import math

import numpy as np
import openai
import pytest
import requests

from conftest import LoomServer, model_path

PROMPT = "The three primary colors are"
MSGS = [{"role": "user", "content": "Name three fruits."}]


@pytest.fixture(scope="module")
def server(loom_bin):
    with LoomServer(loom_bin, model_path("smollm2"), "--parallel", "4", "-c", "512") as s:
        yield s


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def tokenize(server, text):
    r = requests.post(server.url + "/tokenize", json={"content": text, "add_special": True}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def still_serving(server):
    r = requests.post(server.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2, "temperature": 0},
                      timeout=120)
    assert r.status_code == 200, r.text


# ---- logprobs -----------------------------------------------------------------------------

def check_chat_logprobs(content_entries, text, k):
    assert content_entries, "no logprobs"
    joined = b"".join(bytes(e.bytes) for e in content_entries)
    assert joined.decode("utf-8", errors="replace") == text
    for e in content_entries:
        assert e.logprob <= 0 and len(e.top_logprobs) == k
        top = [t.logprob for t in e.top_logprobs]
        assert top == sorted(top, reverse=True)
        assert sum(math.exp(x) for x in top) <= 1 + 1e-5
        # Greedy: the chosen token is the most likely one, with the same value.
        assert e.token == e.top_logprobs[0].token and abs(e.logprob - top[0]) < 1e-6


def test_chat_logprobs_greedy(server):
    r = client(server).chat.completions.create(model="x", messages=MSGS, max_tokens=12, temperature=0,
                                               logprobs=True, top_logprobs=5)
    c = r.choices[0]
    assert c.finish_reason == "length"
    check_chat_logprobs(c.logprobs.content, c.message.content, 5)
    assert len(c.logprobs.content) == r.usage.completion_tokens == 12


def test_chat_logprobs_streamed_equal_non_streamed(server):
    cl = client(server)
    full = cl.chat.completions.create(model="x", messages=MSGS, max_tokens=10, temperature=0, logprobs=True,
                                      top_logprobs=3)
    entries, text = [], ""
    for chunk in cl.chat.completions.create(model="x", messages=MSGS, max_tokens=10, temperature=0, logprobs=True,
                                            top_logprobs=3, stream=True):
        for ch in chunk.choices:
            text += ch.delta.content or ""
            if ch.logprobs and ch.logprobs.content:
                entries += ch.logprobs.content
    assert text == full.choices[0].message.content
    assert [(e.token, e.logprob) for e in entries] == [(e.token, e.logprob) for e in full.choices[0].logprobs.content]
    check_chat_logprobs(entries, text, 3)


def test_chat_without_top_logprobs_and_sampled(server):
    r = client(server).chat.completions.create(model="x", messages=MSGS, max_tokens=10, temperature=1.0, seed=5,
                                               logprobs=True)
    entries = r.choices[0].logprobs.content
    assert len(entries) == r.usage.completion_tokens
    assert all(e.top_logprobs == [] and e.logprob <= 0 for e in entries)
    # Sampling does not change the reported distribution, and a seed repeats it.
    again = client(server).chat.completions.create(model="x", messages=MSGS, max_tokens=10, temperature=1.0, seed=5,
                                                   logprobs=True)
    assert [(e.token, e.logprob) for e in again.choices[0].logprobs.content] == [(e.token, e.logprob) for e in entries]
    plain = client(server).chat.completions.create(model="x", messages=MSGS, max_tokens=4, temperature=0)
    assert plain.choices[0].logprobs is None


def test_completion_logprobs_shape_and_stream(server):
    cl = client(server)
    r = cl.completions.create(model="x", prompt=PROMPT, max_tokens=8, temperature=0, logprobs=4)
    lp = r.choices[0].logprobs
    n = r.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset[0] == 0 and all(b > a for a, b in zip(lp.text_offset, lp.text_offset[1:]))
    for tok, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert 1 <= len(top) <= 4 and max(top.values()) == pytest.approx(value, abs=1e-6)
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-5
    tokens, values, offsets = [], [], []
    for chunk in cl.completions.create(model="x", prompt=PROMPT, max_tokens=8, temperature=0, logprobs=4, stream=True):
        for ch in chunk.choices:
            if ch.logprobs:
                tokens += ch.logprobs.tokens
                values += ch.logprobs.token_logprobs
                offsets += ch.logprobs.text_offset
    assert tokens == lp.tokens and values == lp.token_logprobs and offsets == lp.text_offset


_QUIET_LOG = None


@pytest.fixture(scope="module")
def llama_first_logprobs():
    """llama.cpp's log-softmax of the logits after PROMPT (low-level API, one token per batch, as
    tests/py/test_engine.py runs it), with its tokenization of PROMPT."""
    import llama_cpp as L

    global _QUIET_LOG  # llama.cpp keeps the callback: it must outlive this fixture
    if _QUIET_LOG is None:
        _QUIET_LOG = L.llama_log_callback(lambda level, text, user_data: None)
    L.llama_log_set(_QUIET_LOG, ctypes.c_void_p(0))
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.use_extra_bufts = False
    model = L.llama_model_load_from_file(str(model_path("smollm2")).encode(), mp)
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_threads, cp.n_threads_batch = 512, 1, 1, 1, 1
    cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = L.llama_init_from_model(model, cp)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    data = PROMPT.encode()
    buf = (L.llama_token * 64)()
    n = L.llama_tokenize(vocab, data, len(data), buf, len(buf), True, True)
    ids = list(buf[:n])
    for t in ids:
        arr = (L.llama_token * 1)(t)
        assert L.llama_decode(ctx, L.llama_batch_get_one(arr, 1)) == 0
    logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).astype(np.float64)
    L.llama_free(ctx)
    L.llama_model_free(model)
    m = logits.max()
    return ids, logits - (m + np.log(np.exp(logits - m).sum()))


def test_first_token_logprobs_match_llama_cpp(server, llama_first_logprobs):
    ids, ref = llama_first_logprobs
    r = requests.post(server.url + "/v1/completions",
                      json={"prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": 10}, timeout=120).json()
    lp = r["choices"][0]["logprobs"]
    order = np.argsort(-ref, kind="stable")[:10]
    # The chosen token is llama.cpp's argmax, with its log-probability.
    assert abs(lp["token_logprobs"][0] - ref[order[0]]) < 1e-3
    ours = sorted(lp["top_logprobs"][0].values(), reverse=True)
    theirs = [ref[i] for i in order]
    # Distinct ids may share a text (the dict keeps one); compare the values that are there.
    assert len(ours) >= 5
    for v in ours:
        assert min(abs(v - t) for t in theirs) < 1e-3, (ours, theirs)
    assert abs(ours[0] - theirs[0]) < 1e-3
    print(f"\nfirst-token top logprobs vs llama.cpp: max |diff| {max(min(abs(v - t) for t in theirs) for v in ours):.2e}")
    # Our ids: the top token of a one-token request is the one /tokenize-style ids give.
    assert requests.post(server.url + "/detokenize", json={"tokens": [int(order[0])]}, timeout=60).json()["content"] \
        == lp["tokens"][0]


# ---- logit_bias, seed ---------------------------------------------------------------------

def test_logit_bias_bans_and_forces(server):
    cl = client(server)
    base = cl.completions.create(model="x", prompt=PROMPT, max_tokens=1, temperature=0, logprobs=1)
    first = base.choices[0].logprobs.tokens[0]
    first_id = requests.post(server.url + "/tokenize", json={"content": first}, timeout=60).json()["tokens"][0]
    banned = cl.completions.create(model="x", prompt=PROMPT, max_tokens=1, temperature=0, logprobs=1,
                                   logit_bias={str(first_id): -100})
    assert banned.choices[0].logprobs.tokens[0] != first
    forced_id = tokenize(server, " banana")[-1]
    forced_text = requests.post(server.url + "/detokenize", json={"tokens": [forced_id]}, timeout=60).json()["content"]
    forced = cl.completions.create(model="x", prompt=PROMPT, max_tokens=3, temperature=0.8, seed=1,
                                   logit_bias={str(forced_id): 100}, logprobs=0)
    assert forced.choices[0].text == forced_text * 3
    # logprobs are of the biased distribution: the forced token is certain.
    assert all(v > -1e-3 for v in forced.choices[0].logprobs.token_logprobs)


def test_seed_repeats_and_differs(server):
    cl = client(server)

    def run(seed):
        return cl.chat.completions.create(model="x", messages=MSGS, max_tokens=24, temperature=1.0,
                                          seed=seed).choices[0].message.content

    a = run(1234)
    assert run(1234) == a
    assert any(run(s) != a for s in (1, 2, 3))


# ---- n > 1 and lists of prompts ------------------------------------------------------------

def test_n_choices(server):
    cl = client(server)
    r = cl.chat.completions.create(model="x", messages=MSGS, max_tokens=16, temperature=1.0, seed=42, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    texts = [c.message.content for c in r.choices]
    assert len(set(texts)) > 1
    again = cl.chat.completions.create(model="x", messages=MSGS, max_tokens=16, temperature=1.0, seed=42, n=3)
    assert [c.message.content for c in again.choices] == texts
    # Choice 0 is the n = 1 answer with the same seed.
    one = cl.chat.completions.create(model="x", messages=MSGS, max_tokens=16, temperature=1.0, seed=42)
    assert one.choices[0].message.content == texts[0]
    prompt_tokens = one.usage.prompt_tokens
    assert r.usage.prompt_tokens == prompt_tokens
    assert len(texts) <= r.usage.completion_tokens <= 3 * 16
    # Greedy choices are all the greedy answer.
    g = cl.chat.completions.create(model="x", messages=MSGS, max_tokens=8, temperature=0, n=2)
    solo = cl.chat.completions.create(model="x", messages=MSGS, max_tokens=8, temperature=0)
    assert [c.message.content for c in g.choices] == [solo.choices[0].message.content] * 2


def test_n_choices_streamed(server):
    cl = client(server)
    full = cl.chat.completions.create(model="x", messages=MSGS, max_tokens=12, temperature=1.0, seed=9, n=2)
    texts, finish, usage = {0: "", 1: ""}, {}, None
    for chunk in cl.chat.completions.create(model="x", messages=MSGS, max_tokens=12, temperature=1.0, seed=9, n=2,
                                            stream=True, stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            texts[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                finish[ch.index] = ch.finish_reason
    assert [texts[0], texts[1]] == [c.message.content for c in full.choices]
    assert set(finish) == {0, 1}
    assert usage.completion_tokens == full.usage.completion_tokens


def test_prompt_list(server):
    cl = client(server)
    prompts = [PROMPT, "1, 2, 3, 4,", "Paris is the capital of"]
    r = cl.completions.create(model="x", prompt=prompts, max_tokens=6, temperature=0)
    solo = [cl.completions.create(model="x", prompt=p, max_tokens=6, temperature=0) for p in prompts]
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert [c.text for c in r.choices] == [s.choices[0].text for s in solo]
    assert r.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in solo)
    assert r.usage.completion_tokens == sum(s.usage.completion_tokens for s in solo)
    # Token-id prompts, two choices each: choice index = prompt * n + j.
    ids = [tokenize(server, p) for p in prompts[:2]]
    r2 = requests.post(server.url + "/v1/completions",
                       json={"prompt": ids, "n": 2, "max_tokens": 6, "temperature": 0}, timeout=300).json()
    assert [c["index"] for c in r2["choices"]] == [0, 1, 2, 3]
    assert [c["text"] for c in r2["choices"]] == [solo[0].choices[0].text] * 2 + [solo[1].choices[0].text] * 2
    # Streamed.
    texts = {}
    for chunk in cl.completions.create(model="x", prompt=prompts, max_tokens=6, temperature=0, stream=True):
        for ch in chunk.choices:
            texts[ch.index] = texts.get(ch.index, "") + ch.text
    assert [texts[i] for i in range(3)] == [s.choices[0].text for s in solo]


# ---- hostile values -------------------------------------------------------------------------

CHAT_BODY = {"messages": MSGS, "max_tokens": 2}
COMP_BODY = {"prompt": "Hi", "max_tokens": 2}
HOSTILE = [
    ("chat logprobs not a bool", "chat", {"logprobs": "yes"}, "logprobs"),
    ("chat logprobs an integer", "chat", {"logprobs": 3}, "logprobs"),
    ("top_logprobs without logprobs", "chat", {"top_logprobs": 3}, "top_logprobs"),
    ("top_logprobs too many", "chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("top_logprobs negative", "chat", {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ("top_logprobs huge", "chat", {"logprobs": True, "top_logprobs": 10**30}, "top_logprobs"),
    ("top_logprobs string", "chat", {"logprobs": True, "top_logprobs": "5"}, "top_logprobs"),
    ("completion logprobs bool", "comp", {"logprobs": True}, "logprobs"),
    ("completion logprobs too many", "comp", {"logprobs": 21}, "logprobs"),
    ("completion logprobs fractional", "comp", {"logprobs": 2.5}, "logprobs"),
    ("logit_bias a list", "chat", {"logit_bias": [1, 2]}, "logit_bias"),
    ("logit_bias key not a number", "chat", {"logit_bias": {"abc": 1}}, "logit_bias"),
    ("logit_bias negative id", "chat", {"logit_bias": {"-1": 1}}, "logit_bias"),
    ("logit_bias id out of vocabulary", "chat", {"logit_bias": {"99999999": 1}}, "logit_bias"),
    ("logit_bias id past int range", "comp", {"logit_bias": {"1" * 40: 1}}, "logit_bias"),
    ("logit_bias value too big", "chat", {"logit_bias": {"1": 101}}, "logit_bias"),
    ("logit_bias value string", "comp", {"logit_bias": {"1": "5"}}, "logit_bias"),
    ("logit_bias value bool", "chat", {"logit_bias": {"1": True}}, "logit_bias"),
    ("logit_bias too many entries", "chat", {"logit_bias": {str(i): 1 for i in range(1025)}}, "logit_bias"),
    ("n zero", "chat", {"n": 0}, "n"),
    ("n nine", "chat", {"n": 9}, "n"),
    ("n string", "comp", {"n": "2"}, "n"),
    ("n huge", "comp", {"n": 10**20}, "n"),
    ("prompts x n too many", "comp", {"prompt": ["a", "b", "c"], "n": 8}, "n"),
    ("seventeen prompts", "comp", {"prompt": ["a"] * 17}, "prompt"),
    ("prompt list mixed", "comp", {"prompt": ["a", 5]}, "prompt"),
    ("prompt list with a null", "comp", {"prompt": ["a", None]}, "prompt"),
    ("prompt list with an empty id list", "comp", {"prompt": [[1, 2], []]}, "prompt"),
    ("prompt list with a bad id", "comp", {"prompt": [[1, 2], [1, 99999999]]}, "prompt"),
    ("prompt list with a long prompt", "comp", {"prompt": ["a", "hello " * 600]}, "prompt"),
    ("seed a float", "chat", {"seed": 1.5}, "seed"),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_values(server, case):
    name, ep, extra, param = case
    body = dict(CHAT_BODY if ep == "chat" else COMP_BODY, **extra)
    path = "/v1/chat/completions" if ep == "chat" else "/v1/completions"
    r = requests.post(server.url + path, data=json.dumps(body), headers={"Content-Type": "application/json"},
                      timeout=120)
    assert r.status_code == 400, (name, r.status_code, r.text)
    err = r.json()["error"]
    assert err["param"] == param and err["message"], err
    still_serving(server)


def test_n_choices_with_logprobs_streamed(server):
    """Streamed choices carry their own logprobs (by index), equal to the non-streamed ones."""
    cl = client(server)
    kw = dict(model="x", messages=MSGS, max_tokens=8, temperature=1.0, seed=11, n=2, logprobs=True, top_logprobs=2)
    full = cl.chat.completions.create(**kw)
    got = {0: [], 1: []}
    for chunk in cl.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            if ch.logprobs and ch.logprobs.content:
                got[ch.index] += [(e.token, e.logprob) for e in ch.logprobs.content]
    for i, c in enumerate(full.choices):
        assert got[i] == [(e.token, e.logprob) for e in c.logprobs.content]
        assert len(got[i]) == 8 or c.finish_reason == "stop"


def test_gemma3_logprobs(loom_bin):
    """Gemma 3 (262,144 tokens): greedy logprobs as on SmolLM2, and logit_bias bans the greedy token."""
    with LoomServer(loom_bin, model_path("gemma3"), "--parallel", "1", "-c", "256") as s:
        r = client(s).completions.create(model="x", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=5)
        lp = r.choices[0].logprobs
        assert "".join(lp.tokens) == r.choices[0].text
        for value, top in zip(lp.token_logprobs, lp.top_logprobs):
            assert max(top.values()) == pytest.approx(value, abs=1e-6)
            assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-5
        first = requests.post(s.url + "/tokenize", json={"content": lp.tokens[0]}, timeout=60).json()["tokens"]
        banned = client(s).completions.create(model="x", prompt=PROMPT, max_tokens=1, temperature=0, logprobs=1,
                                              logit_bias={str(first[0]): -100})
        assert banned.choices[0].logprobs.tokens[0] != lp.tokens[0]
