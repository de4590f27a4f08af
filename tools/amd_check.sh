#!/usr/bin/env bash
# Checks Loom on a machine with an AMD RDNA3 / RDNA3.5 GPU, where none of it has run yet: builds
# Loom (with the amdgpu driver), lists the devices, then runs the HRX conformance suite on the GPU,
# every op of the op library at its test shapes against the reference, and `loom bench` on
# SmolLM2-135M. Every step runs even when one before it failed; each writes its log into the
# output folder (default ./amd_check), and the summary names the steps that failed.
#   tools/amd_check.sh [OUT_DIR [DEVICE]]      (DEVICE: amdgpu:0 unless given)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "${1:-amd_check}" && cd "${1:-amd_check}" && pwd)"
build="${LOOM_BUILD_DIR:-$root/build}"
loom="$build/loom"
device="${2:-amdgpu:0}"
failed=()

step() {
  local name=$1
  shift
  echo "== $name: $*"
  if "$@" >"$out/$name.log" 2>&1; then
    echo "   ok"
  else
    echo "   FAILED (exit $?): $out/$name.log"
    tail -n 5 "$out/$name.log" | sed 's/^/   | /'
    failed+=("$name")
  fi
}

# Loom's packages, models and build, plus what these checks need: GoogleTest, and LLVM 19's llc
# and ld.lld, which build each kernel for the GPU's own gfx arch at run time.
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q libgtest-dev llvm-19 lld-19 >/dev/null || exit 1
"$root/tools/setup.sh" || exit 1
cmake --build "$build" --target test_hrx || exit 1

step devices "$loom" devices --json
if ! grep -q "\"$device\"" "$out/devices.log"; then
  echo "amd_check: no $device here:" >&2
  cat "$out/devices.log" >&2
  exit 1
fi
step conformance "$build/tests/test_hrx" "--gtest_filter=Devices/Conformance.*/${device/:/_}:HrxDevices.*:Amdgpu*"
for op in $("$loom" ops list | awk '/^[^ ]/ {print $1}'); do
  step "op_$op" "$loom" ops test "$op" --device "$device"
done
step bench "$loom" bench --device "$device" --json -o "$out/bench.jsonl"

echo
if [[ ${#failed[@]} -eq 0 ]]; then
  echo "amd_check: every step passed on $device (logs in $out)"
else
  echo "amd_check: ${#failed[@]} step(s) failed on $device: ${failed[*]} (logs in $out)"
  exit 1
fi
