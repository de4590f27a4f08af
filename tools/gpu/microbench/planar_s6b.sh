#!/usr/bin/env bash
# Planar weights on the GPU machine, with binaries built here by tools/gpu/build.sh into
# .gpu-planar (carry it): the planar op tests on cuda (matmul_mma's 16-byte piece loads, planar
# activation staging, planar defaults), the op-level planar vs GGUF A/B, and the 8B Q4_0 model's
# tg128/pp512 with and without LOOM_PLANAR=1 in the same binary.
set -uo pipefail
export LOOM_GPU_STAGE=.gpu-planar
export OUT="${OUT:-/tmp/s6b}"  # at most 6 files: they come back even if the call is cut short
mkdir -p "$OUT" /tmp/models
bin=.gpu-planar/bin
t0=$(date +%s)
stamp() { echo "=== $1 at $(( $(date +%s) - t0 )) s"; }
stamp tests
timeout 120 $bin/test_ops --gtest_filter='*matvec_gpu_cuda*planar*:*matmul_mma_cuda*planar*:Devices/MatvecGpuFused.*/cuda' \
  > "$OUT/tests.log" 2>&1; echo "tests rc $?"
grep -E "FAILED|Failure|PASSED|tests ran" "$OUT/tests.log" | head -20
stamp planar
bash tools/gpu/gpufast.sh planar
stamp bench
f=/tmp/models/synth-llama3-8b-q4_0.gguf
$bin/loom model synth --arch llama --shape llama3-8b --quant q4_0 -o "$f" 2>&1 | tail -1
for arm in gguf planar; do
  env $([[ $arm == planar ]] && echo LOOM_PLANAR=1) $bin/loom bench -m "$f" --device cuda:0 -r 3 --json \
    -o "$OUT/bench_$arm.jsonl" > /dev/null 2>&1
  python3 -c "import json,sys; [print('$arm', d['test'], round(d['tokens_per_s'],1), round(d['min'],1), round(d['max'],1)) for d in map(json.loads, open('$OUT/bench_$arm.jsonl'))]"
done
stamp done
exit 0
