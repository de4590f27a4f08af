#!/usr/bin/env bash
# The GPU recipe, run on the GPU machine from the repository root (binaries staged by
# tools/gpu/build.sh in .gpu/bin). Every GPU result in bench/results/ comes from this script:
#   device run: bash tools/gpu/run.sh [STEP...]     (carry .gpu; results land in $OUT)
# Steps: devices, tests (every test binary, GPU tests included), golden (Loom IR goldens from
# PTX through the CUDA driver). Default: all.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
bin="$root/.gpu/bin"
commit="$(cat .gpu/commit 2>/dev/null || echo unknown)"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(devices tests)
export LOOM_CACHE_DIR=/tmp/loom-cache LOOM_BIN="$bin/loom"
rc=0
for step in "${steps[@]}"; do
  echo "=== $step"
  case "$step" in
    devices)
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
      "$bin/loom" devices --json | tee "$out/devices.json" || rc=1
      ;;
    tests)
      for t in "$bin"/test_*; do
        name="$(basename "$t")"
        "$t" --gtest_output="json:$out/$name.json" > "$out/$name.log" 2>&1
        r=$?
        echo "$name: exit $r, $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$name.log" | tr '\n' ' ')"
        [[ $r -ne 0 ]] && { rc=1; tail -30 "$out/$name.log"; }
      done
      ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
done
echo "commit $commit, exit $rc"
exit $rc
