#!/usr/bin/env python3
"""Runs evolve's benchmark suite (bench/suite/suite.json): a bounded search per problem on one
device, then per problem whether it was solved correctly, the winner's speed-up over the
problem's baseline (on the cpu: the op file's kernel at its default knobs, the plain SIMT form),
the evaluations spent, and for the suite the correctness rate and fast_1 / fast_2 (the share of
problems solved correctly and more than 1x / 2x faster than the baseline). Prints one line per
problem as it finishes (flushed, also into a pipe or a file) and writes JSON with the commit,
device and command.

  python3 bench/evolve_suite.py --budget 25s -o bench/results/DATE-cpu-evolve-suite.json
  python3 bench/evolve_suite.py --small --budget 1 --only relu,softmax      # quick: the ops' test shapes
  python3 bench/evolve_suite.py --device cuda:0 --budget 6s -o bench/results/DATE-h200-evolve-suite.json

On a GPU the peer is PyTorch eager (bench/suite/torch_eager.py; `--peer torch`, the default on
cuda): per problem, PyTorch's answer is checked against the op file's reference, then timed the
way the judge times a candidate (host clock around a call and a synchronize, inputs rotating over
a working set larger than L2), and fast_p is also reported against it. The output file is
written after every problem; `--resume` keeps the problems it already holds (a run cut short
by a time limit goes on where it stopped).

"Correct" means what the judge proves for every accepted candidate: fresh random inputs against
the op file's C++ reference, guard bytes, unchanged inputs, repeated launches, the outputs of the
timed launches, and the held-out shapes (the op's smallest test shape and sizes moved by one).
The winner is the job's confirmed winner (re-timed against the baseline in interleaved rounds);
its speed-up is min(search, re-timed), as the kernel store keeps it.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import pathlib
import platform
import re
import sqlite3
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def log(msg):
    print(msg, flush=True)


def commit():
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def problem_shape(p, suite_dir, small):
    if not small:
        return p["shape"]
    op = json.loads((suite_dir / p["op_file"]).read_text())
    return op["test_shapes"][-1]  # the larger of an op's test shapes; the smaller is held out


def job_facts(db, job):
    con = sqlite3.connect(db)
    try:
        j = con.execute("SELECT status, reason, baseline_us, best_candidate, confirmed_speedup, confirmed_us, "
                        "confirmed_baseline_us, confirmed_rounds, elapsed_s FROM jobs WHERE id = ?", (job,)).fetchone()
        rows = con.execute("SELECT status, COUNT(*) FROM candidates WHERE job = ? GROUP BY status", (job,)).fetchall()
        w = con.execute("SELECT seq, status, body, speedup, median_us, gbps, frac_peak FROM candidates WHERE id = ?",
                        (j[3],)).fetchone() if j and j[3] else None
        peak = con.execute("SELECT read_gbps FROM device_peaks").fetchone()
    finally:
        con.close()
    return j, dict(rows), w, peak[0] if peak else None


def parse_shape(shape):
    return {k: int(v) for k, v in (kv.split("=", 1) for kv in shape.split(","))}


def peer_torch(a, p, suite_dir, shape, out):
    """PyTorch eager on the same problem (correctness against the reference, then its time)."""
    sys.path.insert(0, str(suite_dir))
    import torch_eager  # noqa: E402  (bench/suite/torch_eager.py; needs torch)
    op = json.loads((suite_dir / p["op_file"]).read_text())
    try:
        t = torch_eager.measure(op, parse_shape(shape), device=a.device.replace("cuda", "cuda", 1),
                                ws_factor=a.ws_factor, time_s=a.peer_time)
    except Exception as e:  # one problem's peer failing must not lose the suite's other results
        out["torch_error"] = f"{type(e).__name__}: {e}"[:400]
        return
    out.update(t)
    if out.get("correct") and t.get("torch_correct") and out.get("winner_us"):
        out["speedup_vs_torch"] = round(t["torch_us"] / out["winner_us"], 3)
    else:
        out["speedup_vs_torch"] = 0.0


def run_problem(a, p, suite_dir, db):
    out = run_loom(a, p, suite_dir, db)
    if a.peer == "torch":
        peer_torch(a, p, suite_dir, out["shape"], out)
    return out


def run_loom(a, p, suite_dir, db):
    shape = problem_shape(p, suite_dir, a.small)
    op_file = suite_dir / p["op_file"]
    cmd = [a.loom, "evolve", "run", "--op-file", str(op_file), "--shape", shape, "--device", a.device,
           "--budget", a.budget, "--seed", str(a.seed), "--holdout", str(a.holdout), "--trials", str(a.trials),
           "--time-per-candidate", str(a.time_per_candidate), "--confirm-rounds", str(a.confirm_rounds),
           "--ws-factor", str(a.ws_factor), "--no-store", "--db", db]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    wall = time.time() - t0
    out = {"name": p["name"], "level": p["level"], "bound": p["bound"], "op_file": p["op_file"], "shape": shape,
           "wall_s": round(wall, 1), "correct": False, "speedup": 0.0}
    job = None
    for line in r.stdout.splitlines():
        if line.startswith("job ") and " in " in line:
            job = int(line.split()[1])
            break
    if r.returncode != 0 or job is None:
        out["error"] = (r.stderr.strip() or r.stdout.strip())[-600:]
        return out
    j, counts, w, peak = job_facts(db, job)
    status, reason, baseline_us, best, conf, conf_us, conf_base_us, rounds, elapsed = j
    out.update({"job": job, "status": status, "evaluations": sum(counts.values()), "by_status": counts,
                "baseline_us": baseline_us, "holdout_shapes": held_out(r.stdout)})
    if status != "done" or not w or w[1] != "ok":
        out["error"] = reason or f"job {status}, winner {w[1] if w else 'none'}"
        return out
    seq, _, body, search_speedup, median_us, gbps, frac = w
    speedup = 1.0 if seq == 0 else (min(conf, search_speedup) if rounds and conf else search_speedup)
    out.update({"correct": True, "winner_seq": seq, "winner_knobs": json.loads(body).get("knobs", {}),
                "speedup": round(speedup, 3), "search_speedup": round(search_speedup or 0, 3),
                "confirmed_speedup": round(conf, 3) if conf else None, "confirmed_rounds": rounds,
                "winner_us": round(conf_us or median_us, 1), "confirmed_baseline_us": conf_base_us})
    if gbps and median_us:
        nbytes = gbps * median_us * 1e3  # GB/s * us = 1e3 bytes
        t = conf_us or median_us
        out["winner_gbps"] = round(nbytes / (t * 1e3), 2)
        base_t = conf_base_us or baseline_us
        out["baseline_gbps"] = round(nbytes / (base_t * 1e3), 2) if base_t else None
        if peak:
            out["winner_frac_read_peak"] = round(out["winner_gbps"] / peak, 3)
            out["baseline_frac_read_peak"] = round(out["baseline_gbps"] / peak, 3) if out["baseline_gbps"] else None
    return out


def held_out(stdout):
    for line in stdout.splitlines():
        if "held-out shapes:" in line:
            return line.split("held-out shapes:", 1)[1].strip()
    return ""


def summary(results, ps):
    n = len(results)
    correct = [r for r in results if r["correct"]]
    s = {"problems": n, "correct": len(correct), "correctness_rate": round(len(correct) / n, 3) if n else 0}
    for p in ps:
        k = sum(1 for r in correct if r["speedup"] > p)
        s[f"fast_{p:g}"] = round(k / n, 3) if n else 0
        s[f"fast_{p:g}_count"] = k
    for lvl in sorted({r["level"] for r in results}):
        sub = [r for r in results if r["level"] == lvl]
        s[f"level_{lvl}"] = {"problems": len(sub), "correct": sum(r["correct"] for r in sub),
                             **{f"fast_{p:g}": sum(1 for r in sub if r["correct"] and r["speedup"] > p) for p in ps}}
    mem = [r for r in correct if r["bound"] == "memory" and r.get("winner_frac_read_peak")]
    if mem:
        fr = sorted(r["winner_frac_read_peak"] for r in mem)
        s["memory_bound_winner_frac_read_peak"] = {"median": fr[len(fr) // 2], "min": fr[0], "max": fr[-1],
                                                   "at_least_half": sum(f >= 0.5 for f in fr), "of": len(fr)}
    s["evaluations"] = sum(r.get("evaluations", 0) for r in results)
    hours = sum(r.get("wall_s", 0) for r in results) / 3600
    s["evaluations_per_device_hour"] = round(s["evaluations"] / hours) if hours else 0
    peer = [r for r in results if "torch_correct" in r or "torch_error" in r]
    if peer:
        t = {"problems": len(peer), "torch_correct": sum(1 for r in peer if r.get("torch_correct")),
             "torch_errors": [r["name"] for r in peer if "torch_error" in r]}
        for p in ps:
            k = sum(1 for r in peer if r.get("speedup_vs_torch", 0) > p)
            t[f"fast_{p:g}"] = round(k / len(peer), 3)
            t[f"fast_{p:g}_count"] = k
        sp = sorted(r["speedup_vs_torch"] for r in peer if r.get("speedup_vs_torch"))
        t["median_speedup"] = sp[len(sp) // 2] if sp else 0
        s["vs_pytorch_eager"] = t
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loom", default=os.environ.get("LOOM_BIN", str(ROOT / "build" / "loom")))
    ap.add_argument("--suite", default=str(ROOT / "bench" / "suite" / "suite.json"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--budget", default="25s", help="per problem: time and/or evaluations (loom evolve run --budget)")
    ap.add_argument("--only", default="", help="comma-separated problem names")
    ap.add_argument("--small", action="store_true", help="each op's larger test shape instead of the problem's shape")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--holdout", type=int, default=2)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--time-per-candidate", type=float, default=0.2)
    ap.add_argument("--confirm-rounds", type=int, default=3, help="re-timing rounds of the finalists (loom's default: 5)")
    ap.add_argument("--ws-factor", type=float, default=1.0,
                    help="timing working set in last-level caches (loom's default: 4; capped at 1 GiB on the cpu)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per problem before it counts as failed")
    ap.add_argument("--db", default="", help="evolve database (default: a fresh temporary file)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="problems searched at once (default 1: timings of parallel jobs disturb each other)")
    ap.add_argument("-p", "--fast-p", type=float, nargs="+", default=[1.0, 2.0])
    ap.add_argument("--peer", choices=["none", "torch"], default="",
                    help="the peer timed beside Loom (default: torch on cuda devices, none on the cpu)")
    ap.add_argument("--peer-time", type=float, default=0.3, help="seconds of timing per problem for the peer")
    ap.add_argument("--resume", action="store_true", help="keep the problems the output file already holds")
    ap.add_argument("-o", "--output", default="")
    a = ap.parse_args()
    if not a.peer:
        a.peer = "torch" if a.device.startswith("cuda") else "none"
    suite_path = pathlib.Path(a.suite)
    suite = json.loads(suite_path.read_text())
    problems = suite["problems"]
    if a.only:
        names = set(a.only.split(","))
        unknown = names - {p["name"] for p in problems}
        if unknown:
            sys.exit(f"unknown problems: {', '.join(sorted(unknown))}")
        problems = [p for p in problems if p["name"] in names]
    tmp = None
    db = a.db
    if not db:
        tmp = tempfile.mkdtemp(prefix="loom-suite-")
        db = os.path.join(tmp, "suite.db")
    cmdline = "python3 bench/evolve_suite.py " + " ".join(sys.argv[1:])
    log(f"suite: {len(problems)} problems on {a.device}, budget {a.budget} each, db {db}")
    t0 = time.time()

    def one(p):
        try:
            return run_problem(a, p, suite_path.parent, db)
        except subprocess.TimeoutExpired:
            return {"name": p["name"], "level": p["level"], "bound": p["bound"], "correct": False, "speedup": 0.0,
                    "error": f"timed out after {a.timeout:g} s"}

    def progress(k, p, r):
        if r["correct"]:
            bw = f", {r['winner_gbps']:.1f} GB/s" if r.get("winner_gbps") else ""
            fr = f" ({100 * r['winner_frac_read_peak']:.0f}% of read peak)" if r.get("winner_frac_read_peak") else ""
            vs = (f"  torch {r['torch_us']:.1f} us ({r['speedup_vs_torch']:.2f}x)" if "torch_us" in r
                  else f"  torch: {r['torch_error'][:80]}" if "torch_error" in r else "")
            log(f"[{k:2}/{len(problems)}] {p['name']:20} L{p['level']} correct  {r['speedup']:5.2f}x  "
                f"{r['evaluations']:3} evals  {r['wall_s']:5.1f}s  {r['winner_us']:9.1f} us{bw}{fr}{vs}  {r['winner_knobs']}")
        else:
            log(f"[{k:2}/{len(problems)}] {p['name']:20} L{p['level']} FAILED   {r.get('error', '')[:200]}")

    by_name = {}
    if a.resume and a.output and pathlib.Path(a.output).exists():
        for r in json.loads(pathlib.Path(a.output).read_text()).get("problems", []):
            if r.get("name") in {p["name"] for p in problems} and "error" not in r:
                by_name[r["name"]] = r
        log(f"resume: {len(by_name)} problems kept from {a.output}")
    write_lock = __import__("threading").Lock()

    def save():  # after every problem, so that a run cut short keeps what it measured
        if not a.output:
            return
        with write_lock:
            done = [by_name[p["name"]] for p in problems if p["name"] in by_name]
            write(a, db, cmdline, done, partial=len(done) < len(problems))

    if problems and a.jobs > 1 and problems[0]["name"] not in by_name:
        # The first job measures the device's read bandwidth into the database; the others reuse it.
        by_name[problems[0]["name"]] = one(problems[0])
        progress(1, problems[0], by_name[problems[0]["name"]])
        save()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futs = {pool.submit(one, p): p for p in problems if p["name"] not in by_name}
        for f in concurrent.futures.as_completed(futs):
            p = futs[f]
            by_name[p["name"]] = f.result()
            progress(len(by_name), p, by_name[p["name"]])
            save()
    results = [by_name[p["name"]] for p in problems]
    s = write(a, db, cmdline, results, partial=False, wall_s=None if a.resume else time.time() - t0)
    fast = ", ".join(f"fast_{p:g} {s[f'fast_{p:g}']:.2f}" for p in a.fast_p)
    log(f"suite: correct {s['correct']}/{s['problems']} ({s['correctness_rate']:.2f}), {fast}, "
        f"{s['evaluations']} evaluations, {s['wall_s']:.0f} s")
    if "memory_bound_winner_frac_read_peak" in s:
        m = s["memory_bound_winner_frac_read_peak"]
        log(f"memory-bound winners: median {100 * m['median']:.0f}% of the measured read bandwidth "
            f"(min {100 * m['min']:.0f}%, max {100 * m['max']:.0f}%), {m['at_least_half']}/{m['of']} at 50% or more")
    if "vs_pytorch_eager" in s:
        t = s["vs_pytorch_eager"]
        log(f"against PyTorch eager: {t['torch_correct']}/{t['problems']} PyTorch answers match the references, "
            + ", ".join(f"fast_{p:g} {t[f'fast_{p:g}']:.2f}" for p in a.fast_p) + f", median {t['median_speedup']}x, "
            f"{s['evaluations_per_device_hour']} evaluations per device-hour")
    if a.output:
        log(f"wrote {a.output}")
    return 0 if s["correct"] == s["problems"] else 1


def write(a, db, cmdline, results, partial, wall_s=None):
    s = summary(results, a.fast_p)
    s["wall_s"] = round(wall_s if wall_s is not None else sum(r.get("wall_s", 0) for r in results), 1)
    peak = None
    try:
        con = sqlite3.connect(db)
        row = con.execute("SELECT read_gbps, method FROM device_peaks").fetchone()
        con.close()
        peak = {"read_gbps": row[0], "method": row[1]} if row else None
    except sqlite3.Error:
        pass
    if not a.output:
        return s
    ver = subprocess.run([a.loom, "--version"], capture_output=True, text=True).stdout.strip()
    built = re.search(r"\(([0-9a-f]{7,})", ver)  # the binary's commit (a GPU machine's checkout may have no git)
    doc = {"what": "evolve benchmark suite (bench/suite): correctness, speed-up over the baseline, fast_p",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "commit": built.group(1)[:7] if built else commit(), "loom": ver, "device": a.device if a.device != "cpu" else f"cpu: {cpu_name()}",
           "cores": os.cpu_count(), "load_average_at_end": os.getloadavg(), "command": cmdline,
           "baseline": "the op file's kernel template at its default knobs (plain SIMT)",
           "peer": {"torch": "PyTorch eager, TF32 off, timed like a candidate (bench/suite/torch_eager.py)"}.get(a.peer),
           "partial": partial, "read_peak": peak, "summary": s, "problems": results}
    pathlib.Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(a.output).with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(a.output)
    return s

if __name__ == "__main__":
    sys.exit(main())
