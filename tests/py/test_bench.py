"""`loom bench` on the cpu: the JSON it prints (tests, spread, bytes, limit), llama-bench's test
definitions (tgN from an empty context, tgN@dD after a D-token prompt), determinism checked by
the tool itself, and one clear error for bad flags."""
import json

from conftest import model_path, run_loom


def bench(loom_bin, *args):
    r = run_loom(loom_bin, "bench", "-m", model_path("smollm2"), "--device", "cpu-ref", "-t", "2",
                 "-p", "8", "-n", "4", "-r", "2", "--json", *args, timeout=300)
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def test_bench_reports_pp_and_tg_from_an_empty_context(loom_bin):
    res = {j["test"]: j for j in bench(loom_bin)}
    assert set(res) == {"pp8", "tg4"}
    for j in res.values():
        assert j["tokens_per_s"] > 0
        assert j["min"] <= j["tokens_per_s"] <= j["max"]
        assert j["reps"] == 2
        assert j["bytes_per_token"] > 0 and j["flops_per_token"] > 0
        assert j["model"].startswith("SmolLM2")
    tg = res["tg4"]
    assert tg["depth"] == 0
    assert tg["limit"] == "memory bandwidth"
    # Every generated token reads every weight: more bytes per token than a prompt token.
    assert tg["bytes_per_token"] > res["pp8"]["bytes_per_token"]


def test_depth_names_the_test_and_adds_cache_reads(loom_bin):
    res = {j["test"]: j for j in bench(loom_bin, "--depth", "64")}
    assert set(res) == {"pp8", "tg4@d64"}
    deep = res["tg4@d64"]
    assert deep["depth"] == 64
    flat = {j["test"]: j for j in bench(loom_bin)}["tg4"]
    # The same weights, 63 more cache cells read per token on average.
    assert deep["bytes_per_token"] > flat["bytes_per_token"]


def test_bad_flags_get_one_clear_error(loom_bin):
    for args, words in ((["-r", "0"], "must be >= 1"), (["--depth", "-3"], "--depth must be >= 0"),
                        (["--depth", "100000"], "exceeds the model's context")):
        r = run_loom(loom_bin, "bench", "-m", model_path("smollm2"), "--device", "cpu-ref", "-p", "8", "-n", "4",
                     *args, check=False, timeout=120)
        assert r.returncode != 0, args
        assert words in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr and "terminate" not in r.stderr
