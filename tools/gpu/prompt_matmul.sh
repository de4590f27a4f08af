#!/usr/bin/env bash
# The prompt matmuls of an 8B model one by one on the GPU machine, each kernel variant beside the
# practical ceiling: `loom ops bench` of matmul_mmq (the engine's integer kernel) and of matmul_mma
# under each schedule of PM_VARIANTS (space-separated knob lists; "default": the engine's choice
# on Hopper), then torch's fp16 GEMM
# (cuBLAS) of the same (tokens x n_in) x (n_in x n_out) product on the same GPU. `ops bench` checks
# each kernel against the reference at the shape before it times it (a wrong kernel is not timed)
# and times each launch from the host (launch included). One JSON line per (shape, kernel) in
# $OUT/prompt_matmul.jsonl.
# Run there after tools/gpu/remote_build.sh: bash tools/gpu/prompt_matmul.sh
#   PM_SHAPES   n_in:n_out words (default: Llama-3-8B's q/o 4096:4096, k/v 4096:1024, gate/up
#               4096:14336, down 14336:4096)
#   PM_TOKENS   prompt length (default 512); PM_WTYPE GGUF type number (default 2, Q4_0)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/stage_env.sh"
rc=0
shapes=${PM_SHAPES:-"4096:4096 4096:1024 4096:14336 14336:4096"}
variants=${PM_VARIANTS:-"wgmma=1,wg_rs=1"}
nt=${PM_TOKENS:-512}
wtype=${PM_WTYPE:-2}
res="$out/prompt_matmul.jsonl"
export LOOM_THREADS=${LOOM_THREADS:-$(nproc)}  # the reference checks before each timing
bench() {  # op shape schedule label
  local op="$1" shape="$2" sched="$3" label="$4"
  timeout 180 "$bin/loom" ops bench "$op" --device cuda:0 --shape "$shape" ${sched:+--schedule "$sched"} --reps 50 --warmup 5 --json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    l = l.strip()
    if not l.startswith("{"): continue
    o = json.loads(l); o["kernel"] = sys.argv[1]; o["shape_text"] = sys.argv[2]; print(json.dumps(o))
    print("%-34s %-44s %s" % (sys.argv[1], sys.argv[2], {k: o[k] for k in o if k in ("median_us", "min_us", "max_us", "gflops")}), file=sys.stderr)' "$label" "$shape" >> "$res" || rc=1
}
for sh in $shapes; do
  n_in="${sh%%:*}" n_out="${sh##*:}"
  base="n_in=$n_in,n_out=$n_out,n_tokens=$nt,wtype=$wtype"
  bench matmul_mmq "$base,planar=1" "" "matmul_mmq"
  for v in $variants; do
    # "default": the engine's own choice on Hopper (the wgmma shape dim, no schedule)
    if [[ "$v" == default ]]; then bench matmul_mma "$base,xtype=1,planar=1,wgmma=1" "" "matmul_mma:default"
    else bench matmul_mma "$base,xtype=1,planar=1" "$v" "matmul_mma:$v"; fi
  done
done
# The ceiling: cuBLAS through torch, fp16 in, fp32 accumulate, same products (median of 50 after 5).
python3 - "$nt" $shapes >> "$res" <<'EOF' || rc=1
import json, sys, torch
nt = int(sys.argv[1])
for sh in sys.argv[2:]:
    n_in, n_out = map(int, sh.split(":"))
    a = torch.randn(nt, n_in, device="cuda", dtype=torch.float16)
    b = torch.randn(n_out, n_in, device="cuda", dtype=torch.float16)
    for _ in range(5): torch.matmul(a, b.t())
    ts = []
    for _ in range(50):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); torch.matmul(a, b.t()); e.record(); e.synchronize(); ts.append(s.elapsed_time(e) * 1e3)
    ts.sort()
    us = ts[len(ts) // 2]
    o = {"kernel": "torch.matmul fp16 (cuBLAS)", "shape_text": f"n_in={n_in},n_out={n_out},n_tokens={nt}", "median_us": us,
         "min_us": ts[0], "max_us": ts[-1], "tflops": 2 * nt * n_in * n_out / us / 1e6, "device": torch.cuda.get_device_name(0)}
    print(json.dumps(o))
    print("%-34s %-44s median %.1f us, %.0f TFLOP/s" % (o["kernel"], o["shape_text"], us, o["tflops"]), file=sys.stderr)
EOF
echo "commit $commit, exit $rc"
exit $rc
