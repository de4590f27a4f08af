"""Oracle tests for Loom's reference quantization formats (`loom tensor`).

Dequantization is compared bit for bit with the gguf package (every tensor of both models, and
random blocks of every type). Quantization is compared byte for byte with the gguf package where
it can quantize, and with ggml's own reference quantizers (quantize_row_*_ref, called through
ctypes from the libggml-base of the stock llama.cpp the oracle tests use) for the K formats and the activation
formats Q8_1 / Q8_K, which the gguf package cannot produce.
"""
import ctypes
import pathlib

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q, GGUFReader
from gguf.quants import dequantize as gguf_dequantize, quantize as gguf_quantize

import llama_oracle
from conftest import model_path, run_loom

# Types whose dequantization both Loom and the gguf package implement.
DEQUANT_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                 "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"]
# Types the gguf package can quantize (its output must equal Loom's byte for byte).
GGUF_QUANT_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
# Types only ggml itself can quantize: oracle = libggml-base's quantize_row_<type>_ref.
GGML_QUANT_TYPES = ["Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"]
# Q8_1 and Q8_K are not in the gguf package's size table.
EXTRA_SIZES = {"Q8_1": (32, 36), "Q8_K": (256, 292)}

# Byte offsets of the fp16 scale fields inside each block (everything else may be any bytes).
FP16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
               "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
               "IQ4_NL": [0], "IQ4_XS": [0]}

# Worst per-block relative RMS error of dequant(quant(x)) on the random data below; about 25%
# above what ggml's algorithms reach, so a worse encoder fails.
RMS_BOUNDS = {"Q8_1": 0.008, "Q2_K": 0.42, "Q3_K": 0.215, "Q4_K": 0.1, "Q5_K": 0.05,
              "Q6_K": 0.027, "Q8_K": 0.011}


def sizes(name):
    return EXTRA_SIZES.get(name) or GGML_QUANT_SIZES[Q[name]]


def assert_same_floats(got, want, what):
    """Bit-exact float32 equality, counting any NaN equal to any NaN."""
    got = np.ascontiguousarray(got, dtype=np.float32).reshape(-1)
    want = np.ascontiguousarray(want, dtype=np.float32).reshape(-1)
    assert got.shape == want.shape, f"{what}: {got.shape} values, expected {want.shape}"
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    if not same.all():
        i = int(np.argmin(same))
        raise AssertionError(f"{what}: {int((~same).sum())} of {same.size} values differ; first at "
                             f"{i}: loom {got[i]!r} vs oracle {want[i]!r}")


def loom_tensor(loom_bin, tmp_path, verb, qtype, data: np.ndarray) -> np.ndarray:
    src, dst = tmp_path / f"{verb}_{qtype}.in", tmp_path / f"{verb}_{qtype}.out"
    data.tofile(src)
    run_loom(loom_bin, "tensor", verb, "--type", qtype.lower(), src, dst)
    return np.fromfile(dst, dtype=np.float32 if verb == "dequant" else np.uint8)


def random_floats(rng, n_blocks, block):
    """Blocks with assorted magnitudes and shapes, never all zeros, plus hard cases."""
    scale = 10.0 ** rng.uniform(-4, 4, size=(n_blocks, 1))
    shift = np.where(rng.random((n_blocks, 1)) < 0.3, rng.normal(size=(n_blocks, 1)) * scale, 0)
    x = np.where(rng.random((n_blocks, 1)) < 0.5, rng.normal(size=(n_blocks, block)),
                 rng.uniform(-1, 1, size=(n_blocks, block))) * scale + shift
    x[1] = 0.0
    x[1, 5] = -3.0                                 # one non-zero value in a zero block
    x[2] = 0.25                                    # constant block (zero range)
    x[3] = np.arange(block) % 32 - 16 + 0.5        # exact .5 ties for the 8-bit formats...
    x[3, 0] = 127.0                                #   ...with the scale exactly 1
    x[4] = np.abs(x[4])                            # all positive
    x[5] = -np.abs(x[5])                           # all negative
    x[6, ::2] = 0.0                                # half zeros
    return x.astype(np.float32)


@pytest.fixture(scope="session")
def ggml():
    """libggml-base of the stock llama.cpp (tools/llama_cpp.sh): ggml's own reference quantizers."""
    path = llama_oracle.stock_bin() / "libggml-base.so"
    assert path.exists(), f"{path} missing: run tools/llama_cpp.sh (tools/setup.sh --dev does)"
    lib = ctypes.CDLL(str(path))
    for name in GGML_QUANT_TYPES:
        fn = getattr(lib, f"quantize_row_{name.lower().replace('_k', '_K')}_ref")
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn.restype = None
    return lib


