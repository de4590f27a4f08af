#!/usr/bin/env bash
# The GPU weight-streaming kernels on the GPU machine (run from the repository root after
# tools/gpu/build.sh staged loom and test_ops in $LOOM_GPU_STAGE/bin): the op tests of matvec_gpu
# and matmul_mma on cuda (with the generic matvec beside them), then the device-timed benchmark
# (tests/ops/gpu_bench_test.cpp: graph replay over weight copies larger than the L2, event-timed,
# a 1 GiB device copy as the ceiling), then `loom ops bench` (host-timed) of generic and GPU ops
# side by side.
# Steps: tests, bench, sweep (bench with a schedule sweep of matvec_gpu), prompt (matmul_mma vs
# matmul at 512 tokens), batch (matvec_gpu at 1..16 tokens vs matmul_mma at 16, and quantize_act
# cooperative vs one thread per block), opsbench, planar (matvec_gpu's planar weight layout vs
# GGUF rows at the 8B shapes, with a schedule sweep of the planar form: tests/ops/
# matvec_gpu_planar_test.cpp; $OUT/gpufast_planar.jsonl). Default: tests bench prompt opsbench.
# Writes $OUT/gpufast_tests.json, $OUT/gpufast_bench.jsonl, $OUT/gpufast_opsbench.jsonl, logs.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/stage_env.sh"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests bench prompt opsbench)
rc=0
echo "commit $commit" | tee "$out/gpufast_commit.txt"
for step in "${steps[@]}"; do
  echo "=== $step"
  case "$step" in
    tests)
      timeout "${GPUFAST_TEST_TIMEOUT:-90}" "$bin/test_ops" \
        --gtest_filter='*matvec_gpu_cuda*:*matmul_mma_cuda*:*quantize_act_cuda*:*rms_norm_q8_cuda*:*MatvecGpuBatch*/1:*MatvecGpuFused*/cuda' \
        --gtest_output="json:/tmp/gpufast_tests.json" > "$out/gpufast_tests.log" 2>&1 || rc=1
      [[ -s /tmp/gpufast_tests.json ]] && python3 tools/gpu/gtest_summary.py "$out/gpufast_tests.json" "$commit" \
        "bash tools/gpu/gpufast.sh tests (test_ops: matvec_gpu, matmul_mma, quantize_act, rms_norm_q8, batch and fused bit-identity on cuda)" /tmp/gpufast_tests.json
      grep -E "FAILED|Failure|reference|SKIPPED" "$out/gpufast_tests.log" | sort | uniq | head -20
      tail -3 "$out/gpufast_tests.log"
      ;;
    bench|sweep)
      extra=()
      [[ "$step" == sweep ]] && extra=(LOOM_GPU_BENCH_SWEEP=1)
      env LOOM_GPU_BENCH="$out/gpufast_bench.jsonl" "${extra[@]}" timeout "${GPUFAST_BENCH_TIMEOUT:-120}" \
        "$bin/test_ops" --gtest_filter='GpuBench.WeightStreaming*' 2>&1 | tee -a "$out/gpufast_bench.log" | \
        grep -E "copy|matvec|Failure|FAILED|OK" || rc=1
      ;;
    prompt)
      LOOM_GPU_BENCH="$out/gpufast_bench.jsonl" timeout "${GPUFAST_PROMPT_TIMEOUT:-90}" \
        "$bin/test_ops" --gtest_filter='GpuBench.PromptMatmul*' 2>&1 | tee -a "$out/gpufast_bench.log" | \
        grep -E "copy|matmul|Failure|FAILED|OK" || rc=1
      ;;
    batch)
      LOOM_GPU_BENCH="$out/gpufast_bench.jsonl" timeout "${GPUFAST_BATCH_TIMEOUT:-90}" \
        "$bin/test_ops" --gtest_filter='GpuBench.SmallBatch*:GpuBench.QuantizeAct*' 2>&1 | tee -a "$out/gpufast_bench.log" | \
        grep -E "copy|matvec|matmul|quantize|Failure|FAILED|OK" || rc=1
      ;;
    planar)
      : > "$out/gpufast_planar.jsonl"
      env LOOM_GPU_BENCH_PLANAR="$out/gpufast_planar.jsonl" ${GPUFAST_PLANAR_SWEEP:+LOOM_GPU_PLANAR_SWEEP=1} \
        timeout "${GPUFAST_PLANAR_TIMEOUT:-240}" "$bin/test_ops" --gtest_filter='MatvecGpuPlanar.*' 2>&1 | \
        tee "$out/gpufast_planar.log" | grep -E "gguf|sweep|Failure|FAILED|OK|error" || rc=1
      ;;
    opsbench)
      : > "$out/gpufast_opsbench.jsonl"
      for shape in n_in=4096,n_out=14336,n_tokens=1,wtype=2 n_in=14336,n_out=4096,n_tokens=1,wtype=2 \
                   n_in=4096,n_out=4096,n_tokens=1,wtype=12 n_in=4096,n_out=4096,n_tokens=1,wtype=8; do
        for op in matvec_gpu matvec; do
          timeout 30 "$bin/loom" ops bench "$op" --device cuda --shape "$shape" --reps 50 --warmup 5 --json \
            >> "$out/gpufast_opsbench.jsonl" 2>> "$out/gpufast_opsbench.log" || rc=1
        done
      done
      cat "$out/gpufast_opsbench.jsonl"
      ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
done
echo "commit $commit, exit $rc"
exit $rc
