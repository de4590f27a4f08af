"""Oracle tests of the architectures beyond the two reference models, with no weights from
anywhere: for each architecture a small GGUF with random weights in that architecture's real
tensor layout and metadata (written with the PyPI `gguf` package, the tokenizer copied from the
fetched SmolLM2 file), and llama.cpp (llama-cpp-python) as the oracle, configured as in
test_engine.py (one token per micro-batch, no repacking, no flash attention).

What is compared, per architecture:
  1. cpu-ref: the logits at every position of a 10-token prompt (cosine > 0.9999, same top-1
     unless llama.cpp's best two are within 0.05) and 16 greedy tokens after it (identical up to
     a near-tie).
  2. cpu (the op-library kernels on HRX's cpu driver): the last prompt token's logits and the
     same 16 greedy tokens.
  3. `loom run --dump-program --device cuda` (no GPU needed) shows the architecture's own steps in
     the fused form: the biases after the one q|k|v launch, the row views of a fused tensor, the
     per-head norms, the soft-caps.
  4. `loom info` describes each file.
  5. malformed variants (a missing metadata key, a missing or contradictory tensor or key) end
     in one clear message and exit code 1.

The sliding-window model ("mistral-swa": a window of 4 on every layer, stored as `llama`, as
llama.cpp's converter stores Mistral 7B) needs the window applied on llama.cpp's side too: its
llama graph ignores `llama.attention.sliding_window`, so the oracle removes, before each token,
the cache cells that fall out of that token's window (what llama.cpp's own sliding-window cache
does for the architectures it applies windows to). Every token then attends exactly to the
positions (p - window, p] in every layer.
"""
import functools
import json
import math
import zlib

import gguf
import numpy as np
import pytest

import llama_cpp as L  # the oracle; a missing package is an error, not a skip

from conftest import cpu_has_amx, exact_env, model_path, run_loom
from test_engine import Oracle

N_GEN = 16
NEAR_TIE = 0.05
Q = gguf.GGMLQuantizationType
PROMPT = [1, 4093, 734, 12000, 58, 2210, 9011, 333, 17777, 640]


def arch_specs():
    """name -> spec: shapes, metadata and which tensors the layout has."""
    base = dict(n_embd=128, n_layer=2, n_head=4, n_head_kv=2, head_dim=32, n_ff=256, tied=False,
                mtype=Q.Q8_0, eps=1e-6, rope_base=10000.0, meta={}, layout="llama", emb_std=0.25)
    return {
        # Qwen3: head size 64 (q is wider than the embedding), per-head q/k norms, tied output.
        "qwen3": dict(base, arch="qwen3", head_dim=64, tied=True, rope_base=1e6, qk_norm=True),
        # Qwen2.5: q/k/v biases, separate output matrix, Q4_0 layers.
        "qwen2": dict(base, arch="qwen2", n_ff=320, mtype=Q.Q4_0, rope_base=1e6, qkv_bias=True),
        # Llama 3.2: llama3 RoPE scaling (rope_freqs) and tied embeddings.
        "llama3": dict(base, arch="llama", tied=True, rope_base=500000.0, rope_freqs=True),
        # Phi-3: fused attn_qkv and gate|up ffn_up.
        "phi3": dict(base, arch="phi3", layout="phi3", eps=1e-5),
        # Gemma 2: 3 layers (sliding window of 4 on layers 0 and 2), both soft-caps, its norms.
        # Caps low enough to bend these random models' scores and logits; a small embedding,
        # since Gemma scales it by sqrt(n_embd) and a dominant one makes greedy repeat a token.
        "gemma2": dict(base, arch="gemma2", n_layer=3, head_dim=64, layout="gemma2", tied=True, emb_std=0.03,
                       meta={"attention.sliding_window": ("u32", 4), "attn_logit_softcapping": ("f32", 2.0),
                             "final_logit_softcapping": ("f32", 3.0)}),
        # Q5_0 attention and embeddings, Q5_1 FFN and output: the 5-bit formats end to end.
        # The GPU's grouped mat-vec (matvec_gpu) has no 5-bit path: each matrix is its own launch.
        "llama-q5": dict(base, arch="llama", mtype=Q.Q5_0, ffn_mtype=Q.Q5_1, emb_mtype=Q.Q5_0, out_mtype=Q.Q5_1,
                         gpu_grouped=False),
        # Qwen3-MoE: Qwen 3's attention, 8 experts of 64 per layer, 2 per token (router in f32, as
        # converters and quantizers keep it). No dense FFN: the GPU's grouped gate|up check
        # does not apply.
        "qwen3moe": dict(base, arch="qwen3moe", head_dim=64, rope_base=1e6, qk_norm=True, layout="moe",
                         n_expert=8, n_expert_used=2, n_ff_exp=64, gpu_grouped=False,
                         meta={"expert_count": ("u32", 8), "expert_used_count": ("u32", 2),
                               "expert_feed_forward_length": ("u32", 64)}),
        # Mistral 7B v0.1-like: a sliding window (4, shorter than the prompt) on all 3 layers.
        "mistral-swa": dict(base, arch="llama", n_layer=3, window=4, meta={"attention.sliding_window": ("u32", 4)}),
    }


