#!/usr/bin/env bash
# The op library on the GPU machine (run from the repository root after tools/gpu/build.sh staged
# loom and test_ops in $LOOM_GPU_STAGE/bin): differential tests of every op on cuda (and the
# harness self-tests), then `loom ops bench` of the weight-streaming ops on Llama-3-8B and
# SmolLM2-135M rows. Writes $OUT/ops_tests.json (gtest summary), $OUT/ops_bench.jsonl, logs.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
stage="${LOOM_GPU_STAGE:-.gpu}"
bin="$root/$stage/bin"
commit="$(cat "$stage/commit" 2>/dev/null || echo unknown)"
export LOOM_CACHE_DIR=/tmp/loom-cache
src_dir="$(cat "$stage/source_dir" 2>/dev/null || true)"
if [[ -n "$src_dir" && "$src_dir" != "$root" && ! -e "$src_dir" ]]; then
  mkdir -p "$(dirname "$src_dir")" && ln -s "$root" "$src_dir"
fi
rc=0
filter="${OPS_FILTER:-*cuda*:OpHarness.*:OpRegistry.*}"
timeout "${OPS_TEST_TIMEOUT:-200}" "$bin/test_ops" --gtest_filter="$filter" --gtest_output="json:/tmp/test_ops.json" \
  > "$out/ops_tests.log" 2>&1 || rc=1
python3 tools/gpu/gtest_summary.py "$out/ops_tests.json" "$commit" \
  "bash tests/ops/gpu_ops.sh (test_ops --gtest_filter='$filter')" /tmp/test_ops.json || rc=1
grep -E "FAILED|Failure|SKIPPED" "$out/ops_tests.log" | sort | uniq | head -30
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
