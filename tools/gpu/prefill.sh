#!/usr/bin/env bash
# The prompt-matmul sweep and the side-by-side with llama.cpp, on the GPU machine, in one call
# (run from the repository root after tools/gpu/remote_build.sh; llama.cpp's llama-bench from
# tools/gpu/llama_peer.sh build, started at the beginning of the same call):
#   1. synthesizes the models of PREFILL_MODELS ([ARCH/]SHAPE:QUANT words; default: 8B Q4_0, 8B
#      Q4_K_M-like, SmolLM2 Q4_0; e.g. qwen3moe/qwen3-30b-a3b:q4_k)
#   2. pp512 of each model under every variant of PREFILL_VARIANTS: "default" (the built-in
#      choice), "int8" (matmul_mmq for every format it takes: LOOM_PREFILL_MATMUL=int8), "KNOBS"
#      (the same with LOOM_SCHEDULE=matmul_mmq:KNOBS merged into its default), "f16" or
#      "f16:KNOBS" (LOOM_PREFILL_MATMUL=f16: matmul_mma, with LOOM_SCHEDULE=matmul_mma:KNOBS),
#      "wgmma" or "wgmma:KNOBS" (LOOM_PREFILL_MATMUL=wgmma: matmul_mma on Hopper's warpgroup MMA):
#      $OUT/prefill_sweep.jsonl
#   3. the best variant per model: the engine on cuda against the CPU reference under the 8B
#      Q4_0 model's best (test_exec), then `loom bench -r 3` (pp512, tg128) per model under its
#      best, beside llama-bench -fa 1 on the same files: $OUT/prefill_loom.jsonl, llama_bench.jsonl
# Steps (arguments): sweep (1-2), engine, side (3); default all three. "profile" (not in the
# default) writes `loom bench --profile` of each model's pp512 and tg32 under PREFILL_PROFILE_VARIANT
# (default: default) to $OUT/profile_<model>.txt. The sweep's results stay in
# /tmp/prefill_sweep.jsonl for the later steps of a warm machine.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/stage_env.sh"
rc=0
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(sweep engine side)
has() { [[ " ${steps[*]} " == *" $1 "* ]]; }
models=${PREFILL_MODELS:-"llama3-8b:q4_0 llama3-8b:q4_k smollm2-135m:q4_0"}
variants=${PREFILL_VARIANTS:-default}
mkdir -p /tmp/models
files=()
for spec in $models; do  # [ARCH/]SHAPE:QUANT, ARCH llama by default
  arch=llama sq="$spec"
  [[ "$spec" == */* ]] && { arch="${spec%%/*}"; sq="${spec#*/}"; }
  f="/tmp/models/synth-${sq/:/-}.gguf"
  files+=("$f")
  [[ -f "$f" ]] || "$bin/loom" model synth --arch "$arch" --shape "${sq%%:*}" --quant "${sq##*:}" -o "$f" 2>&1 | tail -1 &
done
wait
# The environment of a variant (see above) for the command that follows: `variant_env V cmd...`.
variant_env() {
  local v="$1" m=auto sched=""; shift
  case "$v" in
    default) ;;
    int8) m=int8 ;;
    f16) m=f16 ;;
    f16:*) m=f16; sched="matmul_mma:${v#f16:}" ;;
    wgmma) m=wgmma ;;
    wgmma:*) m=wgmma; sched="matmul_mma:${v#wgmma:}" ;;
    *) m=int8; sched="matmul_mmq:$v" ;;
  esac
  LOOM_PREFILL_MATMUL="$m" LOOM_SCHEDULE="$sched" "$@"
}
has profile && for f in "${files[@]}"; do
  echo "=== profile $(basename "$f")"
  variant_env "${PREFILL_PROFILE_VARIANT:-default}" "$bin/loom" bench -m "$f" --device cuda:0 -p 512 -n 32 -r 1 --profile \
    > "$out/profile_$(basename "$f" .gguf).txt" 2>&1 || rc=1
  grep -E "^ *(op|matmul|matvec|attention|rms|rope|quantize|glu|add|get_rows|total)" "$out/profile_$(basename "$f" .gguf).txt" | head -40
done
has sweep && echo "=== sweep (pp512)"
has sweep && for f in "${files[@]}"; do
  for v in $variants; do
    sched="$v"; [[ "$v" == default ]] && sched=""
    variant_env "$v" "$bin/loom" bench -m "$f" --device cuda:0 -p 512 -n 1 -r 3 --json 2>/dev/null |
      python3 -c 'import json,sys
for l in sys.stdin:
    o=json.loads(l)
    if o["test"] != "pp512": continue
    o["schedule_override"]=sys.argv[1]; print(json.dumps(o))
    print(o["model"], sys.argv[1] or "default", round(o["tokens_per_s"],1), file=sys.stderr)' "$sched" | tee -a /tmp/prefill_sweep.jsonl >> "$out/prefill_sweep.jsonl" || rc=1
  done
done
best() {  # the best override for model file $1 ("" for the default)
  python3 -c 'import json,sys
rows=[json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["model"]==sys.argv[2]]
print(max(rows, key=lambda o: o["tokens_per_s"])["schedule_override"] if rows else "")' /tmp/prefill_sweep.jsonl "$(basename "$1")"
}
b0="$(best "${files[0]}")"
has engine && {
echo "=== engine on cuda vs the reference under '${b0:-default}'"
LOOM_SYNTH_DIR=/tmp/models variant_env "${b0:-default}" timeout 240 "$bin/test_exec" --gtest_filter="${PREFILL_ENGINE_FILTER:-*LogitsMatch*cuda_synth*}" \
  --gtest_output="json:/tmp/prefill_engine.json" 2>&1 | grep -E "worst cosine|FAILED|PASSED" | head -20
[[ ${PIPESTATUS[0]} -ne 0 ]] && rc=1
python3 tools/gpu/gtest_summary.py "$out/prefill_engine.json" "$commit" "variant '${b0:-default}' test_exec (tools/gpu/prefill.sh)" /tmp/prefill_engine.json
}
has side || { echo "commit $commit, exit $rc"; exit $rc; }
echo "=== side by side"
bash tools/gpu/llama_peer.sh wait > /dev/null || { echo "llama.cpp build failed"; tail -20 /tmp/llama-cuda/build.log; rc=1; }
for f in "${files[@]}"; do
  sched="$(best "$f")"
  variant_env "${sched:-default}" "$bin/loom" bench -m "$f" --device cuda:0 -r 3 --json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    o=json.loads(l); o["schedule_override"]=sys.argv[1]; print(json.dumps(o))
    print("loom", o["model"], o["test"], sys.argv[1] or "default", round(o["tokens_per_s"],1), file=sys.stderr)' "$sched" >> "$out/prefill_loom.jsonl" || rc=1
  bash tools/gpu/llama_peer.sh bench "$f" || rc=1
done
echo "commit $commit, exit $rc"
exit $rc
