"""`loom perplexity` against stock llama.cpp's llama-perplexity (built by tools/llama_cpp.sh from
the pinned llama-cpp-python sdist) on a text the project ships, the KL divergence of the cpu
device from cpu-ref, and the errors bad input gets."""
import json
import re
import subprocess

import pytest

from conftest import ROOT, model_path, run_loom

TEXT = ROOT / "tests" / "data" / "perplexity.txt"
FINAL = re.compile(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)")
ARGS = ["-c", "128", "-t", "2"]   # all 8 chunks of the text


@pytest.fixture(scope="module")
def llama_bin(llama_cpp_bin):
    return llama_cpp_bin


def llama_ppl(llama_bin, model, *extra):
    r = subprocess.run([f"{llama_bin}/llama-perplexity", "-m", str(model), "-f", str(TEXT), "-b", "128", *ARGS, *extra],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    m = FINAL.search(r.stdout + r.stderr)
    assert m, (r.stdout + r.stderr)[-3000:]
    return float(m.group(1))


KL_ARGS = ["--chunks", "4"]


def loom_ppl(loom_bin, model, *extra, device="cpu-ref"):
    r = run_loom(loom_bin, "perplexity", "-m", model, "-f", TEXT, "--device", device, "--json", *ARGS, *extra)
    return json.loads(r.stdout)


def test_perplexity_agrees_with_llama_perplexity(loom_bin, llama_bin):
    model = model_path("smollm2")
    ours = loom_ppl(loom_bin, model)
    assert ours["chunks"] == 8 and ours["tokens_scored"] == 8 * 63
    # The configuration whose numerics Loom's reference path mirrors (unfused attention, GGUF row
    # weights): the same definition, so the perplexities agree within 0.5%.
    plain = llama_ppl(llama_bin, model, "-fa", "off", "--no-repack")
    # llama.cpp's default CPU configuration (flash attention, repacked weights) moves its own
    # value by a few tenths of a percent; printed beside, held to 1%.
    default = llama_ppl(llama_bin, model)
    print(f"loom {ours['ppl']:.4f}, llama-perplexity -fa off --no-repack {plain:.4f}, default {default:.4f}")
    assert abs(ours["ppl"] - plain) / plain < 0.005
    assert abs(ours["ppl"] - default) / default < 0.01


def test_kl_divergence_of_cpu_from_cpu_ref(loom_bin, tmp_path):
    model = model_path("smollm2")
    base = tmp_path / "base.lp"
    saved = loom_ppl(loom_bin, model, *KL_ARGS, "--kl-divergence-base", base)
    assert base.stat().st_size > 4 * 63 * 4 * 1000
    kl = loom_ppl(loom_bin, model, *KL_ARGS, "--kl-divergence-base", base, "--kl-divergence", device="cpu")
    assert kl["base_ppl"] == pytest.approx(saved["ppl"], rel=1e-9)
    assert kl["kld_mean"] < 0.001 and kl["same_top"] >= 0.99, kl


def test_kl_divergence_refuses_another_models_base(loom_bin, tmp_path):
    # A base run of another model (another vocabulary) is named as such, not compared.
    base = tmp_path / "base.lp"
    loom_ppl(loom_bin, model_path("smollm2"), *KL_ARGS, "--kl-divergence-base", base)
    r = run_loom(loom_bin, "perplexity", "-m", model_path("gemma3"), "-f", TEXT, *ARGS, *KL_ARGS, "--kl-divergence-base", base,
                 "--kl-divergence", check=False)
    assert r.returncode == 2 and "vocabulary" in r.stderr, r.stderr


def test_bad_input_gets_one_clear_error(loom_bin, tmp_path):
    model = model_path("smollm2")
    short = tmp_path / "short.txt"
    short.write_text("Too short to measure.")
    cases = [
        (["-f", tmp_path / "missing.txt"], "missing.txt"),
        (["-f", short], "needs at least"),
        (["-f", TEXT, "--kl-divergence"], "--kl-divergence-base"),
        (["-f", TEXT, "--kl-divergence", "--kl-divergence-base", TEXT], "not a loom perplexity base file"),
        (["-f", TEXT, "-c", "2"], "at least 4"),
    ]
    for args, words in cases:
        r = run_loom(loom_bin, "perplexity", "-m", model, "--device", "cpu-ref", *args, check=False)
        assert r.returncode != 0 and words in r.stderr, (args, r.returncode, r.stderr)
        assert r.stderr.count("error") == 1, r.stderr
