#!/usr/bin/env bash
# evolve on the GPU machine in one command (after tools/gpu/remote_build.sh loom):
#   bash tools/gpu/remote_build.sh loom && bash tools/gpu/evolve_gpu.sh
# 1. `loom evolve run --op matvec_gpu` on the Llama-3-8B decode shapes the engine launches: the
#    fused gate|up (4096 -> 2 x 14336, silu * up inside: n_w=2, glu=1) and the down projection
#    (14336 -> 4096), in the planar weight layout the engine uploads on cuda (planar=1), Q4_0 first, then Q4_K; knobs warps, lanes_per_row, rows_per_thread, passes,
#    prefetch; one kernel-store file ($OUT/evolve-gpu.db).
# 2. `loom bench` tg128 on the synthetic 8B Q4_0 model without the store (LOOM_NO_KERNEL_STORE=1)
#    and with it (LOOM_EVOLVE_DB), interleaved, and the "kernel store:" lines bench prints.
# 3. The same for Q4_K while time is left.
# Every step checks the time left (EVOLVE_GPU_DEADLINE seconds from the start, default 210, so
# the call fits 300 s with a ~80 s build) and is skipped when it would not fit; summary.json is
# rewritten after every step, so a killed run still brings back what it did.
# Env: EVOLVE_GPU_JOBS (q4_0-glu q4_0-down q4_k-glu q4_k-down: the searches to run, default all),
# EVOLVE_GPU_BUDGET (per search, default 20s), EVOLVE_GPU_NCU=1 (Nsight Compute on the
# best kernel of every job; default: the first job only, ~10 s each; 0: none),
# EVOLVE_GPU_BENCH_ROUNDS (default 2), LOOM_GPU_STAGE (.gpu); EVOLVE_GPU_SHIP=1: the four
# searches as one `loom evolve ship` (data/kernels/searches/cuda.json), its shipped file in
# $OUT/shipped-cuda.json.
# summary.json per job: evaluations per GPU-hour over the whole job (baseline, search,
# confirmation, instrumented run, ncu) and over the search loop alone, and where the baseline's
# and the last search evaluation's time went (the jobs' phase lines; full job logs in searches.log).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/stage_env.sh"
mkdir -p /tmp/models
deadline="${EVOLVE_GPU_DEADLINE:-210}"
budget="${EVOLVE_GPU_BUDGET:-20s}"
db="$out/evolve-gpu.db"
log="$out/evolve_gpu.log"
: > "$log"
: > "$out/evolve_bench.jsonl"
: > "$out/searches.log"
left() { echo $((deadline - SECONDS)); }
# PATH without Nsight Compute, for the jobs that skip it.
ncu_dir="$(dirname "$(command -v ncu 2>/dev/null || echo /nonexistent/ncu)")"
path_no_ncu="$(echo "$PATH" | tr ':' '\n' | grep -vxF "$ncu_dir" | paste -sd: -)"

