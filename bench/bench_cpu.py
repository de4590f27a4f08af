#!/usr/bin/env python3
"""CPU speed of Loom next to llama.cpp's, same machine, same run.

For each model and each Loom device (`--device`: `cpu-ref`, the reference engine; `cpu`, the
engine on HRX kernels generated from Loom IR by the cpp target): `loom bench --json` (prompt
processing pp and generation tg, median over repetitions after a validating warm-up), and
llama.cpp through llama-cpp-python's low-level API in its default, fastest configuration
(batched prompt, repacked weights, same thread count). On a shared machine the load drifts, so
the measurements run in `--rounds` interleaved rounds (each device, then llama.cpp) and the
medians are over every repetition of every round. Prints a markdown table and writes the JSON
(commit, device, load average before and after, every repetition's numbers).

With `--old-bin PATH` another Loom binary (one built from an earlier commit) runs the same
devices in the same rounds, right before this one, so a change is measured against its
predecessor under the same load (the table adds `old` rows and new/old ratios).

With `--llama-native` llama.cpp also runs as its `llama-bench` built for this CPU
(`tools/llama_cpp.sh --native`: GGML_NATIVE=ON, the instruction sets the CPU has but AMX, whose
ggml matmul dies of SIGILL on this project's Xeon;
the bindings' build above is portable and AVX2-pinned, the oracle's configuration), in the same
rounds; the table then compares with the faster of the two per test and names it.

  LOOM_BIN=build/loom python3 bench/bench_cpu.py [--threads 2] [--device cpu --device cpu-ref]
      [--models smollm2,gemma3,FILE.gguf] [--n-prompt 128] [--n-gen 64] [--reps 3] [--rounds 1]
      [--old-bin OLD/loom] [--no-llama] [--llama-native] [--out FILE]
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

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "py"))
from conftest import model_path  # noqa: E402  (binds llama_cpp to the stock build: tools/llama_oracle.py)
import llama_cpp as L  # noqa: E402


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


def summary(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}


def llama_bench(path, threads, n_prompt, n_gen, reps):
    """Per-repetition (pp tok/s, tg tok/s) of llama.cpp, after one warm-up run."""
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
    return runs


def native_llama_bench():
    printed = subprocess.run([str(ROOT / "tools" / "llama_cpp.sh"), "--print"], capture_output=True, text=True,
                             check=True).stdout
    b = pathlib.Path(dict(line.split(" ", 1) for line in printed.splitlines())["native_bin"]) / "llama-bench"
    if not b.exists():
        raise SystemExit(f"{b} is missing: run tools/llama_cpp.sh --native")
    return b


def llama_bench_native(binary, path, threads, n_prompt, n_gen, reps):
    """Per-repetition pp and tg tok/s of llama-bench (its own warm-up run first)."""
    cmd = [str(binary), "-m", str(path), "-t", str(threads), "-p", str(n_prompt), "-n", str(n_gen), "-r", str(reps),
           "-o", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    runs = {"pp": [], "tg": []}
    for t in json.loads(out.stdout):
        runs["pp" if t["n_prompt"] > 0 else "tg"].extend(t["samples_ts"])
    return runs


def loom_bench(loom, path, device, threads, n_prompt, n_gen, reps):
    """`loom bench --json` prints one object per test (ppN, tgN); returns them by test kind."""
    cmd = [str(loom), "bench", "-m", str(path), "--device", device, "-t", str(threads), "-p", str(n_prompt),
           "-n", str(n_gen), "-r", str(reps), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    tests = {}
    for line in out.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            j = json.loads(line)
            tests[j["test"][:2]] = j
    if set(tests) != {"pp", "tg"}:
        raise SystemExit(f"{' '.join(cmd)}: expected pp and tg results, got:\n{out.stdout}")
    return tests


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", action="append", default=None,
                    help="Loom device(s) to measure: cpu-ref (reference engine), cpu (HRX kernels); repeatable, "
                         "or comma-separated (default cpu-ref)")
    ap.add_argument("--models", default="smollm2,gemma3", help="comma-separated: smollm2, gemma3, or GGUF paths")
    ap.add_argument("--old-bin", default=None, help="another loom binary measured in the same rounds")
    ap.add_argument("--no-llama", action="store_true", help="leave llama.cpp out (old-vs-new runs)")
    ap.add_argument("--llama-native", action="store_true",
                    help="also run llama.cpp's llama-bench built for this CPU (tools/llama_cpp.sh --native)")
    ap.add_argument("--n-prompt", type=int, default=128)
    ap.add_argument("--n-gen", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions per round")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (devices, then llama.cpp)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu_reference.json"))
    args = ap.parse_args()
    devices = [d for arg in (args.device or ["cpu-ref"]) for d in arg.split(",") if d]
    models = [m for m in args.models.split(",") if m]
    loom = pathlib.Path(os.environ.get("LOOM_BIN", ROOT / "build" / "loom"))
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    results = {"commit": commit, "device": cpu_name(), "threads": args.threads, "n_prompt": args.n_prompt,
               "n_gen": args.n_gen, "reps": args.reps, "rounds": args.rounds, "loom_devices": devices,
               "llama_cpp_python": L.__version__,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "load_average_before": list(os.getloadavg()),
               "command": " ".join(["python3", "bench/bench_cpu.py"] + sys.argv[1:]), "models": {}}
    rows = []
    old = pathlib.Path(args.old_bin) if args.old_bin else None
    if old:
        results["old_bin"] = str(old)
        results["old_commit"] = (old.parent / "commit").read_text().strip() if (old.parent / "commit").exists() else "unknown"
    variants = ([("old", old)] if old else []) + [("new" if old else "", loom)]
    native = native_llama_bench() if args.llama_native and not args.no_llama else None
    if native:
        results["llama_native_bin"] = str(native)
    for name in models:
        path = pathlib.Path(name) if name.endswith(".gguf") else model_path(name)
        loom_runs = {(v, d): {"pp": [], "tg": [], "objects": []} for v, _ in variants for d in devices}
        llama_runs = {"pp": [], "tg": []}
        native_runs = {"pp": [], "tg": []}
        for rnd in range(args.rounds):
            for d in devices:
                for v, binary in variants:
                    print(f"bench_cpu: {pathlib.Path(name).name} round {rnd + 1}/{args.rounds} {d} {v or 'loom'}",
                          file=sys.stderr, flush=True)
                    tests = loom_bench(binary, path, d, args.threads, args.n_prompt, args.n_gen, args.reps)
                    for what in ("pp", "tg"):
                        # Each object carries the median/min/max of its reps; keep the median per round.
                        loom_runs[(v, d)][what].append(tests[what]["tokens_per_s"])
                    loom_runs[(v, d)]["objects"].extend(tests.values())
            if not args.no_llama:
                print(f"bench_cpu: {pathlib.Path(name).name} round {rnd + 1}/{args.rounds} llama.cpp", file=sys.stderr,
                      flush=True)
                for pp, tg in llama_bench(path, args.threads, args.n_prompt, args.n_gen, args.reps):
                    llama_runs["pp"].append(pp)
                    llama_runs["tg"].append(tg)
            if native:
                print(f"bench_cpu: {pathlib.Path(name).name} round {rnd + 1}/{args.rounds} llama-bench (native)",
                      file=sys.stderr, flush=True)
                for w, xs in llama_bench_native(native, path, args.threads, args.n_prompt, args.n_gen, args.reps).items():
                    native_runs[w].extend(xs)
        entry = {}
        if not args.no_llama:
            entry["llama_cpp"] = {f"{w}_tokens_per_second": summary(llama_runs[w]) for w in ("pp", "tg")}
        if native:
            entry["llama_cpp_native"] = {f"{w}_tokens_per_second": summary(native_runs[w]) for w in ("pp", "tg")}
        for v, _ in variants:
            for d in devices:
                key = f"loom_{v + '_' if v else ''}{d}"
                entry[key] = {f"{w}_tokens_per_second": summary(loom_runs[(v, d)][w]) for w in ("pp", "tg")}
                entry[key]["bench_objects"] = loom_runs[(v, d)]["objects"]
        if old:
            # Paired per round (old ran right before new): the ratios cancel drift between rounds.
            entry["new_over_old"] = {
                f"{d} {w}": summary([n / o for n, o in zip(loom_runs[("new", d)][w], loom_runs[("old", d)][w])])
                for d in devices for w in ("pp", "tg")}
        results["models"][pathlib.Path(name).name] = entry
        for v, _ in variants:
            for d in devices:
                for what in ("pp", "tg"):
                    med = lambda key: entry[key][f"{what}_tokens_per_second"]["median"]  # noqa: E731
                    a = med(f"loom_{v + '_' if v else ''}{d}")
                    n = args.n_prompt if what == "pp" else args.n_gen
                    best = "llama_cpp"
                    if native and med("llama_cpp_native") > med("llama_cpp"):
                        best = "llama_cpp_native"
                    tag = " (native)" if best == "llama_cpp_native" else (" (portable)" if native else "")
                    peer = f"{med(best):.1f}{tag} | {a / med(best):.2f}" if not args.no_llama else "- | -"
                    paired = entry.get("new_over_old", {}).get(f"{d} {what}")
                    vs_old = (f" | {paired['median']:.3f} ({paired['min']:.2f}-{paired['max']:.2f})" if old and v == "new"
                              else (" | -" if old else ""))
                    rows.append(f"| {pathlib.Path(name).name} | {d} {v} | {what}{n} | {a:.1f} | {peer}{vs_old} |")
    results["load_average_after"] = list(os.getloadavg())
    print(f"device: {results['device']}, {args.threads} threads, commit {commit}, load average "
          f"{results['load_average_before'][0]:.1f} before, {results['load_average_after'][0]:.1f} after")
    print("| model | loom device | test | loom tok/s | llama.cpp tok/s | loom / llama.cpp |" + (" new / old (paired per round: median, range) |" if old else ""))
    print("|---|---|---|---|---|---|" + ("---|" if old else ""))
    print("\n".join(rows))
    pathlib.Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
