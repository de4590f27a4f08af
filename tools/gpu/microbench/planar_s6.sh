#!/usr/bin/env bash
# Planar weights on the GPU machine, after `tools/gpu/remote_build.sh loom test_ops
# test_exec`: matvec_gpu/matmul_mma op tests on cuda (planar shapes included), the planar vs GGUF
# A/B at the 8B shapes with a small planar sweep, loom bench with planar weights (the default)
# and the 8B Q4_0 model with LOOM_PLANAR=0, then the engine against the reference on cuda.
# Everything lands in /tmp/s6; $OUT gets s6.tgz and the JSON lines.
set -uo pipefail
export LOOM_GPU_STAGE=.gpu
real_out="${OUT:-/tmp/out}"
export OUT=/tmp/s6
mkdir -p "$OUT" /tmp/models
t0=$(date +%s)
stamp() { echo "=== $1 at $(( $(date +%s) - t0 )) s"; }
stamp tests
GPUFAST_TEST_TIMEOUT=150 bash tools/gpu/gpufast.sh tests
stamp planar
GPUFAST_PLANAR_SWEEP=1 bash tools/gpu/gpufast.sh planar
stamp bench
LOOM_BENCH_SHAPES="llama3-8b:q4_0 llama3-8b:q4_k smollm2-135m:q4_0" LOOM_BENCH_FLAGS="-r 3" bash tools/gpu/run.sh bench
mv "$OUT/bench.jsonl" "$OUT/bench_planar.jsonl"
stamp bench_gguf
LOOM_PLANAR=0 LOOM_BENCH_SHAPES="llama3-8b:q4_0" LOOM_BENCH_FLAGS="-r 3" bash tools/gpu/run.sh bench
mv "$OUT/bench.jsonl" "$OUT/bench_gguf.jsonl"
stamp engine
LOOM_ENGINE_FILTER='*cuda*' timeout 200 bash tools/gpu/run.sh engine
stamp done
tar -czf "$real_out/s6.tgz" -C /tmp s6
cp "$OUT"/gpufast_planar.jsonl "$OUT"/bench_planar.jsonl "$OUT"/bench_gguf.jsonl "$real_out"/ 2>/dev/null
exit 0
