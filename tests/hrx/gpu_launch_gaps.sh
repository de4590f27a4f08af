#!/usr/bin/env bash
# GPU script for the gaps between launches (programmatic dependent launch, small kernels):
# builds on the GPU machine, runs the HRX and op tests on cuda, the dependent-chain launch
# benchmark, the engine comparison and `loom bench` runs, each step under its own timeout so the whole fits one device call. Run there from the repository
# root (carry .gpu-deps, made here by tools/gpu/deps.sh):
#   bash tests/hrx/gpu_launch_gaps.sh STEP...
# steps: build hrx ops ops_all launch engine small big profile
# Everything lands in $OUT (log.txt, launch.json, bench.jsonl, tests json).
set -uo pipefail
out="${OUT:-/tmp/gpu-out}"
mkdir -p "$out" /tmp/models
bin=.gpu/bin
export LOOM_CACHE_DIR=/tmp/loom-cache
log() { echo "=== $* ($(date +%T))" | tee -a "$out/log.txt"; }
run() {  # run TIMEOUT CMD...: output to log.txt and the reply, never fatal
  local t=$1; shift
  timeout "$t" "$@" 2>&1 | tee -a "$out/log.txt" | tail -"${TAIL:-12}"
  echo "(exit ${PIPESTATUS[0]})" | tee -a "$out/log.txt"
}
bench() {  # bench LABEL ENV MODEL FLAGS...: one JSON line per test into bench.jsonl, labelled
  local label=$1 envs=$2 model=$3; shift 3
  env $envs timeout 90 "$bin/loom" bench -m "$model" --device cuda:0 --json "$@" 2>>"$out/log.txt" |
    python3 -c 'import json,sys
for l in sys.stdin:
    o=json.loads(l); o["label"]=sys.argv[1]; o["env"]=sys.argv[2]; print(json.dumps(o))' "$label" "$envs" |
    tee -a "$out/bench.jsonl" | python3 -c 'import json,sys
for o in map(json.loads, sys.stdin):
    print(o["label"], o["env"] or "default", o["test"], round(o["tokens_per_s"],1))
    p = o.get("profile")
    if p and p["step"] == "decode":
        print("  kernels us/step", round(p["kernel_us_per_step"],1), " ".join("%s:%.0fx%.2f" % (x["op"],
            x["launches_per_step"], x["us_per_step"] / max(x["launches_per_step"], 1)) for x in p["ops"]))'
}
synth() {  # synth SHAPE QUANT -> path
  local f="/tmp/models/synth-$1-$2.gguf"
  [[ -f "$f" ]] || "$bin/loom" model synth --arch llama --shape "$1" --quant "$2" -o "$f" >/dev/null 2>&1
  echo "$f"
}
for step in "$@"; do
  case "$step" in
    build)
      log build
      bash tools/gpu/remote_build.sh loom test_ops test_exec test_hrx 2>&1 | tail -5 || exit 1
      ;;
    hrx)
      log test_hrx
      run 60 "$bin/test_hrx" --gtest_brief=1 --gtest_output="json:$out/test_hrx.json"
      ;;
    ops)  # the small decode ops, plus the chains PDL matters most for, on cuda
      log test_ops mine
      run 90 "$bin/test_ops" --gtest_brief=1 \
        --gtest_filter='*rms_norm_cuda*:*rope_kv_cuda*:*attention_decode_cuda*:*attention_prompt_cuda*:*add_cuda*:*swiglu_cuda*:*get_rows_cuda*:*argmax_cuda*'
      ;;
    ops_all)
      log test_ops cuda
      TAIL=20 run "${OPS_TIMEOUT:-120}" "$bin/test_ops" --gtest_brief=1 --gtest_filter='*_cuda_*' \
        --gtest_output="json:$out/test_ops_cuda.json"
      ;;
    launch)
      log bench-launch
      timeout 60 "$bin/loom" hrx bench-launch --device cuda:0 --launches 2000 --reps 20 --chain 1000 --json \
        > "$out/launch.json" 2>>"$out/log.txt"
      python3 - "$out/launch.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    print(f'{r["variant"]:20s} enqueue {r["enqueue"]["median_us"]:.3f} us  enqueue+sync {r["enqueue_and_sync"]["median_us"]:.3f} us')
c = d["dependent_chain"]
for r in c["variants"]:
    print(f'chain {r["variant"]:12s} {r["per_launch"]["median_us"]:.3f} us/launch [{r["per_launch"]["min_us"]:.3f}, {r["per_launch"]["max_us"]:.3f}]')
print("graph edges", json.dumps(c["graph_edges"]))
PY
      ;;
    engine)
      log engine on cuda
      run 120 "$bin/test_exec" --gtest_filter='*cuda*' --gtest_output="json:$out/test_exec.json"
      ;;
    small)  # SmolLM2-135M shape: pp512 and tg128, two rounds
      log bench smollm2
      m=$(synth smollm2-135m q4_0)
      for r in 1 2; do
        bench pdl "" "$m" -p 512 -n 128 -r 5
      done
      ;;
    big)  # Llama-3-8B shape Q4_0: pp512 and tg128
      log bench llama3-8b
      m=$(synth llama3-8b q4_0)
      bench pdl "" "$m" -p 512 -n 128 -r 3
      ;;
    profile)  # per-op profile of both (eager launches with events); old kernel schedules as A/B
      log profile
      for sq in smollm2-135m:q4_0 llama3-8b:q4_0; do
        m=$(synth "${sq%%:*}" "${sq##*:}")
        bench profile "" "$m" -p 16 -n 32 -r 1 --profile
        bench profile_old_small_kernels "LOOM_SCHEDULE=rms_norm:cache=0;rope_kv:heads_per_block=4" "$m" -p 16 -n 32 -r 1 --profile
      done
      ;;
    *) echo "unknown step $step" ;;
  esac
done
log done
