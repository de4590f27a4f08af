"""The KV cache's row types (--cache-type-k / --cache-type-v, llama.cpp's names): f16 (the default)
or q8_0 (8-bit values with an fp16 scale per 32, half the memory), on cpu-ref.

Checked on a synthesized Qwen 3 (tiny, its matrices in q8_0) at the last prompt position:
  1. q8_0 K, and q8_0 K and V, stay close to the f16 cache (cosine > 0.999) without being equal
     to it (the quantization is really applied);
  2. llama.cpp (llama-cpp-python, one token per micro-batch, no repacking) with the same cache
     types gives nearly the same logits (cosine > 0.999): q8_0 K with its default attention
     (flash attention off, as the other oracle tests), q8_0 K and V with flash attention on
     (llama.cpp quantizes V only there);
  3. a type other than f16/q8_0 is a usage error, and a device other than cpu-ref refuses a
     quantized cache with one clear message.
"""
import ctypes
import json

import numpy as np
import pytest

import llama_cpp as L

import test_engine
from conftest import run_loom

PROMPT = [256, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]  # BOS + "Hello, world"
GGML_F16, GGML_Q8_0 = 1, 8


class CacheOracle(test_engine.Oracle):
    """llama.cpp with the KV cache types and flash attention setting given."""

    def __init__(self, path, type_k, type_v, flash):
        L.llama_log_set(test_engine._quiet_log, ctypes.c_void_p(0))
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.use_extra_bufts = False
        self.model = L.llama_model_load_from_file(str(path).encode(), mp)
        assert self.model, f"llama.cpp could not load {path}"
        cp = L.llama_context_default_params()
        cp.n_ctx = 256
        cp.n_batch = cp.n_ubatch = 1
        cp.n_threads = cp.n_threads_batch = 1
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cp.type_k, cp.type_v = type_k, type_v
        self.ctx = L.llama_init_from_model(self.model, cp)
        assert self.ctx, "llama.cpp could not create a context"
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)

    def last_logits(self, ids):
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        for t in ids:
            logits = self._decode(t)
        return logits


@pytest.fixture(scope="module")
def model(loom_bin, tmp_path_factory):
    path = tmp_path_factory.mktemp("kv") / "qwen3-q8_0.gguf"
    run_loom(loom_bin, "model", "synth", "--arch", "qwen3", "--shape", "tiny-swa", "--quant", "q8_0", "-o", path)
    return path


def loom_logits(loom_bin, path, tmp_path, k, v):
    f = tmp_path / f"{k}-{v}.f32"
    run_loom(loom_bin, "run", "-m", path, "--prompt-ids", json.dumps(PROMPT), "-n", "0", "--device", "cpu-ref",
             "--cache-type-k", k, "--cache-type-v", v, "--dump-logits", f)
    return np.fromfile(f, dtype=np.float32)


def cosine(a, b):
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_q8_0_cache_stays_close_to_f16(loom_bin, model, tmp_path):
    f16 = loom_logits(loom_bin, model, tmp_path, "f16", "f16")
    for k, v in (("q8_0", "f16"), ("q8_0", "q8_0"), ("f16", "q8_0")):
        got = loom_logits(loom_bin, model, tmp_path, k, v)
        cos = cosine(got, f16)
        print(f"\n[kv {k}/{v} vs f16/f16] cosine {cos:.7f}, max|diff| {np.max(np.abs(got - f16)):.3g}")
        assert cos > 0.999, (k, v, cos)
        assert not np.array_equal(got, f16), f"{k}/{v}: the cache type changed nothing"


@pytest.mark.parametrize("k, v, flash", [("q8_0", "f16", False), ("q8_0", "q8_0", True)])
def test_q8_0_cache_agrees_with_llama_cpp(loom_bin, model, tmp_path, k, v, flash):
    types = {"f16": GGML_F16, "q8_0": GGML_Q8_0}
    ref = CacheOracle(model, types[k], types[v], flash).last_logits(PROMPT)
    got = loom_logits(loom_bin, model, tmp_path, k, v)
    cos = cosine(got, ref)
    print(f"\n[kv {k}/{v} vs llama.cpp{' flash' if flash else ''}] cosine {cos:.7f}, "
          f"max|diff| {np.max(np.abs(got - ref)):.3g}")
    assert cos > 0.999, cos


def test_cache_type_errors(loom_bin, model):
    r = run_loom(loom_bin, "run", "-m", model, "--prompt-ids", "[256]", "-n", "1", "--cache-type-k", "q4_0", check=False)
    assert r.returncode == 2 and "--cache-type-k" in r.stderr and "q4_0" in r.stderr, r.stderr
    r = run_loom(loom_bin, "run", "-m", model, "--prompt-ids", "[256]", "-n", "1", "--device", "cpu",
                 "--cache-type-v", "q8_0", check=False)
    assert r.returncode == 1, r.stderr
    assert "runs on --device cpu-ref only" in r.stderr and r.stderr.startswith("loom: error"), r.stderr


def test_server_with_q8_0_cache_answers_as_run(loom_bin, model):
    """`loom serve` with a q8_0 K and V cache and two slots: a completion (asked twice, the
    second time from the prefix cache) is the greedy text `loom run` gives with the same cache."""
    import requests
    from conftest import LoomServer
    kv = ["--cache-type-k", "q8_0", "--cache-type-v", "q8_0"]
    prompt = "Hello, world"
    out = run_loom(loom_bin, "run", "-m", model, "-p", prompt, "-n", "12", "--temp", "0", "--ignore-eos", "--json",
                   "--device", "cpu-ref", *kv)
    want = json.loads(out.stdout)["text"]
    with LoomServer(loom_bin, model, "--device", "cpu-ref", "--parallel", "2", "-c", "256", *kv) as s:
        for _ in range(2):
            r = requests.post(s.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 12, "temperature": 0,
                                                               "ignore_eos": True}, timeout=120)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["text"] == want
