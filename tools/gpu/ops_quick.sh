#!/usr/bin/env bash
# Every op of the library on the GPU through `loom ops test` (its test shapes, the default schedule
# and OPS_RANDOM random ones, default 0), one summary line per op; the full log in
# $OUT/ops_quick.log. A quicker check than test_ops for a change that touches every GPU kernel
# (e.g. the PTX emitter). Run there: bash tools/gpu/ops_quick.sh [OP...]
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/stage_env.sh"
rc=0
ops=("$@")
[[ ${#ops[@]} -eq 0 ]] && mapfile -t ops < <("$bin/loom" ops list 2>/dev/null | awk 'NF {print $1}' | sort -u)
for op in "${ops[@]}"; do
  echo "--- $op" >> "$out/ops_quick.log"
  timeout "${OPS_TIMEOUT:-90}" "$bin/loom" ops test "$op" --device cuda:0 --random "${OPS_RANDOM:-0}" >> "$out/ops_quick.log" 2>&1
  r=$?
  [[ $r -ne 0 ]] && rc=1
  echo "$op: exit $r, $(grep -c '^PASS' "$out/ops_quick.log" | tail -1) PASS lines so far, $(grep -cE '^(FAIL|ERROR)' "$out/ops_quick.log") FAIL/ERROR"
done
echo "commit $commit, exit $rc"
exit $rc
