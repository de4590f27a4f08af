#!/usr/bin/env python3
"""CPU speed of Loom's reference engine next to llama.cpp's, same machine, same run.

For each model: `loom bench --json` (prompt processing pp and generation tg, median over
repetitions after a validating warm-up) and llama.cpp through llama-cpp-python's low-level API in
its default, fastest configuration (batched prompt, repacked weights, same thread count). Prints a
markdown table and writes bench/results/cpu_reference.json (commit, device, numbers).

  LOOM_BIN=build/loom python3 bench/bench_cpu.py [--threads 2] [--n-prompt 128] [--n-gen 64] [--reps 3]
"""
import argparse
import ctypes
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import llama_cpp as L

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "py"))
from conftest import model_path  # noqa: E402


@L.llama_log_callback
def _quiet(level, text, user_data):
    pass


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def llama_bench(path, threads, n_prompt, n_gen, reps):
    L.llama_log_set(_quiet, ctypes.c_void_p(0))
    L.llama_backend_init()
    model = L.llama_model_load_from_file(str(path).encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx = n_prompt + n_gen + 256
    cp.n_batch = max(512, n_prompt)
    cp.n_threads = threads
    cp.n_threads_batch = threads
    ctx = L.llama_init_from_model(model, cp)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    prompt = [(i * 7919 + 101) % n_vocab for i in range(n_prompt)]

    def once():
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        arr = (L.llama_token * n_prompt)(*prompt)
        t0 = time.perf_counter()
        assert L.llama_decode(ctx, L.llama_batch_get_one(arr, n_prompt)) == 0
        pp = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(n_gen):
            logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            tok = (L.llama_token * 1)(int(np.argmax(logits)))
            assert L.llama_decode(ctx, L.llama_batch_get_one(tok, 1)) == 0
        tg = time.perf_counter() - t0
        return n_prompt / pp, n_gen / tg

    once()  # warm-up
    runs = [once() for _ in range(reps)]
    L.llama_free(ctx)
    L.llama_model_free(model)
    summary = lambda xs: {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}
    return {"pp_tokens_per_second": summary([r[0] for r in runs]),
            "tg_tokens_per_second": summary([r[1] for r in runs])}


def loom_bench(loom, path, threads, n_prompt, n_gen, reps):
    out = subprocess.run([str(loom), "bench", "-m", str(path), "-t", str(threads), "-p", str(n_prompt),
                          "-n", str(n_gen), "-r", str(reps), "--json"], capture_output=True, text=True, check=True)
    # `loom bench --json` prints one object per test (ppN, tgN), one per line.
    tests = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    res = {"raw": tests}
    for t in tests:
        what = "pp" if t["test"].startswith("pp") else "tg"
        res[f"{what}_tokens_per_second"] = {"median": t["tokens_per_s"], "min": t["min"], "max": t["max"],
                                            "stdev": t["stdev"]}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-prompt", type=int, default=128)
    ap.add_argument("--n-gen", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu_reference.json"))
    args = ap.parse_args()
    loom = pathlib.Path(os.environ.get("LOOM_BIN", ROOT / "build" / "loom"))
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    results = {"commit": commit, "device": cpu_name(), "threads": args.threads, "n_prompt": args.n_prompt,
               "n_gen": args.n_gen, "reps": args.reps, "llama_cpp_python": L.__version__,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "load_average": os.getloadavg()[0], "models": {}}
    rows = []
    for name in ("smollm2", "gemma3"):
        path = model_path(name)
        lm = loom_bench(loom, path, args.threads, args.n_prompt, args.n_gen, args.reps)
        ll = llama_bench(path, args.threads, args.n_prompt, args.n_gen, args.reps)
        results["models"][name] = {"loom": lm, "llama_cpp": ll}
        for what in ("pp", "tg"):
            a = lm[f"{what}_tokens_per_second"]["median"]
            b = ll[f"{what}_tokens_per_second"]["median"]
            n = args.n_prompt if what == "pp" else args.n_gen
            rows.append(f"| {name} | {what}{n} | {a:.1f} | {b:.1f} | {a / b:.2f} |")
    print(f"device: {results['device']}, {args.threads} threads, commit {commit}, "
          f"load average {results['load_average']:.1f}")
    print("| model | test | loom tok/s | llama.cpp tok/s | loom / llama.cpp |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    pathlib.Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