def llama3_rope_freqs(head_dim, base, factor=8.0, low=1.0, high=4.0, orig=8192):
    """The divisors the converter writes for Llama 3.1+ "llama3" RoPE scaling."""
    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / base ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < orig / high:
            out.append(1.0)
        elif wavelen > orig / low:
            out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer():
    """The tokenizer keys of the fetched SmolLM2 file (read once: its 49152 tokens take seconds)."""
    f = gguf.GGUFReader(str(model_path("smollm2"))).fields
    return {k: f[k].contents() for k in f if k.startswith("tokenizer.ggml.")}


def copy_tokenizer(w):
    t = smollm2_tokenizer()
    w.add_tokenizer_model(t["tokenizer.ggml.model"])
    w.add_tokenizer_pre(t["tokenizer.ggml.pre"])
    w.add_token_list(t["tokenizer.ggml.tokens"])
    w.add_token_types(t["tokenizer.ggml.token_type"])
    w.add_token_merges(t["tokenizer.ggml.merges"])
    w.add_bos_token_id(t["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(t["tokenizer.ggml.eos_token_id"])
    w.add_unk_token_id(t["tokenizer.ggml.unknown_token_id"])
    w.add_pad_token_id(t["tokenizer.ggml.padding_token_id"])
    w.add_add_bos_token(False)
    return len(t["tokenizer.ggml.tokens"])


def write_model(path, s, drop_keys=(), drop_tensors=(), extra_tensors=()):
    """Writes spec `s` to path; drop_keys / drop_tensors leave metadata keys (without the arch
    prefix) or tensors out, extra_tensors adds (name, f32 array) pairs."""
    rng = np.random.default_rng(zlib.crc32(s.get("seed", s["arch"] + s["layout"]).encode()))
    a = s["arch"]
    w = gguf.GGUFWriter(str(path), a)
    meta = {"context_length": ("u32", 4096), "embedding_length": ("u32", s["n_embd"]),
            "block_count": ("u32", s["n_layer"]), "feed_forward_length": ("u32", s["n_ff"]),
            "attention.head_count": ("u32", s["n_head"]), "attention.head_count_kv": ("u32", s["n_head_kv"]),
            "attention.key_length": ("u32", s["head_dim"]), "attention.value_length": ("u32", s["head_dim"]),
            "rope.dimension_count": ("u32", s["head_dim"]), "rope.freq_base": ("f32", s["rope_base"]),
            "attention.layer_norm_rms_epsilon": ("f32", s["eps"])}
    meta.update(s["meta"])
    for k, (t, v) in meta.items():
        if k in drop_keys:
            continue
        {"u32": w.add_uint32, "f32": w.add_float32, "array": w.add_array}[t](f"{a}.{k}", v)
    n_vocab = copy_tokenizer(w)
    n_embd, n_ff, hd = s["n_embd"], s["n_ff"], s["head_dim"]
    nq, nkv = s["n_head"] * hd, s["n_head_kv"] * hd

    def add(name, arr, qtype=None, extra=False):
        if name in drop_tensors and not extra:
            return
        if qtype is None or qtype == Q.F32:
            w.add_tensor(name, arr.astype(np.float32))
        else:
            w.add_tensor(name, gguf.quants.quantize(arr.astype(np.float32), qtype), raw_dtype=qtype)

    def mat(name, n_in, n_out, std=0.1, qtype=None):
        default = s.get("ffn_mtype", s["mtype"]) if ".ffn_" in name else s["mtype"]
        add(name, rng.normal(0.0, std, size=(n_out, n_in)), qtype or default)

    def norm(name, n):
        add(name, rng.uniform(0.5, 1.5, size=n))

    def bias(name, n):
        add(name, rng.uniform(-0.5, 0.5, size=n))

    mat("token_embd.weight", n_embd, n_vocab, std=s["emb_std"], qtype=s.get("emb_mtype", Q.Q8_0))
    norm("output_norm.weight", n_embd)
    if not s["tied"]:
        mat("output.weight", n_embd, n_vocab, std=0.25, qtype=s.get("out_mtype", Q.Q8_0))
    if s.get("rope_freqs"):
        add("rope_freqs.weight", llama3_rope_freqs(hd, s["rope_base"]))
    for il in range(s["n_layer"]):
        p = f"blk.{il}."
        norm(p + "attn_norm.weight", n_embd)
        if s["layout"] == "phi3":
            mat(p + "attn_qkv.weight", n_embd, nq + 2 * nkv)
        else:
            mat(p + "attn_q.weight", n_embd, nq)
            mat(p + "attn_k.weight", n_embd, nkv)
            mat(p + "attn_v.weight", n_embd, nkv)
        if s.get("qkv_bias"):
            bias(p + "attn_q.bias", nq)
            bias(p + "attn_k.bias", nkv)
            bias(p + "attn_v.bias", nkv)
        if s.get("qk_norm"):
            norm(p + "attn_q_norm.weight", hd)
            norm(p + "attn_k_norm.weight", hd)
        mat(p + "attn_output.weight", nq, n_embd)
        norm(p + "ffn_norm.weight", n_embd)
        if s["layout"] == "moe":
            ne, nf = s["n_expert"], s["n_ff_exp"]
            add(p + "ffn_gate_inp.weight", rng.normal(0.0, 0.1, size=(ne, n_embd)))
            for name, n_in, n_out in (("ffn_gate_exps", n_embd, nf), ("ffn_up_exps", n_embd, nf),
                                      ("ffn_down_exps", nf, n_embd)):
                add(p + name + ".weight", rng.normal(0.0, 0.1, size=(ne, n_out, n_in)), s["mtype"])
            continue
        if s["layout"] == "phi3":
            mat(p + "ffn_up.weight", n_embd, 2 * n_ff)
        else:
            mat(p + "ffn_gate.weight", n_embd, n_ff)
            mat(p + "ffn_up.weight", n_embd, n_ff)
        mat(p + "ffn_down.weight", n_ff, n_embd)
        if s["layout"] == "gemma2":
            norm(p + "post_attention_norm.weight", n_embd)
            norm(p + "post_ffw_norm.weight", n_embd)
    for name, arr in extra_tensors:
        add(name, arr, extra=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


SPECS = arch_specs()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("archs")
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = write_model(d / f"{name}.gguf", SPECS[name])
        return cache[name]

    return get


@pytest.fixture(scope="module")
def oracle_runs(models):
    """Per architecture: llama.cpp's logits at every prompt position, its greedy tokens and gaps."""
    cache = {}

    def get(name):
        if name not in cache:
            window = SPECS[name].get("window")
            o = WindowOracle(models(name), window) if window else Oracle(models(name))
            L.llama_memory_clear(L.llama_get_memory(o.ctx), True)
            per_pos = [o._decode(t) for t in PROMPT]
            _, tokens, gaps = o.greedy(PROMPT, N_GEN)
            cache[name] = (np.stack(per_pos), tokens, gaps)
        return cache[name]

    return get


class WindowOracle(Oracle):
    """llama.cpp with a sliding window on every layer: before a token at position p is decoded,
    the cells of positions <= p - window leave the cache (see the module docstring)."""

    def __init__(self, path, window):
        super().__init__(path)
        self.window = window

    def _decode(self, token):
        mem = L.llama_get_memory(self.ctx)
        first_kept = L.llama_memory_seq_pos_max(mem, 0) + 1 - self.window + 1
        if first_kept > 0:
            assert L.llama_memory_seq_rm(mem, 0, 0, first_kept)
        return super()._decode(token)


def cosine(a, b):
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def loom_run(loom_bin, path, ids, n, device, logits_path=None, exact=True):
    """`loom run`; on the cpu device with the reference's matmul arithmetic unless exact=False (the
    default prompt matmuls, AMX tiles or summed lanes, sum floats in another order: a greedy token
    with a top-2 gap of 0.07 has flipped on them, through one activation byte rounding the other
    way, which llama.cpp's own repacked paths do as well)."""
    args = ["run", "-m", path, "--prompt-ids", json.dumps(ids), "-n", n, "--temp", "0", "--ignore-eos", "--json",
            "--device", device]
    if logits_path:
        args += ["--dump-logits", logits_path]
    env = exact_env() if device == "cpu" and exact else None
    return json.loads(run_loom(loom_bin, *args, env=env).stdout)


def check_logits(mine, ref, what):
    cos = cosine(mine, ref)
    assert cos > 0.9999, f"{what}: logits cosine {cos}"
    best, ref_best = int(np.argmax(mine)), int(np.argmax(ref))
    if best != ref_best:
        top2 = np.sort(ref)[-2:]
        assert top2[1] - top2[0] < NEAR_TIE, f"{what}: top-1 {best} vs llama.cpp {ref_best} (gap {top2[1] - top2[0]:.4f})"
    return cos, float(np.max(np.abs(mine - ref)))


def check_greedy(got, ref_tokens, gaps, what):
    assert len(got) == N_GEN
    first = next((i for i, (a, b) in enumerate(zip(got, ref_tokens)) if a != b), None)
    if first is not None:
        assert gaps[first] < NEAR_TIE, (f"{what}: token {first} differs (loom {got[first]}, llama.cpp "
                                        f"{ref_tokens[first]}), llama.cpp's top-2 gap {gaps[first]:.4f}")


@pytest.mark.parametrize("name", list(SPECS))
def test_every_prompt_position_matches_llama_cpp_on_cpu_ref(loom_bin, models, oracle_runs, name, tmp_path):
    per_pos, ref_tokens, gaps = oracle_runs(name)
    worst, worst_diff = 1.0, 0.0
    for n in range(1, len(PROMPT) + 1):
        f = tmp_path / f"logits{n}.f32"
        out = loom_run(loom_bin, models(name), PROMPT[:n], N_GEN if n == len(PROMPT) else 0, "cpu-ref", f)
        cos, diff = check_logits(np.fromfile(f, dtype=np.float32), per_pos[n - 1], f"{name} position {n - 1}")
        worst, worst_diff = min(worst, cos), max(worst_diff, diff)
    check_greedy(out["tokens"], ref_tokens, gaps, name)
    print(f"\n[{name}/cpu-ref] {len(PROMPT)} positions: worst cosine {worst:.7f}, max|diff| {worst_diff:.3g}; "
          f"{N_GEN} greedy tokens checked")


@pytest.mark.parametrize("name", list(SPECS))
def test_cpu_kernels_match_llama_cpp(loom_bin, models, oracle_runs, name, tmp_path):
    per_pos, ref_tokens, gaps = oracle_runs(name)
    f = tmp_path / "logits.f32"
    out = loom_run(loom_bin, models(name), PROMPT, N_GEN, "cpu", f)
    cos, diff = check_logits(np.fromfile(f, dtype=np.float32), per_pos[-1], f"{name} on cpu")
    check_greedy(out["tokens"], ref_tokens, gaps, f"{name} on cpu")
    print(f"\n[{name}/cpu] last prompt token cosine {cos:.7f}, max|diff| {diff:.3g}")
    if cpu_has_amx():
        # The default prompt matmuls (AMX tiles here): the same logits up to float reassociation.
        g = tmp_path / "logits-amx.f32"
        loom_run(loom_bin, models(name), PROMPT, 1, "cpu", g, exact=False)
        cos, diff = check_logits(np.fromfile(g, dtype=np.float32), per_pos[-1], f"{name} on cpu (AMX)")
        print(f"[{name}/cpu, AMX prompt matmuls] last prompt token cosine {cos:.7f}, max|diff| {diff:.3g}")


# What the fused decode step of each architecture must contain (as `--dump-program` prints it:
# values by number, weights by name).
DUMP_EXPECT = {
    "qwen3": ["blk.0.attn_q.weight, blk.0.attn_k.weight, blk.0.attn_v.weight", "<- %2[1x256], blk.0.attn_q_norm.weight",
              "<- %3[1x128], blk.0.attn_k_norm.weight"],
    "qwen2": ["add_bias     %5[1x128] <- %2[1x128], blk.0.attn_q.bias", "add_bias     %6[1x64] <- %3[1x64], blk.0.attn_k.bias",
              "add_bias     %7[1x64] <- %4[1x64], blk.0.attn_v.bias"],
    "llama3": ["blk.0.attn_q.weight, blk.0.attn_k.weight, blk.0.attn_v.weight", "rope_kv"],
    "phi3": ["blk.0.attn_qkv.weight[0:128], blk.0.attn_qkv.weight[128:192], blk.0.attn_qkv.weight[192:256]",
             "blk.0.ffn_up.weight[0:256], blk.0.ffn_up.weight[256:512], glu", "scale        %5[1x128] <- %2[1x128], 0.17677669"],
    "gemma2": ["blk.0.post_attention_norm.weight", "blk.0.post_ffw_norm.weight", "scale        %6[1x256] <- %3[1x256], 0.125",
               "softcap      %52[1x49152] <- %51[1x49152], 3", "layer 0, window 4", "layer 2, window 4"],
    "mistral-swa": ["layer 0, window 4", "layer 1, window 4", "layer 2, window 4"],
    "qwen3moe": ["blk.0.attn_q.weight, blk.0.attn_k.weight, blk.0.attn_v.weight", "<- %2[1x256], blk.0.attn_q_norm.weight",
                 "blk.0.ffn_gate_inp.weight", "moe_route", "matmul_id", "blk.0.ffn_gate_exps.weight",
                 "blk.0.ffn_down_exps.weight", "moe_sum", "blk.0.ffn_gate_exps.weight, blk.0.ffn_up_exps.weight, glu"],
    "llama-q5": ["matmul       %2[1x128] <- %29[1x128 q8_0], blk.0.attn_q.weight",
                 "matmul       %9[1x256] <- %31[1x128 q8_1], blk.0.ffn_gate.weight"],
}


@pytest.mark.parametrize("name", list(SPECS))
def test_dump_program_shows_the_fused_cuda_step(loom_bin, models, name):
    text = run_loom(loom_bin, "run", "--dump-program", "--device", "cuda", "-m", models(name)).stdout
    for needle in DUMP_EXPECT[name]:
        assert needle in text, f"{name}: '{needle}' not in\n{text}"
    if not SPECS[name].get("gpu_grouped", True):
        return
    # q, k and v (or the fused tensor's three views) are one launch of the normed input, and so
    # are gate and up with their activation.
    matmuls = [l for l in text.splitlines() if l.strip().startswith("matmul") and "blk.0." in l]
    assert any(l.count("blk.0.attn_") == 3 for l in matmuls), text
    assert any("blk.0.ffn_" in l and (l.endswith(", glu") or l.count("blk.0.ffn_") == 2) for l in matmuls), text


@pytest.mark.parametrize("name", list(SPECS))
def test_info_describes_the_model(loom_bin, models, name):
    arch = SPECS[name]["arch"]
    out = run_loom(loom_bin, "info", models(name)).stdout
    assert f"architecture:  {arch}" in out, out
    assert f"{arch}.attention.head_count_kv" in out and "token_embd.weight" in out, out


# Malformed variants: (spec, keys dropped, tensors dropped, extra tensors, expected text).
BAD = {
    "qwen3-no-head-count": ("qwen3", ["attention.head_count"], [], [], "metadata key 'qwen3.attention.head_count' is missing"),
    "qwen3-no-q-norm": ("qwen3", [], ["blk.1.attn_q_norm.weight"], [], "tensor 'blk.1.attn_q_norm.weight' is missing"),
    "qwen2-no-bias": ("qwen2", [], ["blk.0.attn_k.bias"], [], "tensor 'blk.0.attn_k.bias' is missing"),
    "qwen2-no-embedding-length": ("qwen2", ["embedding_length"], [], [], "qwen2.embedding_length"),
    "phi3-no-block-count": ("phi3", ["block_count"], [], [], "metadata key 'phi3.block_count' is missing"),
    "phi3-both-qkv-forms": ("phi3", [], [], [("blk.0.attn_q.weight", np.zeros((128, 128)))],
                            "has both a fused attn_qkv.weight and attn_q.weight"),
    "gemma2-no-ff-length": ("gemma2", ["feed_forward_length"], [], [], "metadata key 'gemma2.feed_forward_length' is missing"),
    "qwen3moe-no-used-count": ("qwen3moe", ["expert_used_count"], [], [],
                               "metadata key 'qwen3moe.expert_used_count' is missing"),
    "qwen3moe-no-down-exps": ("qwen3moe", [], ["blk.1.ffn_down_exps.weight"], [],
                              "tensor 'blk.1.ffn_down_exps.weight' is missing"),
    "qwen3moe-flat-experts": ("qwen3moe", [], ["blk.0.ffn_up_exps.weight"], [("blk.0.ffn_up_exps.weight", np.zeros((512, 128)))],
                              "tensor 'blk.0.ffn_up_exps.weight' has shape [128, 512], expected [128, 64, 8]"),
    "qwen3moe-dense-ffn-too": ("qwen3moe", [], [], [("blk.0.ffn_up.weight", np.zeros((64, 128)))],
                               "layer 'blk.0.' of a mixture-of-experts model has a dense ffn_up.weight"),
    "llama3-short-rope-freqs": ("llama3", [], ["rope_freqs.weight"], [("rope_freqs.weight", np.ones(8))],
                                "tensor 'rope_freqs.weight' has shape [8], expected [16, 1]"),
}


# A router asked for more experts than there are.
BAD["qwen3moe-used-above-count"] = (
    dict(SPECS["qwen3moe"], meta=dict(SPECS["qwen3moe"]["meta"], expert_used_count=("u32", 9))), [], [], [],
    "metadata key 'qwen3moe.expert_used_count' = 9 must be in 1..qwen3moe.expert_count (8)")


# Variants of the sliding-window model: the layers named by a pattern, and contradictions.
SWA = SPECS["mistral-swa"]
SWA_VARIANTS = {
    "pattern-2": dict(SWA, meta={"attention.sliding_window": ("u32", 4), "attention.sliding_window_pattern": ("u32", 2)}),
    "pattern-array": dict(SWA, meta={"attention.sliding_window": ("u32", 4),
                                     "attention.sliding_window_pattern": ("array", [False, True, False])}),
    "short-pattern": dict(SWA, meta={"attention.sliding_window": ("u32", 4),
                                     "attention.sliding_window_pattern": ("array", [True, True])}),
    "float-window": dict(SWA, meta={"attention.sliding_window": ("f32", 4.0)}),
    "own-rope-base": dict(SWA, meta={"attention.sliding_window": ("u32", 4), "rope.freq_base_swa": ("f32", 1e6)}),
}
BAD.update({
    "mistral-swa-pattern-without-window": (
        SWA_VARIANTS["pattern-2"], ["attention.sliding_window"], [], [],
        "metadata key 'llama.attention.sliding_window_pattern' needs a sliding window, but "
        "'llama.attention.sliding_window' is missing"),
    "mistral-swa-short-pattern": (SWA_VARIANTS["short-pattern"], [], [], [],
                                  "metadata key 'llama.attention.sliding_window_pattern' has 2 entries for 3 layers"),
    "mistral-swa-float-window": (SWA_VARIANTS["float-window"], [], [], [],
                                 "metadata key 'llama.attention.sliding_window': expected an integer"),
    "mistral-swa-own-rope-base": (SWA_VARIANTS["own-rope-base"], [], [], [],
                                  "a RoPE base of its own for sliding-window layers is not supported for llama"),
})


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_variant_fails_with_a_clear_message(loom_bin, tmp_path, case):
    name, keys, tensors, extra, needle = BAD[case]
    spec = SPECS[name] if isinstance(name, str) else name
    path = write_model(tmp_path / f"{case}.gguf", spec, keys, tensors, extra)
    r = run_loom(loom_bin, "run", "-m", path, "--device", "cpu-ref", "--prompt-ids", "[1, 2]", "-n", "1", check=False)
    assert r.returncode == 1, r.stderr
    assert needle in r.stderr, r.stderr
    assert str(path) in r.stderr and r.stderr.count("\n") == 1, r.stderr


def attention_windows(loom_bin, path):
    """Per layer, the window its attention launch has in the cpu-ref Program (0: none)."""
    text = run_loom(loom_bin, "run", "--dump-program", "--device", "cpu-ref", "-m", path).stdout
    out = []
    for line in text.splitlines():
        if line.strip().startswith("attention"):
            tail = line.rsplit("<-", 1)[1]
            out.append(int(tail.rsplit("window ", 1)[1]) if "window " in tail else 0)
    return out


def test_window_pattern_picks_the_layers(loom_bin, tmp_path):
    # A number n: every n-th layer global (llama.cpp's rule); an array: one flag per layer.
    assert attention_windows(loom_bin, write_model(tmp_path / "p2.gguf", SWA_VARIANTS["pattern-2"])) == [4, 0, 4]
    assert attention_windows(loom_bin, write_model(tmp_path / "pa.gguf", SWA_VARIANTS["pattern-array"])) == [0, 4, 0]


def test_the_window_changes_the_logits(models, oracle_runs):
    """llama.cpp without the window agrees on the first `window` positions and not after: the
    oracle comparison of mistral-swa is not vacuous."""
    per_pos, _, _ = oracle_runs("mistral-swa")
    o = Oracle(models("mistral-swa"))
    L.llama_memory_clear(L.llama_get_memory(o.ctx), True)
    plain = [o._decode(t) for t in PROMPT]
    window = SWA["window"]
    for p in range(len(PROMPT)):
        cos = cosine(plain[p], per_pos[p])
        if p < window:
            assert np.array_equal(plain[p], per_pos[p]), f"position {p}: cosine {cos}"
        else:
            assert cos < 0.9999, f"position {p}: the window made no difference (cosine {cos})"


def test_mistral_architecture_reads_the_same_window(loom_bin, models, tmp_path):
    """A file stored as `mistral` (keys under mistral.*) runs the llama recipe with its window:
    the same logits at every position as the same weights stored as `llama`."""
    path = write_model(tmp_path / "mistral.gguf", dict(SWA, arch="mistral", seed=SWA["arch"] + SWA["layout"]))
    assert "architecture:  mistral" in run_loom(loom_bin, "info", path).stdout
    assert attention_windows(loom_bin, path) == [4, 4, 4]
    for n in (3, len(PROMPT)):
        a, b = tmp_path / f"m{n}.f32", tmp_path / f"l{n}.f32"
        loom_run(loom_bin, path, PROMPT[:n], 0, "cpu-ref", a)
        loom_run(loom_bin, models("mistral-swa"), PROMPT[:n], 0, "cpu-ref", b)
        assert np.array_equal(np.fromfile(a, dtype=np.float32), np.fromfile(b, dtype=np.float32)), n


# ---- `loom model synth --arch`: every architecture, in the layout llama.cpp loads -----------

SYNTH_ARCHS = ["llama", "mistral", "qwen2", "qwen3", "qwen3moe", "phi3", "gemma2", "gemma3"]
# Byte tokens of "Hello, world" after the synthetic vocabulary's BOS (256); longer than the
# 8-token window of the tiny-swa shape.
SYNTH_PROMPT = [256, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]


@pytest.fixture(scope="module")
def synth_models(loom_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("synth")
    cache = {}

    def get(arch, shape):
        if (arch, shape) not in cache:
            path = d / f"{arch}-{shape}.gguf"
            run_loom(loom_bin, "model", "synth", "--arch", arch, "--shape", shape, "--quant", "q8_0", "-o", path)
            cache[(arch, shape)] = path
        return cache[(arch, shape)]

    return get


@pytest.mark.parametrize("arch", SYNTH_ARCHS)
def test_synth_writes_every_architecture(loom_bin, synth_models, arch):
    path = synth_models(arch, "tiny-swa")
    stored = "llama" if arch == "mistral" else arch  # llama.cpp's converter stores Mistral 7B as llama
    info = run_loom(loom_bin, "info", path).stdout
    assert f"architecture:  {stored}" in info, info
    windowed = arch in ("llama", "mistral", "gemma2", "gemma3")
    assert (f"{stored}.attention.sliding_window" in info) == windowed, info
    out = loom_run(loom_bin, path, SYNTH_PROMPT, 4, "cpu-ref")
    assert len(out["tokens"]) == 4, out


@pytest.mark.parametrize("arch", SYNTH_ARCHS)
def test_synth_matches_llama_cpp(loom_bin, synth_models, arch, tmp_path):
    """llama.cpp loads each synthesized file, and Loom's cpu-ref gives its logits and greedy
    tokens (the windows included: llama.cpp applies Gemma's itself, the oracle Llama's)."""
    path = synth_models(arch, "tiny-swa")
    o = WindowOracle(path, 8) if arch in ("llama", "mistral") else Oracle(path)
    ref_logits, ref_tokens, gaps = o.greedy(SYNTH_PROMPT, N_GEN)
    f = tmp_path / "logits.f32"
    out = loom_run(loom_bin, path, SYNTH_PROMPT, N_GEN, "cpu-ref", f)
    cos, diff = check_logits(np.fromfile(f, dtype=np.float32), ref_logits, f"synth {arch}")
    check_greedy(out["tokens"], ref_tokens, gaps, f"synth {arch}")
    print(f"\n[synth {arch}] last prompt token cosine {cos:.7f}, max|diff| {diff:.3g}; {N_GEN} greedy tokens checked")


def test_synth_moe_q4_k_matches_llama_cpp(loom_bin, tmp_path):
    """The Q4_K_M-like mixture of experts (Q4_K gate/up experts, Q6_K down experts on the layer
    the mix gives more bits, the f32 router): the expert ops in K-quant formats on cpu-ref and on
    the cpu kernels give llama.cpp's logits and greedy tokens."""
    path = tmp_path / "moe-q4k.gguf"
    run_loom(loom_bin, "model", "synth", "--arch", "qwen3moe", "--shape", "tiny-swa", "--quant", "q4_k", "-o", path)
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(str(path)).tensors}
    assert types["blk.0.ffn_gate_exps.weight"] == Q.Q4_K and types["blk.2.ffn_down_exps.weight"] == Q.Q6_K, types
    assert types["blk.0.ffn_gate_inp.weight"] == Q.F32, types
    ref_logits, ref_tokens, gaps = Oracle(path).greedy(SYNTH_PROMPT, N_GEN)
    for device in ("cpu-ref", "cpu"):
        f = tmp_path / f"{device}.f32"
        out = loom_run(loom_bin, path, SYNTH_PROMPT, N_GEN, device, f)
        cos, diff = check_logits(np.fromfile(f, dtype=np.float32), ref_logits, f"synth qwen3moe q4_k on {device}")
        check_greedy(out["tokens"], ref_tokens, gaps, f"synth qwen3moe q4_k on {device}")
        print(f"\n[synth qwen3moe q4_k/{device}] cosine {cos:.7f}, max|diff| {diff:.3g}; {N_GEN} greedy tokens checked")


# The formats llama.cpp's quantizer writes and Loom reads only: every matrix but the output
# (Q6_K) in the format, the embeddings included (a get_rows of that format).
FILE_FORMATS = {"q2_k": Q.Q2_K, "q3_k": Q.Q3_K, "iq4_nl": Q.IQ4_NL, "iq4_xs": Q.IQ4_XS}


@pytest.mark.parametrize("quant", list(FILE_FORMATS))
def test_synth_file_formats_match_llama_cpp(loom_bin, quant, tmp_path):
    """A Qwen 3 synthesized in each format: Loom's cpu-ref and the cpu kernels give llama.cpp's
    logits (cosine > 0.9999) and greedy tokens."""
    path = tmp_path / f"qwen3-{quant}.gguf"
    run_loom(loom_bin, "model", "synth", "--arch", "qwen3", "--shape", "tiny-swa", "--quant", quant, "-o", path)
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(str(path)).tensors}
    want = FILE_FORMATS[quant]
    assert types["token_embd.weight"] == want and types["blk.1.ffn_down.weight"] == want, types
    assert types["blk.0.attn_q.weight"] == want and types["output.weight"] == Q.Q6_K, types
    ref_logits, ref_tokens, gaps = Oracle(path).greedy(SYNTH_PROMPT, N_GEN)
    for device in ("cpu-ref", "cpu"):
        f = tmp_path / f"{device}.f32"
        out = loom_run(loom_bin, path, SYNTH_PROMPT, N_GEN, device, f)
        cos, diff = check_logits(np.fromfile(f, dtype=np.float32), ref_logits, f"synth qwen3 {quant} on {device}")
        check_greedy(out["tokens"], ref_tokens, gaps, f"synth qwen3 {quant} on {device}")
        print(f"\n[synth qwen3 {quant}/{device}] cosine {cos:.7f}, max|diff| {diff:.3g}; {N_GEN} greedy tokens checked")


def test_synth_moe_perplexity_agrees_with_stock_llama_perplexity(loom_bin, llama_cpp_bin, tmp_path):
    """Stock llama.cpp (llama-perplexity, prompts in batches of 128 through its own mul_mat_id)
    on the Q4_K_M-like mixture of experts: Loom's perplexity on cpu-ref and on the cpu kernels
    (grouped expert mat-vecs) is the same number, within 0.5% of llama.cpp's unfused
    configuration and 1% of its default."""
    import re
    import subprocess
    from conftest import ROOT
    text = ROOT / "tests" / "data" / "perplexity.txt"
    path = tmp_path / "moe-q4k.gguf"
    run_loom(loom_bin, "model", "synth", "--arch", "qwen3moe", "--shape", "tiny-swa", "--quant", "q4_k", "-o", path)
    args = ["-c", "128", "-t", "2"]

    def stock(*extra):
        r = subprocess.run([f"{llama_cpp_bin}/llama-perplexity", "-m", str(path), "-f", str(text), "-b", "128", *args,
                            *extra], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        return float(re.search(r"Final estimate: PPL = ([0-9.]+)", r.stdout + r.stderr).group(1))

    # cpu: the reference's arithmetic (exact_env); cpu-default: AMX prompt matmuls where the CPU
    # has them (float sums in another order: within 0.5% of the same number).
    ours = {name: json.loads(run_loom(loom_bin, "perplexity", "-m", path, "-f", text, "--device", d, "--json", *args,
                                      env=env).stdout)["ppl"]
            for name, d, env in (("cpu-ref", "cpu-ref", None), ("cpu", "cpu", exact_env()), ("cpu-default", "cpu", None))}
    plain, default = stock("-fa", "off", "--no-repack"), stock()
    print(f"\n[synth qwen3moe q4_k] loom {ours}, llama-perplexity -fa off --no-repack {plain:.4f}, default {default:.4f}")
    assert ours["cpu"] == ours["cpu-ref"]
    assert abs(ours["cpu-default"] - ours["cpu-ref"]) / ours["cpu-ref"] < 0.005
    assert abs(ours["cpu-ref"] - plain) / plain < 0.005
    assert abs(ours["cpu-ref"] - default) / default < 0.01


def test_synth_shape_keeps_its_architecture(loom_bin, tmp_path):
    r = run_loom(loom_bin, "model", "synth", "--arch", "llama", "--shape", "qwen3-8b", "-o", tmp_path / "x.gguf",
                 check=False)
    assert r.returncode == 2 and "qwen3-8b is a qwen3 model" in r.stderr, r.stderr  # a usage error
    assert not (tmp_path / "x.gguf").exists()
