"""CLI flag hygiene: out-of-range sampling values and unknown flags get one clear error naming the
flag and exit 2 (before any model is read); llama.cpp's -ngl / --n-gpu-layers / --gpu-layers
choose the device; `loom bench` prints a progress line per step to stderr when it is a pipe."""
import json

import pytest

from conftest import model_path, run_loom

BAD_VALUES = [
    ("--temp", "-1", "must be >= 0"),
    ("--temp", "nan", "not a finite number"),
    ("--top-p", "2", "must be in (0, 1]"),
    ("--top-p", "0", "must be in (0, 1]"),
    ("--top-k", "-5", "must be >= 0"),
    ("--min-p", "1.5", "must be in [0, 1]"),
    ("--min-p", "-0.1", "must be in [0, 1]"),
    ("--repeat-penalty", "0", "must be > 0"),
    ("--repeat-last-n", "-2", "must be >= -1"),
    ("--frequency-penalty", "inf", "not a finite number"),
    ("--seed", "-7", "must be >= -1"),
    ("-n", "-2", "must be >= -1"),
    ("-c", "-1", "must be >= 0"),
]


@pytest.mark.parametrize("command", ["run", "chat"])
@pytest.mark.parametrize("flag,value,words", BAD_VALUES)
def test_out_of_range_values_get_one_error_naming_the_flag(loom_bin, command, flag, value, words):
    # The model does not exist: a flag error must come first, before any file is opened.
    prompt = ["-p", "hi"] if command == "run" else []
    r = run_loom(loom_bin, command, "-m", "/nonexistent.gguf", *prompt, flag, value, check=False, input="",
                 timeout=60)
    assert r.returncode == 2, (flag, value, r.stderr)
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, r.stderr
    long_name = {"-n": "--n-predict", "-c": "--ctx-size"}.get(flag, flag)
    assert long_name in errors[0] and words in errors[0], errors[0]
    assert "nonexistent" not in r.stderr


def test_valid_edge_values_are_accepted(loom_bin):
    r = run_loom(loom_bin, "run", "-m", model_path("smollm2"), "-p", "Hello", "-n", "4", "--temp", "0",
                 "--top-p", "1", "--min-p", "0", "--top-k", "0", "--repeat-last-n", "-1", "--repeat-penalty", "1.1",
                 "--json", timeout=120)
    out = json.loads(r.stdout)
    assert len(out["tokens"]) == 4


@pytest.mark.parametrize("command", ["run", "chat", "bench", "serve", "info"])
def test_unknown_flags_are_named(loom_bin, command):
    r = run_loom(loom_bin, command, "--no-such-flag", "3", check=False, input="", timeout=60)
    assert r.returncode == 2
    assert "--no-such-flag" in r.stderr and "error" in r.stderr, r.stderr


def bench_json(loom_bin, *args):
    r = run_loom(loom_bin, "bench", "-m", model_path("smollm2"), "-t", "2", "-p", "8", "-n", "4", "-r", "2", "--json",
                 *args, timeout=300)
    return r, [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def has_gpu(loom_bin):
    devices = json.loads(run_loom(loom_bin, "devices", "--json").stdout)["devices"]
    return any(d["id"].startswith("cuda") for d in devices)


def test_ngl_zero_runs_on_the_cpu(loom_bin):
    _, res = bench_json(loom_bin, "-ngl", "0")
    assert {j["backend"] for j in res} == {"cpu-ref"}


def test_ngl_with_device_lets_device_win(loom_bin):
    _, res = bench_json(loom_bin, "-ngl", "0", "--device", "cpu")
    assert {j["backend"] for j in res} == {"hrx:cpu"}


@pytest.mark.parametrize("spelling", [["-ngl", "99"], ["--n-gpu-layers", "99"], ["--gpu-layers=99"], ["-ngl=all"]])
def test_ngl_positive_asks_for_the_gpu(loom_bin, spelling):
    r, res = bench_json(loom_bin, *spelling)
    backends = {j["backend"] for j in res}
    if has_gpu(loom_bin):
        assert backends == {"hrx:cuda:0"}
    else:
        # No GPU here: the CPU default, with a note that says so (not "-n gl").
        assert backends == {"cpu-ref"}
        assert "no GPU found" in r.stderr


def test_ngl_is_not_read_as_n(loom_bin):
    # Before -ngl was known, CLI11 read "-ngl 5" as "-n gl"; a bad value now names the flag.
    r = run_loom(loom_bin, "run", "-m", model_path("smollm2"), "-p", "hi", "-ngl", "lots", check=False, timeout=60)
    assert r.returncode == 2
    assert "--n-gpu-layers" in r.stderr and "-ngl" in r.stderr and "n-predict" not in r.stderr


def test_ngl_is_documented_in_help(loom_bin):
    for command in ("run", "serve"):
        out = run_loom(loom_bin, command, "--help").stdout
        assert "--n-gpu-layers" in out and "-ngl" in out


def test_bench_prints_a_line_per_step_when_piped(loom_bin):
    r, res = bench_json(loom_bin)
    lines = [line for line in r.stderr.splitlines() if line.startswith("loom bench: ")]
    text = "\n".join(lines)
    assert "model loaded" in text and "warm-up" in text
    assert sum("repetition" in line for line in lines) == 2, text
    assert "repetition 2/2" in text
    # stdout keeps only the JSON results.
    assert len(res) == 2 and all(line.startswith("{") for line in r.stdout.splitlines())


def test_ops_schedule_overrides_single_knobs_over_the_default(loom_bin):
    """`loom ops bench --schedule` sets the knobs given and keeps the default for the rest; a knob
    outside the op's space is one error naming it and the space."""
    shape = "n_in=256,n_out=64,n_tokens=1,wtype=2"
    default = json.loads(run_loom(loom_bin, "ops", "bench", "matvec", "--device", "cpu", "--shape", shape,
                                  "--reps", "1", "--warmup", "0", "--json").stdout)
    given = json.loads(run_loom(loom_bin, "ops", "bench", "matvec", "--device", "cpu", "--shape", shape,
                                "--schedule", "prefetch=0", "--reps", "1", "--warmup", "0", "--json").stdout)

    def knobs(j):
        return dict(kv.split("=") for kv in j["schedule"].split(","))

    d, g = knobs(default), knobs(given)
    assert d["prefetch"] != "0" and g["prefetch"] == "0"
    assert {k: v for k, v in d.items() if k != "prefetch"} == {k: v for k, v in g.items() if k != "prefetch"}
    bad = run_loom(loom_bin, "ops", "bench", "matvec", "--device", "cpu", "--shape", shape, "--schedule", "warp=4",
                   check=False)
    assert bad.returncode != 0
    assert "no knob 'warp'" in bad.stderr and "prefetch" in bad.stderr, bad.stderr