def ggml_quantize(lib, name, x):
    block, type_size = sizes(name)
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.zeros(x.size // block * type_size, dtype=np.uint8)
    getattr(lib, f"quantize_row_{name.lower().replace('_k', '_K')}_ref")(
        x.ctypes.data, out.ctypes.data, x.size)
    return out


# ------------------------------------------------------------------ (1) real model tensors

def test_dump_all_matches_gguf(loom_bin, model, tmp_path):
    out = tmp_path / "dump"
    run_loom(loom_bin, "tensor", "dump", "-m", model, "--all", "-o", out)
    reader = GGUFReader(model)
    names = {t.name for t in reader.tensors}
    assert {p.name[:-len(".f32")] for p in out.glob("*.f32")} == names
    types_seen = set()
    for t in reader.tensors:
        path = out / f"{t.name}.f32"
        got = np.memmap(path, dtype=np.float32, mode="r")
        assert got.size == int(t.n_elements), f"{t.name}: {got.size} values, expected {t.n_elements}"
        types_seen.add(t.tensor_type.name)
        data = t.data.reshape(-1, t.data.shape[-1]) if t.data.ndim > 1 else t.data.reshape(1, -1)
        rows_per_chunk = max(1, (1 << 22) // max(1, data.shape[1]))  # bounds numpy's temporaries
        row_elems = int(t.shape[0])
        for r0 in range(0, data.shape[0], rows_per_chunk):
            chunk = np.ascontiguousarray(data[r0:r0 + rows_per_chunk])
            want = gguf_dequantize(chunk, t.tensor_type)
            lo = r0 * row_elems if t.data.ndim > 1 else 0
            assert_same_floats(got[lo:lo + want.size], want, f"{pathlib.Path(model).name}:{t.name}")
        del got
        path.unlink()  # pytest keeps recent tmp dirs: do not leave a GiB of floats behind
    assert len(types_seen) >= 3, f"expected several tensor types, saw {types_seen}"


def test_dump_single_tensor_and_errors(loom_bin, tmp_path):
    model = model_path("smollm2")
    reader = GGUFReader(model)
    t = next(t for t in reader.tensors if t.tensor_type == Q.Q4_1)
    out = tmp_path / "one.f32"
    run_loom(loom_bin, "tensor", "dump", "-m", model, t.name, "-o", out)
    assert_same_floats(np.fromfile(out, dtype=np.float32), gguf_dequantize(t.data, t.tensor_type), t.name)

    r = run_loom(loom_bin, "tensor", "dump", "-m", model, "no.such.tensor", "-o", out, check=False)
    assert r.returncode != 0 and "no.such.tensor" in r.stderr and r.stderr.count("error") == 1


def test_cli_errors(loom_bin, tmp_path):
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x00" * 35)  # not a whole Q8_0 block (34 bytes)
    r = run_loom(loom_bin, "tensor", "dequant", "--type", "q8_0", odd, tmp_path / "o", check=False)
    assert r.returncode != 0 and "34" in r.stderr, r.stderr
    r = run_loom(loom_bin, "tensor", "dequant", "--type", "q9_9", odd, tmp_path / "o", check=False)
    assert r.returncode != 0 and "q9_9" in r.stderr, r.stderr
    floats = tmp_path / "f.f32"
    np.ones(48, dtype=np.float32).tofile(floats)  # 48 is not a multiple of 32
    r = run_loom(loom_bin, "tensor", "quant", "--type", "q4_0", floats, tmp_path / "o", check=False)
    assert r.returncode != 0 and "48" in r.stderr, r.stderr
    r = run_loom(loom_bin, "tensor", "quant", "--type", "iq2_xxs", floats, tmp_path / "o", check=False)
    assert r.returncode != 0 and "iq2_xxs" in r.stderr, r.stderr
    for args in (["quant", "--type", "q8_0", floats], ["dequant", "--type", "f32", tmp_path / "missing"]):
        r = run_loom(loom_bin, "tensor", *args, tmp_path / "o", check=False)
        assert r.returncode != 0 and r.stderr.startswith("loom: error"), r.stderr


# ------------------------------------------------------------------ (2) random blocks

def random_fp16(rng, n):
    """Random finite halves: any sign, exponent 0..30 (zeros, subnormals, normals)."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
    exp = rng.integers(0, 31, size=n, dtype=np.uint32)
    return ((bits & 0x83FF) | (exp << 10)).astype(np.uint16)


@pytest.mark.parametrize("qtype", DEQUANT_TYPES)
def test_random_blocks_dequant(loom_bin, tmp_path, qtype):
    rng = np.random.default_rng(DEQUANT_TYPES.index(qtype))
    block, type_size = sizes(qtype)
    n_blocks = 4096 if block == 1 else 512
    if qtype == "F32":
        raw = rng.normal(size=n_blocks).astype(np.float32) * np.float32(10.0) ** rng.integers(-30, 30, n_blocks)
        raw = raw.astype(np.float32).view(np.uint8)
    elif qtype == "F16":
        raw = random_fp16(rng, n_blocks).view(np.uint8)
    elif qtype == "BF16":
        bits = rng.integers(0, 1 << 16, size=n_blocks, dtype=np.uint32)
        bits = np.where((bits & 0x7F80) == 0x7F80, bits & 0xBFFF, bits)  # finite only
        raw = bits.astype(np.uint16).view(np.uint8)
    else:
        blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
        for off in FP16_FIELDS[qtype]:
            blocks[:, off:off + 2] = random_fp16(rng, n_blocks).view(np.uint8).reshape(-1, 2)
        raw = blocks.reshape(-1)
    want = gguf_dequantize(raw.reshape(-1, type_size * (64 if block == 1 else 1)), Q[qtype])
    got = loom_tensor(loom_bin, tmp_path, "dequant", qtype, raw)
    assert np.isfinite(want).all(), "test data should decode to finite values"
    assert_same_floats(got, want, f"random {qtype} blocks")


# ------------------------------------------------------------------ (3) quantization

@pytest.mark.parametrize("qtype", GGUF_QUANT_TYPES)
def test_quant_matches_gguf(loom_bin, tmp_path, qtype):
    rng = np.random.default_rng(1000 + GGUF_QUANT_TYPES.index(qtype))
    x = random_floats(rng, 256, 256)
    got = loom_tensor(loom_bin, tmp_path, "quant", qtype, x)
    want = gguf_quantize(x, Q[qtype]).view(np.uint8).reshape(-1)
    assert got.size == want.size
    diff = np.flatnonzero(got != want)
    assert diff.size == 0, f"{qtype}: {diff.size} bytes differ, first at byte {diff[0]}"


@pytest.mark.parametrize("qtype", GGML_QUANT_TYPES)
def test_quant_matches_ggml_and_round_trips(loom_bin, tmp_path, ggml, qtype):
    rng = np.random.default_rng(2000 + GGML_QUANT_TYPES.index(qtype))
    block, type_size = sizes(qtype)
    x = random_floats(rng, 256, 256)
    got = loom_tensor(loom_bin, tmp_path, "quant", qtype, x)
    want = ggml_quantize(ggml, qtype, x)
    if qtype == "Q8_K":
        # ggml leaves bsums unwritten for an all-zero block; Loom writes zeros. Compare the rest.
        zero_blocks = ~x.reshape(-1, block).any(axis=1)
        assert not zero_blocks.any(), "test data has no all-zero K block"
    diff = np.flatnonzero(got != want)
    assert diff.size == 0, (f"{qtype}: {diff.size} bytes differ from ggml, first in block "
                            f"{diff[0] // type_size} at offset {diff[0] % type_size}")

    # Round trip: Loom's own decoder, and (where it can) the gguf package's decoder of Loom's bytes.
    y = loom_tensor(loom_bin, tmp_path, "dequant", qtype, got)
    if qtype in DEQUANT_TYPES:
        assert_same_floats(y, gguf_dequantize(got.reshape(-1, type_size), Q[qtype]), f"{qtype} round trip")
    else:  # Q8_1 / Q8_K: x = d * q, d an fp16 (Q8_1) or a float (Q8_K) at the block start
        b = got.reshape(-1, type_size)
        d = b[:, :2].copy().view(np.float16).astype(np.float32) if qtype == "Q8_1" else b[:, :4].copy().view(np.float32)
        qs = b[:, 4:4 + block].copy().view(np.int8).astype(np.float32)
        assert_same_floats(y, d * qs, f"{qtype} round trip")
    # Error bound on the random blocks (the first 8 are hand-made) of moderate magnitude: far
    # outside it the fp16 super-block scales themselves under- or overflow, by design of the format.
    xb, yb = x.reshape(-1, 256).astype(np.float64), y.reshape(-1, 256).astype(np.float64)
    amax = np.abs(xb).max(axis=1)
    judged = (np.arange(len(xb)) >= 8) & (amax >= 1e-2) & (amax <= 1e3)
    assert judged.sum() >= 80
    rel = np.sqrt(((yb - xb) ** 2).sum(axis=1)[judged] / (xb ** 2).sum(axis=1)[judged])
    worst = rel.max()
    assert 0 < worst <= RMS_BOUNDS[qtype], f"{qtype}: worst relative RMS error {worst:.5f}"


def test_quant_q8_1_side_sum(loom_bin, tmp_path):
    """Q8_1's s field is fp16(d * sum(q)) with d the unrounded scale: check against the data."""
    rng = np.random.default_rng(7)
    x = random_floats(rng, 64, 32)
    b = loom_tensor(loom_bin, tmp_path, "quant", "Q8_1", x).reshape(-1, 36)
    amax = np.abs(x).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    qsum = b[:, 4:].copy().view(np.int8).astype(np.int64).sum(axis=1)
    with np.errstate(over="ignore"):  # large blocks overflow fp16 to inf, in Loom as in ggml
        want_s = (qsum.astype(np.float32) * d).astype(np.float16)
    got_s = b[:, 2:4].copy().view(np.uint16).reshape(-1)
    assert np.array_equal(got_s, want_s.view(np.uint16))
