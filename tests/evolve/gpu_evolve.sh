#!/usr/bin/env bash
# evolve on the GPU machine (run from the repository root, binaries staged by tools/gpu/build.sh):
#   LOOM_GPU_STAGE=.gpu-evolve bash tests/evolve/gpu_evolve.sh
# 1. The planted candidates on cuda: the CUDA C++ files (NVRTC) and PTX made from the Loom IR
#    files, each judged against its '// expect:' line (cheats.txt).
# 2. test_evolve (its cuda cases run there instead of skipping).
# 3. Searches on the Q4_0 and Q4_K mat-vecs at Llama-3-8B shapes (search.txt, evolve.db).
# Results land in $OUT (default ./gpu-out); summary.json has commit, device and command.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/gpu/stage_env.sh"
budget="${EVOLVE_GPU_BUDGET:-90s}"
cheats=tests/evolve/cheats
ptx=/tmp/evolve-ptx
mkdir -p "$ptx"
# PTX from the IR files at n=1000 (shape-specific, so judged without held-out shapes; the IR
# shape cheat is left out for that reason).
for f in "$cheats"/ir_*.loom; do
  name="$(basename "$f" .loom)"
  [[ $name == ir_shape ]] && continue
  sed -e 's/\${n}/1000/g' -e 's/\${(n+63)\/64}/16/g' "$f" > "$ptx/$name.loom"
  if "$bin/loom" ir compile --target ptx --arch sm_90 "$ptx/$name.loom" -o "$ptx/$name.body.ptx" >> "$out/cheats.txt" 2>&1; then
    { grep -E '^// (expect|launch)' "$ptx/$name.loom"; cat "$ptx/$name.body.ptx"; } > "$ptx/ptx_$name.ptx"
  fi
done
{
  echo "== CUDA C++ (NVRTC), held-out shapes on"
  "$bin/loom" evolve check --device cuda --op add --shape n=1000 --peak "$cheats"/*.cu
  echo "== PTX (from the Loom IR files at n=1000), no held-out shapes"
  "$bin/loom" evolve check --device cuda --op add --shape n=1000 --holdout 0 "$ptx"/ptx_*.ptx
  echo "== Loom IR, held-out shapes on"
  "$bin/loom" evolve check --device cuda --op add --shape n=1000 --peak "$cheats"/ir_*.loom
} 2>&1 | tee -a "$out/cheats.txt"
"$bin/test_evolve" --gtest_filter='-*KeepMatvec*' > "$out/test_evolve.log" 2>&1; echo "test_evolve exit $?" | tee -a "$out/test_evolve.log"
db="$out/evolve.db"
for shape in n_in=4096,n_out=14336,n_tokens=1,wtype=2 n_in=4096,n_out=4096,n_tokens=1,wtype=12; do
  "$bin/loom" evolve run --op matvec --shape "$shape" --device cuda --budget "$budget" --db "$db" 2>&1 | tee -a "$out/search.txt"
done
"$bin/loom" evolve status --db "$db" | tee -a "$out/search.txt"
"$bin/loom" evolve report 1 -o "$out/report-q4_0.html" --db "$db" > /dev/null
python3 - "$out" "$(cat "$stage/commit" 2>/dev/null || echo unknown)" <<'PY'
import json, sqlite3, subprocess, sys
out, commit = sys.argv[1], sys.argv[2]
dev = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
con = sqlite3.connect(f"{out}/evolve.db")
jobs = []
for jid, op, shape, confirmed, elapsed, base in con.execute(
        "SELECT id, op, shape, confirmed_speedup, elapsed_s, baseline_us FROM jobs ORDER BY id"):
    n, best, frac = con.execute("SELECT count(*), max(speedup), max(frac_peak) FROM candidates WHERE job = ?", (jid,)).fetchone()
    jobs.append({"job": jid, "op": op, "shape": shape, "evaluations": n, "seconds": elapsed, "baseline_us": base,
                 "best_speedup": best, "best_fraction_of_peak": frac, "confirmed_speedup": confirmed,
                 "evaluations_per_gpu_hour": n / elapsed * 3600 if elapsed else None})
peak = con.execute("SELECT device_arch, read_gbps FROM device_peaks").fetchall()
cheats = open(f"{out}/cheats.txt").read()
json.dump({"commit": commit, "device": dev, "command": "LOOM_GPU_STAGE=.gpu-evolve bash tests/evolve/gpu_evolve.sh",
           "peaks_gbps": peak, "jobs": jobs, "cheats_pass": cheats.count("\nPASS "), "cheats_fail": cheats.count("\nFAIL ")},
          open(f"{out}/summary.json", "w"), indent=1)
PY
cat "$out/summary.json"