summary() {
  python3 - "$out" "$commit" "$db" <<'PY'
import json, os, re, sqlite3, subprocess, sys
out, commit, db = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    dev = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
except OSError:
    dev = "unknown (no nvidia-smi)"
res = {"commit": commit, "device": dev,
       "command": "bash tools/gpu/remote_build.sh loom && bash tools/gpu/evolve_gpu.sh",
       "jobs": [], "bench": [], "store_lines": []}
if os.path.exists(db):
    con = sqlite3.connect(db)
    res["peaks_gbps"] = con.execute("SELECT device_arch, read_gbps FROM device_peaks").fetchall()
    # The phase lines of every search's log, by job: "baseline evaluation 3.5 s: open 0.41s, ..."
    # and "last search evaluation #7 2.5 s: ..." -> {"seconds", "phases": {name: s}, "input_sets"}.
    def phases_of(text):
        m = re.match(r"(?:#\d+ )?([\d.]+) s: (.*)$", text)
        if not m:
            return None
        body, sets = m.group(2), None
        if "(input sets:" in body:
            body, sets = body.split(" (input sets:", 1)
            sets = sets.rstrip(")").strip()
        ph = {}
        for part in body.split(", "):
            pm = re.match(r"(.+?) ([\d.]+)s", part.strip())
            if pm:
                ph[pm.group(1)] = float(pm.group(2))
        return {"seconds": float(m.group(1)), "phases": ph, "input_sets": sets, "text": m.group(2)}
    logs = {}
    for name in sorted(os.listdir(out)):
        if name != "searches.log":
            continue
        d = {}
        for line in open(os.path.join(out, name), errors="replace"):
            line = line.strip()
            m = re.match(r"job (\d+)(?: in |: )", line)
            if m:
                d = logs.setdefault(int(m.group(1)), {})
            if line.startswith("baseline evaluation "):
                d["baseline_evaluation"] = phases_of(line[len("baseline evaluation "):])
            elif line.startswith("last search evaluation "):
                d["last_search_evaluation"] = phases_of(line[len("last search evaluation "):])
    for jid, op, shape, confirmed, elapsed, base, best in con.execute(
            "SELECT id, op, shape, confirmed_speedup, elapsed_s, baseline_us, best_candidate FROM jobs ORDER BY id"):
        n, failed = con.execute("SELECT count(*), sum(status != 'ok') FROM candidates WHERE job = ?", (jid,)).fetchone()
        t_base, t_last = con.execute("SELECT min(at_s), max(at_s) FROM candidates WHERE job = ?", (jid,)).fetchone()
        base_frac = con.execute("SELECT frac_peak FROM candidates WHERE job = ? AND seq = 0", (jid,)).fetchone()
        b = con.execute("SELECT speedup, frac_peak, median_us, body, diagnosis FROM candidates WHERE id = ?", (best,)).fetchone() if best else None
        stored = con.execute("SELECT speedup FROM kernels WHERE job = ?", (jid,)).fetchone()
        res["jobs"].append({
            "job": jid, "op": op, "shape": shape, "evaluations": n, "failed": failed, "seconds": elapsed,
            "evaluations_per_gpu_hour": n / elapsed * 3600 if elapsed else None,
            "search_seconds": (t_last - t_base) if n and n > 1 else None,
            "search_evaluations_per_gpu_hour": (n - 1) / (t_last - t_base) * 3600 if n and n > 1 and t_last > t_base else None,
            "baseline_evaluation": logs.get(jid, {}).get("baseline_evaluation"),
            "last_search_evaluation": logs.get(jid, {}).get("last_search_evaluation"),
            "baseline_us": base, "baseline_fraction_of_bandwidth": base_frac[0] if base_frac else None,
            "best_speedup_search": b[0] if b else None, "best_fraction_of_bandwidth": b[1] if b else None,
            "best_median_us": b[2] if b else None, "best_knobs": json.loads(b[3]).get("knobs") if b else None,
            "best_diagnosis": b[4] if b else None, "confirmed_speedup": confirmed,
            "stored_speedup": stored[0] if stored else None})
if os.path.exists(f"{out}/evolve_bench.jsonl"):
    for line in open(f"{out}/evolve_bench.jsonl"):
        try:
            res["bench"].append(json.loads(line))
        except ValueError:
            pass
if os.path.exists(f"{out}/evolve_gpu.log"):
    res["store_lines"] = sorted(set(l.strip() for l in open(f"{out}/evolve_gpu.log") if "kernel store:" in l))
json.dump(res, open(f"{out}/summary.json", "w"), indent=1)
PY
}

search() {  # search QUANT_NAME SHAPE NCU(0/1)
  local need=$(( ${budget%s} + 25 ))
  if (( $(left) < need )); then echo "skip search $2: $(left) s left" | tee -a "$log"; return; fi
  echo "=== search $1 $2 ($(left) s left)" | tee -a "$log"
  local slog=/tmp/evolve-search.log
  if [[ "${EVOLVE_GPU_NCU:-}" == 1 || ( "$3" == 1 && "${EVOLVE_GPU_NCU:-}" != 0 ) ]]; then
    timeout $(( $(left) )) "$bin/loom" evolve run --op matvec_gpu --shape "$2" --device cuda --budget "$budget" --seed 1 \
      --db "$db" > "$slog" 2>&1
  else
    PATH="$path_no_ncu" timeout $(( $(left) )) "$bin/loom" evolve run --op matvec_gpu --shape "$2" --device cuda \
      --budget "$budget" --seed 1 --db "$db" > "$slog" 2>&1
  fi
  cat "$slog" >> "$out/searches.log"
  grep -E "baseline|evaluation|confirm|stored|regions|ncu|done|error|fail" "$slog" | tail -14 | tee -a "$log"
  summary
}

