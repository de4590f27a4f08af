#!/usr/bin/env bash
# The non-matrix ops on the GPU machine: their differential tests on cuda, then `loom ops bench`
# of each at decode (and prompt) shapes of Llama-3-8B and SmolLM2-135M, default schedule plus a
# few attention_decode schedules. Run from the repository root with loom and test_ops staged in
# $LOOM_GPU_STAGE/bin (default .gpu-elt). Writes $OUT/elt_tests.log, $OUT/elt_tests.json and
# $OUT/elt_bench.jsonl.
set -uo pipefail
out="${OUT:-gpu-out}"
mkdir -p "$out"
bin="${LOOM_GPU_STAGE:-.gpu-elt}/bin"
export LOOM_CACHE_DIR=/tmp/loom-cache
rc=0
ops='add|scale|softcap|swiglu|geglu|gather_rows|rms_norm|add_rms_norm|rms_norm_q8|softmax|rope_kv|attention_decode|attention_prompt'
filter=$(echo "$ops" | tr '|' '\n' | sed 's/.*/*MatchesReference\/&_cuda_*/' | paste -sd:)
timeout 120 "$bin/test_ops" --gtest_filter="$filter" --gtest_output="json:$out/elt_tests.json" > "$out/elt_tests.log" 2>&1 || rc=1
grep -E "^\[  (PASSED|FAILED)" "$out/elt_tests.log" | cut -c1-160 | sort | uniq
# Float dims are f32 bits: 1e-5 925353388, 1.0 1065353216, 32.0 1107296256, 500000 1223959552,
# 100000 1203982336, 1/sqrt(128) 1035273459, 1/8 1040187392.
rope8b="n_tokens=1,n_head=32,n_head_kv=8,head_dim=128,n_dims=128,mode=0,n_seq=1,n_ctx=4096,has_ff=1,n_ctx_orig=0,freq_base_f32=1223959552,freq_scale_f32=1065353216,ext_factor_f32=0,attn_factor_f32=1065353216,beta_fast_f32=1107296256,beta_slow_f32=1065353216"
att8b="n_head=32,n_head_kv=8,head_dim=128,n_seq=1,n_swa=0,scale_f32=1035273459,softcap_f32=0"
attsm="n_head=9,n_head_kv=3,head_dim=64,n_seq=1,n_swa=0,scale_f32=1040187392,softcap_f32=0"
cases=(
  "rms_norm|n_rows=1,n=4096,has_weight=1,eps_f32=925353388|"
  "add_rms_norm|n_rows=1,n=4096,has_weight=1,eps_f32=925353388|"
  "rms_norm|n_rows=1,n=576,has_weight=1,eps_f32=925353388|"
  "rms_norm|n_rows=512,n=4096,has_weight=1,eps_f32=925353388|"
  "rms_norm_q8|n_rows=1,n=4096,has_weight=1,eps_f32=925353388,dtype=8,add=1|"
  "add|n=4096|"
  "swiglu|n=14336|"
  "swiglu|n=7340032|"
  "geglu|n=14336|"
  "softmax|n_rows=1,n=128256,has_mask=0,scale_f32=1065353216|"
  "rope_kv|$rope8b|"
  "attention_decode|n_tokens=1,n_ctx=4096,$att8b|"
  "attention_decode|n_tokens=1,n_ctx=4096,$att8b|splits=4,warps=4"
  "attention_decode|n_tokens=1,n_ctx=4096,$att8b|splits=16,warps=4"
  "attention_decode|n_tokens=1,n_ctx=4096,$att8b|splits=32,warps=2"
  "attention_decode|n_tokens=1,n_ctx=4096,$att8b|splits=16,warps=8"
  "attention_decode|n_tokens=1,n_ctx=2048,$attsm|"
  "attention_prompt|n_tokens=512,n_ctx=512,$att8b|"
  "attention_prompt|n_tokens=512,n_ctx=512,$att8b|q_tile=1,warps=4"
  "attention_prompt|n_tokens=512,n_ctx=512,$att8b|q_tile=4,warps=2"
)
: > "$out/elt_bench.jsonl"
for c in "${cases[@]}"; do
  IFS='|' read -r op shape sch <<< "$c"
  args=(ops bench "$op" --device cuda --shape "$shape" --reps 50 --warmup 5 --seed 7 --json)
  [[ -n "$sch" ]] && args+=(--schedule "$sch")
  "$bin/loom" "${args[@]}" >> "$out/elt_bench.jsonl" 2>> "$out/elt_bench.log" || { echo "bench failed: $op $sch"; rc=1; }
done
cut -c1-220 "$out/elt_bench.jsonl"
exit $rc
