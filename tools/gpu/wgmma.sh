#!/usr/bin/env bash
# Hopper's warpgroup MMA on the GPU machine (binaries staged in .gpu by tools/gpu/build.sh), before
# any timing: the layout facts in tools/gpu/microbench/wgmma_layout.cu (nvcc there, sm_90a), the
# wgmma_tile IR golden through the CUDA driver, and matmul_mma's op tests with the wgmma schedule
# (WGMMA_SCHEDULES, space-separated knob lists) against the reference. $OUT/wgmma_layout.jsonl,
# $OUT/wgmma_ops.log.   Run there: bash tools/gpu/wgmma.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/stage_env.sh"
rc=0
echo "=== layout microtest"
nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/wgmma_layout tools/gpu/microbench/wgmma_layout.cu &&
  /tmp/wgmma_layout | tee "$out/wgmma_layout.jsonl" || rc=1
echo "=== wgmma_tile golden"
"$bin/test_ir" --gtest_filter='Golden/PtxOnGpu.*wgmma*' 2>&1 | grep -E "OK|FAILED|PASSED|mismatch|got|error" | head -20
[[ ${PIPESTATUS[0]} -ne 0 ]] && rc=1
echo "=== matmul_mma op tests, wgmma schedules"
for s in ${WGMMA_SCHEDULES:-wgmma=1,pipeline=0 wgmma=1,pipeline=2 wgmma=1,pipeline=2,wg_n=64 wgmma=1,wg_m=1}; do
  echo "--- $s" | tee -a "$out/wgmma_ops.log"
  timeout 240 "$bin/loom" ops test matmul_mma --device cuda:0 --schedule "$s" --random 0 >> "$out/wgmma_ops.log" 2>&1 || rc=1
  tail -2 "$out/wgmma_ops.log"
done
echo "commit $commit, exit $rc"
exit $rc
