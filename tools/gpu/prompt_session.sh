#!/usr/bin/env bash
# One GPU-machine call for a prompt-matmul change, in the order that matters when device time is
# short (binaries staged in .gpu by tools/gpu/build.sh here; carry ".gpu" and ".gpu-llama"):
#   1. llama.cpp's CUDA build starts in the background (tools/gpu/llama_peer.sh build), the
#      synthetic 8B models (Q4_0, Q4_K_M-like) are written in the background
#   2. correctness: the IR goldens through the CUDA driver (wgmma_rs_tile among them), matmul_mma's
#      op tests under each schedule of PS_SCHEDULES
#   3. tools/gpu/prompt_matmul.sh: the 8B matrices one by one, PS_SCHEDULES beside matmul_mmq and
#      torch's fp16 GEMM
#   4. tools/gpu/prefill.sh sweep: pp512 of both models under PS_VARIANTS
#   5. if llama.cpp's build has finished by then: llama-bench pp512 on both files (same session)
#   6. with PS_PP4096=1 and llama.cpp built: pp4096 of the 8B Q4_0 model, Loom and llama.cpp
#   7. with the time left: the engine on cuda against the CPU reference under the best variant
# Each step is cut off so that the whole ends within PS_BUDGET seconds (default 580).
# Run there: bash tools/gpu/prompt_session.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/stage_env.sh"
t0=$(date +%s)
left() { echo $(( ${PS_BUDGET:-580} - ($(date +%s) - t0) )); }
# A step's time limit: the time left less what later steps need, at least 1 s (timeout 0 would
# mean no limit).
upto() { local t=$(( $(left) - $1 )); echo $(( t > 1 ? t : 1 )); }
rc=0
bash tools/gpu/llama_peer.sh build "${PS_LLAMA_JOBS:-12}" > /dev/null 2>&1
mkdir -p /tmp/models
( for q in q4_0 q4_k; do
    f=/tmp/models/synth-llama3-8b-$q.gguf
    [[ -f "$f" ]] || { "$bin/loom" model synth --arch llama --shape llama3-8b --quant $q -o "$f.tmp" && mv "$f.tmp" "$f"; }
  done > /tmp/synth.log 2>&1 & )
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$out/device.txt"
export LOOM_THREADS=$(nproc)
echo "=== IR goldens on the GPU ($(left) s left)"
"$bin/test_ir" --gtest_filter='Golden/PtxOnGpu.*' 2>&1 | grep -E "FAILED|PASSED|got" | head -12
[[ ${PIPESTATUS[0]} -ne 0 ]] && rc=1
schedules=${PS_SCHEDULES:-"wgmma=1,wg_rs=1 wgmma=1,wg_rs=1,wg_n=64"}
for s in ${PS_TEST_SCHEDULES:-$schedules}; do  # the op tests' schedules (default: PS_SCHEDULES)
  [[ "$s" == default ]] && continue  # per matrix only (the op tests take explicit schedules)
  echo "=== matmul_mma op tests, $s"
  log="$out/ops_${s//[^A-Za-z0-9._-]/_}.log"  # names that come back from the device: letters, digits, . _ -
  timeout 100 "$bin/loom" ops test matmul_mma --device cuda:0 --schedule "$s" > "$log" 2>&1 || rc=1
  grep -E "^(FAIL|ERROR)" "$log" | head -5
  tail -1 "$log"
done
echo "=== per matrix ($(left) s left)"
PM_VARIANTS="$schedules" timeout "$(upto 240)" bash tools/gpu/prompt_matmul.sh 2>&1 | tail -25 || rc=1
while [[ ! -f /tmp/models/synth-llama3-8b-q4_k.gguf && $(left) -gt 200 ]]; do sleep 5; done
echo "=== pp512 sweep ($(left) s left)"
PREFILL_MODELS="llama3-8b:q4_0 llama3-8b:q4_k" PREFILL_VARIANTS="${PS_VARIANTS:-default wgmma:wg_rs=1}" \
  timeout "$(upto 60)" bash tools/gpu/prefill.sh sweep 2>&1 | grep -v "^===" | tail -8 || rc=1
if [[ -x /tmp/llama-cuda/build/bin/llama-bench && $(left) -gt 40 ]]; then
  echo "=== llama.cpp pp512 ($(left) s left)"
  LLAMA_PEER_FLAGS="-p 512 -n 0" timeout "$(upto 5)" bash tools/gpu/llama_peer.sh bench /tmp/models/synth-llama3-8b-q4_0.gguf \
    /tmp/models/synth-llama3-8b-q4_k.gguf 2>&1 | tail -4 || rc=1
else
  echo "llama.cpp not built yet ($(tail -1 /tmp/llama-cuda/build.log 2>/dev/null)); $(left) s left"
fi
if [[ -x /tmp/llama-cuda/build/bin/llama-bench && $(left) -gt 120 && -n "${PS_PP4096:-}" ]]; then
  echo "=== pp4096, 8B Q4_0, Loom (default) and llama.cpp ($(left) s left)"
  f=/tmp/models/synth-llama3-8b-q4_0.gguf
  timeout "$(upto 60)" "$bin/loom" bench -m "$f" --device cuda:0 -c 4096 -p 4096 -n 1 -r 3 --json 2>/dev/null | tee "$out/pp4096_loom.jsonl" || rc=1
  LLAMA_PEER_FLAGS="-p 4096 -n 0" timeout "$(upto 5)" bash tools/gpu/llama_peer.sh bench "$f" 2>&1 | tail -2 || rc=1
fi
if [[ $(left) -gt 60 ]]; then
  echo "=== the engine on cuda against the reference, best variant ($(left) s left)"
  PREFILL_MODELS="llama3-8b:q4_0 llama3-8b:q4_k" timeout "$(upto 5)" bash tools/gpu/prefill.sh engine 2>&1 | grep -v "^===" | tail -6 || rc=1
fi
echo "commit $commit, exit $rc, $(( $(date +%s) - t0 )) s"
exit $rc
