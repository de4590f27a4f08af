"""`POST /v1/embeddings` of `loom serve` through the official `openai` client: unit vectors of the
model's width, paraphrases closer than unrelated sentences, the same vector for a string and its
token ids, close to llama.cpp's mean-pooled embedding; hostile bodies get 4xx and the server keeps
serving."""
import base64
import json

import numpy as np
import openai
import pytest
import requests

from conftest import LoomServer, model_path


@pytest.fixture(scope="module")
def server(loom_bin):
    with LoomServer(loom_bin, model_path("smollm2"), "--parallel", "2", "-c", "512") as s:
        yield s


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def embed(server, texts):
    r = client(server).embeddings.create(model="x", input=texts)
    assert [d.index for d in r.data] == list(range(len(texts)))
    return [np.array(d.embedding, dtype=np.float64) for d in r.data], r


TRIPLES = [
    ("The cat sat on the mat.", "A cat was sitting on the rug.",
     "Stock markets fell sharply after the central bank raised interest rates."),
    ("How do I bake bread at home?", "What is a simple recipe for homemade bread?",
     "The spacecraft entered orbit around Jupiter last night."),
    ("He plays the guitar every evening.", "Every night he practices his guitar.",
     "Photosynthesis converts light energy into chemical energy in plants."),
]


def test_paraphrases_are_closer_than_unrelated_text(server):
    for a, b, c in TRIPLES:
        (ea, eb, ec), _ = embed(server, [a, b, c])
        para, unrelated = float(ea @ eb), float(ea @ ec)
        print(f"\n{a!r}: paraphrase cos {para:.4f}, unrelated cos {unrelated:.4f}")
        assert para > unrelated, (a, para, unrelated)


def test_shape_norm_usage_and_formats(server):
    vecs, r = embed(server, ["Hello world", "Another sentence here."])
    for v in vecs:
        assert v.shape == (576,) and abs(np.linalg.norm(v) - 1) < 1e-5
    assert r.usage.prompt_tokens == r.usage.total_tokens > 4
    # The float format (what the openai client asks in base64) and a single string input.
    f = requests.post(server.url + "/v1/embeddings", json={"input": "Hello world", "encoding_format": "float"},
                      timeout=120).json()
    assert f["object"] == "list" and f["data"][0]["object"] == "embedding"
    assert np.allclose(np.array(f["data"][0]["embedding"]), vecs[0], atol=0)
    b = requests.post(server.url + "/v1/embeddings", json={"input": "Hello world", "encoding_format": "base64"},
                      timeout=120).json()
    assert np.array_equal(np.frombuffer(base64.b64decode(b["data"][0]["embedding"]), dtype="<f4"),
                          np.array(f["data"][0]["embedding"], dtype=np.float32))


def test_token_ids_batches_and_repeats_agree(server):
    text = "Embeddings should not depend on how they are asked for."
    ids = requests.post(server.url + "/tokenize", json={"content": text, "add_special": True}, timeout=60).json()["tokens"]
    (from_text,), _ = embed(server, [text])
    (from_ids,), _ = embed(server, [ids])
    (alone,), _ = embed(server, [text])
    batch, _ = embed(server, ["something else", text])
    assert np.array_equal(from_text, from_ids) and np.array_equal(from_text, alone)
    assert np.array_equal(batch[1], from_text)


def test_close_to_llama_cpp_mean_pooling(server):
    import llama_cpp as L
    text = "The quick brown fox jumps over the lazy dog."
    llm = L.Llama(model_path=str(model_path("smollm2")), embedding=True, n_ctx=512, n_batch=512, verbose=False,
                  pooling_type=L.LLAMA_POOLING_TYPE_MEAN)
    ref = np.array(llm.embed(text, normalize=True), dtype=np.float64)
    (ours,), _ = embed(server, [text])
    cos = float(ours @ ref / np.linalg.norm(ref))
    print(f"\ncosine to llama.cpp's mean-pooled embedding: {cos:.6f}")
    assert cos > 0.99, cos


def test_generation_still_works_beside_embeddings(server):
    r = client(server).completions.create(model="x", prompt="Hello", max_tokens=3, temperature=0)
    assert r.usage.completion_tokens == 3
    embed(server, ["a short text"])
    r2 = client(server).completions.create(model="x", prompt="Hello", max_tokens=3, temperature=0)
    assert r2.choices[0].text == r.choices[0].text


HOSTILE = [
    ("input missing", {"model": "x"}, 400, "input"),
    ("input a number", {"input": 5}, 400, "input"),
    ("input an object", {"input": {"a": 1}}, 400, "input"),
    ("input empty list", {"input": []}, 400, "input"),
    ("input list with a number", {"input": ["a", 5]}, 400, "input"),
    ("input list with null", {"input": ["a", None]}, 400, "input"),
    ("empty id list in a list", {"input": [[1, 2], []]}, 400, "input"),
    ("token id out of vocabulary", {"input": [1, 99999999]}, 400, "input"),
    ("negative token id", {"input": [[5, -1]]}, 400, "input"),
    ("too many inputs", {"input": ["a"] * 65}, 400, "input"),
    ("input longer than the context", {"input": "hello " * 700}, 400, "input"),
    ("bad encoding format", {"input": "a", "encoding_format": "hex"}, 400, "encoding_format"),
    ("encoding format a number", {"input": "a", "encoding_format": 1}, 400, "encoding_format"),
    ("dimensions not the model's", {"input": "a", "dimensions": 10}, 400, "dimensions"),
    ("dimensions a string", {"input": "a", "dimensions": "576"}, 400, "dimensions"),
    ("unknown field", {"input": "a", "pooling": "cls"}, 400, "pooling"),
    ("model a number", {"input": "a", "model": 3}, 400, "model"),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_bodies(server, case):
    name, body, status, param = case
    r = requests.post(server.url + "/v1/embeddings", data=json.dumps(body),
                      headers={"Content-Type": "application/json"}, timeout=120)
    assert r.status_code == status, (name, r.status_code, r.text)
    err = r.json()["error"]
    assert err["param"] == param and err["message"]
    embed(server, ["still serving"])


@pytest.mark.parametrize("raw", [b"", b"{", b"[1,2]", b"null", b"\xff\xfe", b"[" * 10000 + b"]" * 10000])
def test_malformed_json(server, raw):
    r = requests.post(server.url + "/v1/embeddings", data=raw, headers={"Content-Type": "application/json"},
                      timeout=120)
    assert r.status_code == 400, r.text
    embed(server, ["still serving"])


def test_wrong_method(server):
    r = requests.get(server.url + "/v1/embeddings", timeout=30)
    assert r.status_code == 405 and r.headers["Allow"] == "POST"


def test_gemma3_paraphrases(loom_bin):
    """The second model (Gemma 3, 640 wide, no pooling declared: mean) orders the triples too."""
    with LoomServer(loom_bin, model_path("gemma3"), "--parallel", "1", "-c", "256") as s:
        for a, b, c in TRIPLES:
            ea, eb, ec = embed(s, [a, b, c])[0]
            assert ea.shape == (640,) and float(ea @ eb) > float(ea @ ec), a
