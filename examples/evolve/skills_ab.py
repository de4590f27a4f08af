#!/usr/bin/env python3
"""Do learned skills make a second search faster?

A first search on the Q4_0 mat-vec records skills; then, for each seed, the Q4_1 search runs
twice from copies of that database: with its skills and with --no-skills. For each run we count
the evaluations until the job's running best reaches 95% of (a) its own best and (b) the best of
both runs of that seed (a common target, so a run cannot look fast by stopping at a poor best).
Results (per run and median/spread per arm) go to a JSON file.

  python3 examples/evolve/skills_ab.py --loom build/loom --seeds 1 2 3 --prior-budget 30 --budget 20 \\
      -o bench/results/DATE-cpu-evolve-skills.json
"""
import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time

Q4_0 = "n_in=576,n_out=1536,n_tokens=1,wtype=2"
Q4_1 = "n_in=576,n_out=1536,n_tokens=1,wtype=3"


def run(loom, db, shape, budget, seed, extra, common):
    cmd = [loom, "evolve", "run", "--op", "matvec", "--shape", shape, "--device", "cpu", "--budget", str(budget),
           "--seed", str(seed), "--db", db, "--no-store"] + common + extra
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    con = sqlite3.connect(db)
    job = con.execute("SELECT max(id) FROM jobs").fetchone()[0]
    rows = con.execute("SELECT seq, status, speedup, synth, body FROM candidates WHERE job = ? ORDER BY seq", (job,)).fetchall()
    confirmed = con.execute("SELECT confirmed_speedup FROM jobs WHERE id = ?", (job,)).fetchone()[0]
    con.close()
    curve, best = [], 0.0
    for seq, status, speedup, synth, body in rows:
        if status == "ok" and speedup:
            best = max(best, speedup)
        curve.append(best)
    fam = [json.loads(b).get("knobs", {}).get("ev_family", 0) for *_, b in rows]
    return {"seed": seed, "job": job, "evaluations": len(rows), "curve": curve, "best": best, "confirmed": confirmed,
            "first_family_candidate": next((i for i, f in enumerate(fam) if f == 1), None),
            "seconds": round(time.time() - t0, 1), "command": " ".join(cmd)}


def evals_to(curve, target):
    for i, v in enumerate(curve):
        if v >= target:
            return i + 1  # evaluations counted from the baseline (seq 0) on
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", default=os.environ.get("LOOM_BIN", "build/loom"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--prior-budget", default="30")
    ap.add_argument("--budget", default="20")
    ap.add_argument("--holdout", default="1")
    ap.add_argument("--time-per-candidate", default="0.2")
    ap.add_argument("-o", "--output", default="skills_ab.json")
    a = ap.parse_args()
    common = ["--holdout", a.holdout, "--time-per-candidate", a.time_per_candidate]
    tmp = tempfile.mkdtemp(prefix="loom-skills-ab-")
    prior_db = os.path.join(tmp, "prior.db")
    prior = run(a.loom, prior_db, Q4_0, a.prior_budget, 1, [], common)
    con = sqlite3.connect(prior_db)
    skills = con.execute("SELECT knob, value, gains / uses, uses, wins FROM skills ORDER BY gains / uses DESC").fetchall()
    con.close()
    print(f"prior Q4_0 search: {prior['evaluations']} evaluations, best {prior['best']:.2f}x, {len(skills)} skills")
    runs = []
    for seed in a.seeds:
        pair = {}
        for arm, extra in (("skills", []), ("no_skills", ["--no-skills"])):
            db = os.path.join(tmp, f"q4_1_{arm}_{seed}.db")
            shutil.copy(prior_db, db)
            r = run(a.loom, db, Q4_1, a.budget, seed, extra, common)
            r["arm"] = arm
            pair[arm] = r
        common_best = max(pair["skills"]["best"], pair["no_skills"]["best"])
        for arm, r in pair.items():
            r["evals_to_95_own_best"] = evals_to(r["curve"], 0.95 * r["best"])
            r["evals_to_95_common_best"] = evals_to(r["curve"], 0.95 * common_best)
            runs.append(r)
            print(f"seed {seed} {arm:9s}: best {r['best']:.2f}x (confirmed {r['confirmed']:.2f}x), "
                  f"95% of own best after {r['evals_to_95_own_best']}, of the seed's best after "
                  f"{r['evals_to_95_common_best']}, first family candidate at {r['first_family_candidate']}")

    def stats(arm, key):
        v = [r[key] if r[key] is not None else r["evaluations"] + 1 for r in runs if r["arm"] == arm]
        return {"values": v, "median": statistics.median(v), "min": min(v), "max": max(v)}

    summary = {arm: {k: stats(arm, k) for k in ("evals_to_95_own_best", "evals_to_95_common_best", "first_family_candidate")}
               for arm in ("skills", "no_skills")}
    for arm in summary:
        for k in summary[arm]:
            s = summary[arm][k]
            print(f"{arm:9s} {k}: median {s['median']} (range {s['min']}..{s['max']}) {s['values']}")
    out = {"what": "Q4_1 mat-vec search after a Q4_0 one, with and without skills",
           "command": "python3 examples/evolve/skills_ab.py " + " ".join(
               f"--{k.replace('_', '-')} {v if not isinstance(v, list) else ' '.join(map(str, v))}"
               for k, v in vars(a).items() if k not in ("loom", "output")),
           "loom": a.loom, "commit": subprocess.run([a.loom, "--version"], capture_output=True, text=True).stdout.strip(),
           "load_average": os.getloadavg(), "prior": prior, "skills": skills, "runs": runs, "summary": summary}
    with open(a.output, "w") as f:
        json.dump(out, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
