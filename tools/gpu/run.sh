#!/usr/bin/env bash
# The GPU recipe, run on the GPU machine from the repository root (binaries staged by
# tools/gpu/build.sh in .gpu/bin). Every GPU result in bench/results/ comes from this script:
#   device run: bash tools/gpu/run.sh [STEP...]     (carry .gpu; results land in $OUT)
# Steps: devices, tests (every test binary, GPU tests included), ops (test_ops on cuda), golden (Loom IR goldens from
# PTX through the CUDA driver), launch (HRX launch overhead vs cuLaunchKernel and cudaLaunchKernel:
# launch.json), engine (the engine on cuda vs the reference: tests/exec), bench (synthetic models
# written there with `loom model synth`, `loom bench --json` on cuda: bench.jsonl; LOOM_BENCH_SHAPES
# lists shape:quant pairs, default smollm2-135m:q4_0 llama3-8b:q4_0 llama3-8b:q4_k), serve
# (tools/bench_serve.py against `loom serve` on cuda with the synthetic SmolLM2: serve.json),
# mma_sweep (pp512 of the 8B Q4_0 model per matmul_mma schedule forced with LOOM_SCHEDULE), ab (the
# bench again with LOOM_AB_ENV set: bench_ab.jsonl), compare (another binary, $LOOM_OLD_BIN, against the
# staged one, rounds alternating: compare.jsonl).
# Default: devices tests.
# LOOM_GPU_STAGE names the staging folder (default .gpu), as for tools/gpu/build.sh.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/stage_env.sh"
export LOOM_BIN="$bin/loom"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(devices tests)
rc=0
for step in "${steps[@]}"; do
  echo "=== $step"
  case "$step" in
    devices)
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
      "$bin/loom" devices --json | tee "$out/devices.json" || rc=1
      ;;
    tests)
      # One log for all binaries, one gtest JSON per binary merged into tests.json (the device
      # tool returns at most 8 files).
      mkdir -p /tmp/gpu-tests
      for t in "$bin"/test_*; do
        name="$(basename "$t")"
        "$t" --gtest_output="json:/tmp/gpu-tests/$name.json" >> "$out/tests.log" 2>&1
        r=$?
        echo "$name: exit $r"
        [[ $r -ne 0 ]] && rc=1
      done
      python3 tools/gpu/gtest_summary.py "$out/tests.json" "$commit" "bash tools/gpu/run.sh tests" /tmp/gpu-tests/*.json
      grep -E "FAILED|SKIPPED" "$out/tests.log" | sort | uniq | head -40
      ;;
    golden)
      # Every Loom IR golden kernel from its PTX through the CUDA driver, against its reference.
      "$bin/test_ir" --gtest_filter='Golden/PtxOnGpu.*' --gtest_output="json:/tmp/golden.json" 2>&1 | tail -30
      [[ ${PIPESTATUS[0]} -ne 0 ]] && rc=1
      python3 tools/gpu/gtest_summary.py "$out/golden.json" "$commit" "bash tools/gpu/run.sh golden" /tmp/golden.json
      ;;
    launch)
      # HRX launch overhead (loom hrx bench-launch: HRX vs bare cuLaunchKernel vs graph replay,
      # and the cpu driver) side by side with the CUDA runtime's cudaLaunchKernel
      # (bench/peers/launch_cudart.cu, built here with nvcc); all numbers in $out/launch.json.
      nvcc_bin="$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)"
      peer=/tmp/launch_cudart
      { "$nvcc_bin" -O2 -arch=sm_90 -o "$peer" bench/peers/launch_cudart.cu ||
        "$nvcc_bin" -O2 -arch=native -o "$peer" bench/peers/launch_cudart.cu; } 2>&1 | tail -5
      launch_cmd="loom hrx bench-launch --launches 2000 --reps 30 --json"
      "$bin/loom" hrx bench-launch --device cuda:0 --launches 2000 --reps 30 --json > /tmp/launch_hrx.json || rc=1
      "$peer" 2000 30 > /tmp/launch_cudart.json || rc=1
      "$bin/loom" hrx bench-launch --device cuda:0 --launches 2000 --reps 30 --json > /tmp/launch_hrx2.json || rc=1
      "$bin/loom" hrx bench-launch --device cpu --launches 2000 --reps 30 --json > /tmp/launch_cpu.json || rc=1
      python3 - "$out/launch.json" "$commit" "$launch_cmd" <<'PY' || rc=1
import json, sys
out, commit, cmd = sys.argv[1:4]
def load(p):
    try:
        return json.load(open(p))
    except Exception as e:
        return {"error": str(e)}
hrx, hrx2, peer, cpu = (load(f"/tmp/launch_{n}.json") for n in ("hrx", "hrx2", "cudart", "cpu"))
res = {"commit": commit, "device": hrx.get("device", "?"),
       "command": "bash tools/gpu/run.sh launch (" + cmd + " --device cuda:0|cpu; bench/peers/launch_cudart 2000 30)",
       "hrx_cuda": hrx, "hrx_cuda_rerun": hrx2, "cudart": peer, "hrx_cpu": cpu}
try:
    med = {r["variant"]: r["enqueue"]["median_us"] for r in hrx["results"]}
    cudart = peer["cudaLaunchKernel"]["enqueue"]["median_us"]
    res["floors"] = {"hrx_launch_us": med["hrx_launch"], "cuLaunchKernel_us": med["cuLaunchKernel"],
                     "cudaLaunchKernel_us": cudart,
                     "hrx_over_bare": round(med["hrx_launch"] / med["cuLaunchKernel"], 3),
                     "within_10_percent_of_bare": med["hrx_launch"] <= 1.10 * med["cuLaunchKernel"],
                     "below_cudaLaunchKernel": med["hrx_launch"] < cudart}
except Exception as e:
    res["floors"] = {"error": repr(e)}
json.dump(res, open(out, "w"), indent=2)
print(json.dumps(res.get("floors"), indent=2))
PY
      ;;
    ops)
      # Every op test on the cuda driver (the cpu cases run in CI).
      "$bin/test_ops" --gtest_filter="${LOOM_OPS_FILTER:-*cuda*}" --gtest_output="json:/tmp/ops.json" > "$out/ops.log" 2>&1
      [[ $? -ne 0 ]] && rc=1
      grep -E "FAILED|tests ran|PASSED" "$out/ops.log" | sort | uniq | head -30
      python3 tools/gpu/gtest_summary.py "$out/ops.json" "$commit" "bash tools/gpu/run.sh ops (test_ops ${LOOM_OPS_FILTER:-*cuda*})" /tmp/ops.json
      ;;
    engine)
      mkdir -p /tmp/models
      LOOM_SYNTH_DIR=/tmp/models "$bin/test_exec" --gtest_filter="${LOOM_ENGINE_FILTER:-*}" --gtest_output="json:/tmp/engine.json" 2>&1 | grep -E "worst cosine|top-1|OK|FAILED|SKIPPED|PASSED" | head -40
      [[ ${PIPESTATUS[0]} -ne 0 ]] && rc=1
      python3 tools/gpu/gtest_summary.py "$out/engine.json" "$commit" "bash tools/gpu/run.sh engine" /tmp/engine.json
      ;;
    bench)
      mkdir -p /tmp/models
      for sq in ${LOOM_BENCH_SHAPES:-smollm2-135m:q4_0 llama3-8b:q4_0 llama3-8b:q4_k}; do
        shape="${sq%%:*}" quant="${sq##*:}" f="/tmp/models/synth-${sq/:/-}.gguf"
        [[ -f "$f" ]] || "$bin/loom" model synth --shape "$shape" --quant "$quant" -o "$f" 2>&1 | tail -1
        "$bin/loom" bench -m "$f" --device cuda:0 ${LOOM_BENCH_FLAGS:-} --json -o "$out/bench.jsonl" || rc=1
      done
      ;;
    ab)
      # The bench of LOOM_BENCH_SHAPES again with LOOM_AB_ENV set (e.g. "LOOM_FUSE=0"): the
      # other arm of an A/B whose first arm is the bench step of the same call (same binary, same
      # models); one JSON line per test in $out/bench_ab.jsonl, with the setting in "ab_env".
      mkdir -p /tmp/models
      for sq in ${LOOM_BENCH_SHAPES:-smollm2-135m:q4_0 llama3-8b:q4_0 llama3-8b:q4_k}; do
        shape="${sq%%:*}" quant="${sq##*:}" f="/tmp/models/synth-${sq/:/-}.gguf"
        [[ -f "$f" ]] || "$bin/loom" model synth --shape "$shape" --quant "$quant" -o "$f" 2>&1 | tail -1
        env ${LOOM_AB_ENV:?set LOOM_AB_ENV} "$bin/loom" bench -m "$f" --device cuda:0 ${LOOM_BENCH_FLAGS:-} --json > /tmp/ab_one.jsonl || rc=1
        python3 -c 'import json,sys
for l in open("/tmp/ab_one.jsonl"):
    o=json.loads(l); o["ab_env"]=sys.argv[1]; print(json.dumps(o))
    print(o["test"], sys.argv[1], round(o["tokens_per_s"],1), file=sys.stderr)' "$LOOM_AB_ENV" >> "$out/bench_ab.jsonl"
      done
      ;;
    mma_sweep)
      # pp512 of the 8B Q4_0 synthetic model with matmul_mma schedules forced through
      # LOOM_SCHEDULE (variants: LOOM_MMA_SWEEP, space-separated knob lists); one JSON line per
      # variant in $out/mma_sweep.jsonl, with the schedule in "schedule_override".
      mkdir -p /tmp/models
      f=/tmp/models/synth-llama3-8b-q4_0.gguf
      [[ -f "$f" ]] || "$bin/loom" model synth --arch llama --shape llama3-8b --quant q4_0 -o "$f" 2>&1 | tail -1
      for v in ${LOOM_MMA_SWEEP:-default warps_m=2,warps_n=2,k_tile=32 warps_m=4,warps_n=2,k_tile=64 warps_m=2,warps_n=4,k_tile=64 warps_m=4,warps_n=4,k_tile=64 warps_m=2,warps_n=2,k_tile=64,warp_m_tiles=4 warps_m=2,warps_n=4,k_tile=64,warp_m_tiles=4}; do
        sched=""; [[ "$v" != default ]] && sched="matmul_mma:$v"
        LOOM_SCHEDULE="$sched" "$bin/loom" bench -m "$f" --device cuda:0 -p 512 -n 1 -r 3 --json > /tmp/sweep_one.jsonl || rc=1
        python3 -c 'import json,sys
for l in open("/tmp/sweep_one.jsonl"):
    o=json.loads(l); o["schedule_override"]=sys.argv[1]; print(json.dumps(o))' "$sched" | tee -a "$out/mma_sweep.jsonl" |
          python3 -c 'import json,sys
[print(o["test"], o.get("schedule_override") or "default", round(o["tokens_per_s"],1)) for o in map(json.loads, sys.stdin)]'
      done
      ;;
    serve)
      f=/tmp/models/synth-smollm2-135m-q4_0.gguf
      mkdir -p /tmp/models
      [[ -f "$f" ]] || "$bin/loom" model synth --arch llama --shape smollm2-135m --quant q4_0 -o "$f" 2>&1 | tail -1
      python3 tools/bench_serve.py --loom "$bin/loom" -m "$f" --json "$out/serve.json" 2>&1 | tail -20 || rc=1
      ;;
    compare)
      # Another Loom binary ($LOOM_OLD_BIN, e.g. one built from an earlier commit and carried
      # back in) against the staged one on the same synthetic models, in the same session: the
      # rounds alternate old and new so that clock or thermal drift hits both. One JSON line per
      # test in $out/compare.jsonl (with "binary", "round" and the binary's commit), and a table
      # of medians with new/old ratios. LOOM_COMPARE_DEVICES (default cuda:0) lists the devices
      # (e.g. "cpu cpu-ref" for the CPU paths); LOOM_COMPARE_PIN pins every run to those CPUs
      # (taskset -c), so a CPU comparison with -t 2 runs on two quiet cores.
      old="${LOOM_OLD_BIN:?set LOOM_OLD_BIN to the other binary}"
      old_commit="$(cat "$(dirname "$old")/commit" 2>/dev/null || echo unknown)"
      mkdir -p /tmp/models
      for sq in ${LOOM_BENCH_SHAPES:-smollm2-135m:q4_0 llama3-8b:q4_0 llama3-8b:q4_k}; do
        shape="${sq%%:*}" quant="${sq##*:}" f="/tmp/models/synth-${sq/:/-}.gguf"
        [[ -f "$f" ]] || "$bin/loom" model synth --shape "$shape" --quant "$quant" -o "$f" 2>&1 | tail -1
        pin=()
        [[ -n "${LOOM_COMPARE_PIN:-}" ]] && pin=(taskset -c "$LOOM_COMPARE_PIN")
        for dev in ${LOOM_COMPARE_DEVICES:-cuda:0}; do
          for round in $(seq "${LOOM_COMPARE_ROUNDS:-2}"); do
            for which in old new; do
              if [[ $which == old ]]; then b="$old" c="$old_commit"; else b="$bin/loom" c="$commit"; fi
              echo "compare: $sq $dev round $round $which ($c)"
              "${pin[@]}" "$b" bench -m "$f" --device "$dev" ${LOOM_BENCH_FLAGS:-} --json > /tmp/cmp_one.jsonl || rc=1
              python3 -c 'import json,sys
for l in open("/tmp/cmp_one.jsonl"):
    o=json.loads(l); o.update(binary=sys.argv[1], round=int(sys.argv[2]), binary_commit=sys.argv[3], model=sys.argv[4] + " " + sys.argv[5]); print(json.dumps(o))' \
                "$which" "$round" "$c" "$sq" "$dev" >> "$out/compare.jsonl"
            done
          done
        done
      done
      python3 - "$out/compare.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = sorted({(r["model"], r["test"]) for r in rows})
print(f"{'model':<30} {'test':<8} {'old tok/s':>11} {'new tok/s':>11} {'new/old':>8}")
for m, t in keys:
    med = {b: statistics.median([r["tokens_per_s"] for r in rows if r["model"] == m and r["test"] == t and r["binary"] == b] or [0])
           for b in ("old", "new")}
    print(f"{m:<30} {t:<8} {med['old']:>11.1f} {med['new']:>11.1f} {med['new'] / med['old'] if med['old'] else 0:>8.3f}")
PY
      ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
done
echo "commit $commit, exit $rc"
exit $rc
