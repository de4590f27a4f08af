#!/usr/bin/env bash
# Builds and runs the matvec layout microbenchmark on the GPU machine:
# timings to $OUT/mvl.jsonl, then ncu's L1/DRAM counters of one launch of each Q4_0 down and
# Q4_K gate|up variant to $OUT/mvl_ncu.csv. Run from the repository root there.
set -uo pipefail
out="${OUT:-/tmp/out}"
mkdir -p "$out"
nvcc -O3 -arch=sm_90 -o /tmp/mvl tools/gpu/microbench/matvec_layout.cu || exit 1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv | tee "$out/mvl_gpu.txt"
/tmp/mvl | tee "$out/mvl.jsonl"
m=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum
m+=,l1tex__throughput.avg.pct_of_peak_sustained_active,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
m+=,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
m+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts.sum
# Launch order of `mvl ncu`: q4_0 down a b c, gate_up a b c, qkv a b c, then q4_k likewise.
timeout 120 ncu --clock-control none --csv --metrics "$m" -k regex:mv /tmp/mvl ncu > "$out/mvl_ncu.csv" 2> "$out/mvl_ncu.err"
echo "ncu rc $?"
python3 - "$out/mvl_ncu.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: sys.exit("no ncu rows")
h = rows[0]
ki, mi, vi = h.index("ID"), h.index("Metric Name"), h.index("Metric Value")
by = {}
for r in rows[1:]: by.setdefault(r[ki], {})[r[mi]] = r[vi]
for k, v in by.items(): print(k, {m.split("__")[1][:40]: x for m, x in v.items()})
PY
