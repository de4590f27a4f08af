#!/usr/bin/env bash
# The op library on the GPU machine (run from the repository root after tools/gpu/build.sh staged
# loom and test_ops in $LOOM_GPU_STAGE/bin): differential tests of every op on cuda (and the
# harness self-tests), then `loom ops bench` of the weight-streaming ops on Llama-3-8B and
# SmolLM2-135M rows. Writes $OUT/ops_tests.json (gtest summary), $OUT/ops_bench.jsonl, logs.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/gpu/stage_env.sh"
rc=0
# The weight-streaming ops and the harness self-tests first (short), then every other op on cuda
# under a time limit: gtest writes its JSON only when a binary finishes.
mine='*/matvec_cuda_*:*/matmul_cuda_*:*/quantize_act_cuda_*:*/get_rows_cuda_*:*/argmax_cuda_*:OpHarness.*:OpRegistry.*'
timeout "${OPS_TEST_TIMEOUT:-150}" "$bin/test_ops" --gtest_filter="$mine" --gtest_output="json:/tmp/test_ops_mat.json" \
  > "$out/ops_tests.log" 2>&1 || rc=1
timeout "${OPS_TEST_TIMEOUT2:-100}" "$bin/test_ops" --gtest_filter="*cuda*:-$mine" --gtest_output="json:/tmp/test_ops_elt.json" \
  >> "$out/ops_tests.log" 2>&1 || rc=1
reports=()
for f in /tmp/test_ops_mat.json /tmp/test_ops_elt.json; do [[ -s "$f" ]] && reports+=("$f"); done
[[ ${#reports[@]} -gt 0 ]] && python3 tools/gpu/gtest_summary.py "$out/ops_tests.json" "$commit" \
  "bash tests/ops/gpu_ops.sh (test_ops: weight-streaming ops on cuda + harness tests; then every other op on cuda)" \
  "${reports[@]}" || rc=1
grep -E "FAILED|Failure|SKIPPED" "$out/ops_tests.log" | sort | uniq | head -40
: > "$out/ops_bench.jsonl"
for shape in n_in=4096,n_out=14336,n_tokens=1,wtype=2 n_in=14336,n_out=4096,n_tokens=1,wtype=2 \
             n_in=4096,n_out=4096,n_tokens=1,wtype=12 n_in=4096,n_out=4096,n_tokens=1,wtype=8 \
             n_in=576,n_out=1536,n_tokens=1,wtype=3 n_in=576,n_out=49152,n_tokens=1,wtype=8; do
  "$bin/loom" ops bench matvec --device cuda --shape "$shape" --reps 50 --warmup 5 --json >> "$out/ops_bench.jsonl" \
    2>> "$out/ops_bench.log" || rc=1
done
"$bin/loom" ops bench quantize_act --device cuda --shape n_in=4096,n_tokens=1,dtype=8 --json >> "$out/ops_bench.jsonl" \
  2>> "$out/ops_bench.log" || rc=1
cat "$out/ops_bench.jsonl"
exit $rc