bench() {  # bench QUANT: tg128 without / with the store, twice each, interleaved
  local q="$1" f="/tmp/models/synth-llama3-8b-$1.gguf"
  if (( $(left) < 60 )); then echo "skip bench $q: $(left) s left" | tee -a "$log"; return; fi
  echo "=== bench $q ($(left) s left)" | tee -a "$log"
  [[ -f "$f" ]] || timeout $(( $(left) )) "$bin/loom" model synth --arch llama --shape llama3-8b --quant "$q" -o "$f" 2>&1 | tail -1 | tee -a "$log"
  for round in $(seq 1 "${EVOLVE_GPU_BENCH_ROUNDS:-2}"); do
    for store in off on; do
      (( $(left) < 15 )) && { echo "skip bench $q $store round $round: $(left) s left" | tee -a "$log"; continue; }
      if [[ $store == off ]]; then
        LOOM_NO_KERNEL_STORE=1 timeout $(( $(left) )) "$bin/loom" bench -m "$f" --device cuda:0 -p 16 -n 128 -r 3 --json \
          > /tmp/bench_one.jsonl 2>> "$log"
        rc=$?
      else
        LOOM_EVOLVE_DB="$db" timeout $(( $(left) )) "$bin/loom" bench -m "$f" --device cuda:0 -p 16 -n 128 -r 3 --json \
          > /tmp/bench_one.jsonl 2>> "$log"
        rc=$?
      fi
      echo "bench $q store $store round $round: rc $rc, $(grep -c '^{' /tmp/bench_one.jsonl) result lines" | tee -a "$log"
      # The bench's lines come in as a file argument: a here-document would take python's stdin.
      python3 - "$q" "$store" "$round" /tmp/bench_one.jsonl >> "$out/evolve_bench.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[4]):
    line = line.strip()
    if line.startswith("{"):
        o = json.loads(line)
        o.update({"synth": sys.argv[1], "kernel_store": sys.argv[2], "round": int(sys.argv[3])})
        print(json.dumps(o))
PY
    done
  done
  summary
}

echo "commit $commit; deadline ${deadline}s; search budget $budget" | tee -a "$log"
# EVOLVE_GPU_JOBS: which searches run (default all four); a quant's bench runs after its searches
# when at least one of them ran.
jobs=" ${EVOLVE_GPU_JOBS:-q4_0-glu q4_0-down q4_k-glu q4_k-down} "
want() { [[ "$jobs" == *" $1 "* ]]; }
if [[ "${EVOLVE_GPU_SHIP:-0}" == 1 ]]; then
  # The shipped GPU kernels (docs/evolve.md, "Kernels that ship with Loom"): the same searches as
  # one `loom evolve ship` over data/kernels/searches/cuda.json; its file comes back in $out, to
  # be committed as data/kernels/cuda-<arch>.json. The benches then run with and without them.
  echo "=== ship ($(left) s left)" | tee -a "$log"
  PATH="$path_no_ncu" timeout $(( $(left) - 70 )) "$bin/loom" evolve ship --searches data/kernels/searches/cuda.json \
    --device cuda --budget "$budget" --db "$db" -o "$out/shipped-cuda.json" > /tmp/evolve-ship.log 2>&1
  echo "ship: rc $?" | tee -a "$log"
  cat /tmp/evolve-ship.log >> "$out/searches.log"
  grep -E "^ship:|confirm:|done" /tmp/evolve-ship.log | tee -a "$log"
  summary
  bench q4_0
  bench q4_k
else
  want q4_0-glu && search q4_0 n_in=4096,n_out=14336,n_out1=14336,n_w=2,glu=1,n_tokens=1,planar=1,wtype=2 1
  want q4_0-down && search q4_0 n_in=14336,n_out=4096,n_tokens=1,planar=1,wtype=2 0
  { want q4_0-glu || want q4_0-down; } && bench q4_0
  want q4_k-glu && search q4_k n_in=4096,n_out=14336,n_out1=14336,n_w=2,glu=1,n_tokens=1,planar=1,wtype=12 0
  want q4_k-down && search q4_k n_in=14336,n_out=4096,n_tokens=1,planar=1,wtype=12 0
  { want q4_k-glu || want q4_k-down; } && bench q4_k
fi
"$bin/loom" evolve status --db "$db" >> "$log" 2>&1
summary
python3 -c "
import json; d = json.load(open('$out/summary.json'))
for j in d['jobs']: print('job', j['job'], j['shape'], 'evals', j['evaluations'], 'per GPU-hour %.0f' % (j['evaluations_per_gpu_hour'] or 0), 'search loop %.0f' % (j['search_evaluations_per_gpu_hour'] or 0), 'base frac', j['baseline_fraction_of_bandwidth'], 'best frac', j['best_fraction_of_bandwidth'], 'confirmed', j['confirmed_speedup'])
for b in d['bench']: print('bench', b.get('synth'), b.get('kernel_store'), b.get('round'), b.get('test'), b.get('tokens_per_s') or b.get('tps') or b.get('median'))
print(*d['store_lines'], sep='\n')"
echo "evolve_gpu.sh: done in $SECONDS s"
