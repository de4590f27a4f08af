#!/usr/bin/env bash
# The decode step's small kernels on the GPU machine, after
# `bash tools/gpu/remote_build.sh loom test_ops test_exec` staged the binaries: the cuda op tests
# of the small decode ops (rms_norm_q8, attention_decode + out_q, quantize_act, add_rms_norm),
# the small-kernel latency bench (tests/ops/small_kernel_bench_test.cpp), the engine on cuda
# against the reference (tests/exec), `loom bench` of the three synthetic GPU models, an A/B of
# the same with the small-kernel forms off (LOOM_FUSE_ATTN=0 LOOM_FUSE_NORM=q8_0 and the regs
# form of rms_norm_q8), and the 8B decode profile. Results in $OUT (smallk_*).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/gpu/stage_env.sh"
rc=0
t0=$(date +%s)
stamp() { echo "--- $1 done at $(( $(date +%s) - t0 )) s"; }
echo "commit $commit"

"$bin/test_ops" --gtest_filter='*rms_norm_q8*cuda*:*attention_decode*cuda*:*quantize_act*cuda*:*add_rms_norm*cuda*:*AttentionQuant*:SmallKernelsPtx*' \
  --gtest_output="json:/tmp/smallk_ops.json" > "$out/smallk_ops.log" 2>&1 || rc=1
grep -E "FAILED|Failure|differs|first differing|PASSED|tests ran|SKIPPED" "$out/smallk_ops.log" | sort | uniq | head -30
python3 tools/gpu/gtest_summary.py "$out/smallk_ops.json" "$commit" \
  "bash tests/ops/gpu_smallk.sh (test_ops: rms_norm_q8, attention_decode, quantize_act, add_rms_norm on cuda; AttentionQuant; SmallKernelsPtx)" \
  /tmp/smallk_ops.json
stamp ops

LOOM_SMALL_BENCH="$out/smallk_small.jsonl" "$bin/test_ops" --gtest_filter='SmallKernelBench.*' 2>&1 |
  grep -E " us$|FAILED|Failure|Expected|SKIPPED" | head -40
stamp small

LOOM_ENGINE_FILTER='*cuda*' bash tools/gpu/run.sh engine || rc=1
stamp engine

mkdir -p /tmp/models
old="LOOM_FUSE_ATTN=0 LOOM_FUSE_NORM=q8_0 LOOM_SCHEDULE=rms_norm_q8:vec=0,regs=1,split=0"
for sq in llama3-8b:q4_0 llama3-8b:q4_k smollm2-135m:q4_0; do
  shape="${sq%%:*}" quant="${sq##*:}" f="/tmp/models/synth-${sq/:/-}.gguf"
  [[ -f "$f" ]] || "$bin/loom" model synth --arch llama --shape "$shape" --quant "$quant" -o "$f" 2>&1 | tail -1
  "$bin/loom" bench -m "$f" --device cuda:0 -r 3 --json -o "$out/smallk_bench.jsonl" > /dev/null || rc=1
  env $old "$bin/loom" bench -m "$f" --device cuda:0 -r 3 --json > /tmp/smallk_ab.jsonl || rc=1
  python3 -c 'import json,sys
for l in open("/tmp/smallk_ab.jsonl"):
    o=json.loads(l); o["ab"]=sys.argv[1]; print(json.dumps(o))' "$old" >> "$out/smallk_bench.jsonl"
  stamp "bench $sq"
done
python3 -c 'import json,sys
for l in open(sys.argv[1]):
    o=json.loads(l)
    print(o.get("model","?")[-28:], o["test"], round(o["tokens_per_s"],1), "A/B off" if "ab" in o else "new")' "$out/smallk_bench.jsonl"

f=/tmp/models/synth-llama3-8b-q4_0.gguf
"$bin/loom" bench -m "$f" --device cuda:0 -r 1 -p 16 -n 32 --profile -o "$out/smallk_profile.jsonl" > "$out/smallk_profile_8b.txt" 2>&1 || rc=1
f=/tmp/models/synth-llama3-8b-q4_k.gguf
"$bin/loom" bench -m "$f" --device cuda:0 -r 1 -p 16 -n 32 --profile -o "$out/smallk_profile.jsonl" > "$out/smallk_profile_8b_q4k.txt" 2>&1 || rc=1
grep -iE "decode|rms_norm|quantize|attention|rope|matvec" "$out/smallk_profile_8b.txt" | head -30
stamp profile
exit $rc
