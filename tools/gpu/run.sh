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
# Test binaries look for test data under the source path they were built from: point it here.
src_dir="$(cat .gpu/source_dir 2>/dev/null || true)"
if [[ -n "$src_dir" && "$src_dir" != "$root" && ! -e "$src_dir" ]]; then
  mkdir -p "$(dirname "$src_dir")" && ln -s "$root" "$src_dir"
fi
rc=0
for step in "${steps[@]}"; do
  echo "=== $step"
  case "$step" in
    devices)
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
      "$bin/loom" devices --json | tee "$out/devices.json" || rc=1
      ;;
    tests)
      # One log for all binaries, one gtest JSON per binary merged into tests.json (the device
      # tool returns at most 8 files).
      mkdir -p /tmp/gpu-tests
      for t in "$bin"/test_*; do
        name="$(basename "$t")"
        "$t" --gtest_output="json:/tmp/gpu-tests/$name.json" >> "$out/tests.log" 2>&1
        r=$?
        echo "$name: exit $r"
        [[ $r -ne 0 ]] && rc=1
      done
      python3 - "$out/tests.json" "$commit" /tmp/gpu-tests/*.json <<'PY'
import json, sys, subprocess
out, commit, files = sys.argv[1], sys.argv[2], sys.argv[3:]
dev = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
res = {"commit": commit, "device": dev, "command": "bash tools/gpu/run.sh tests", "binaries": {}}
for f in files:
    j = json.load(open(f))
    name = f.rsplit("/", 1)[1][:-5]
    cases = []
    for suite in j.get("testsuites", []):
        for c in suite.get("testsuite", []):
            status = "skipped" if c.get("result") == "SKIPPED" else ("failed" if c.get("failures") else "passed")
            cases.append({"name": f"{suite['name']}.{c['name']}", "status": status, "time": c.get("time")})
    res["binaries"][name] = {"tests": j.get("tests"), "failures": j.get("failures"), "cases": cases}
    print(f"{name}: {j.get('tests')} tests, {j.get('failures')} failures, "
          f"{sum(c['status'] == 'skipped' for c in cases)} skipped")
json.dump(res, open(out, "w"), indent=1)
PY
      grep -E "FAILED|SKIPPED" "$out/tests.log" | sort | uniq | head -40
      ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
done
echo "commit $commit, exit $rc"
exit $rc
