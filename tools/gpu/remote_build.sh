#!/usr/bin/env bash
# Builds Loom ON the GPU machine (16 cores there; this 2-core machine is the bottleneck) against
# the dependencies packed by tools/gpu/deps.sh, and stages the binaries in $LOOM_GPU_STAGE/bin
# (default .gpu) for tools/gpu/run.sh. Run there:  bash tools/gpu/remote_build.sh [TARGET...]
# The build folder (/tmp/loom-build) stays between calls while the machine is warm.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
deps="$root/.gpu-deps"
[[ -d "$deps/usr" ]] || { echo "remote_build.sh: $deps missing: run tools/gpu/deps.sh here and carry .gpu-deps" >&2; exit 1; }
src=/tmp/loom-src   # the committed source packed by deps.sh, not the carried working tree
build=/tmp/loom-build
if [[ ! -f "$src/.commit" ]]; then
  rm -rf "$src" && mkdir -p "$src" && tar -xzf "$deps/src.tar.gz" -C "$src" && cp "$deps/commit" "$src/.commit"
elif ! cmp -s "$src/.commit" "$deps/commit"; then
  # A newer source on a warm machine: only files that changed are replaced, so that the build
  # folder's timestamps let ninja rebuild just what they touch.
  rm -rf "$src.new" && mkdir -p "$src.new" && tar -xzf "$deps/src.tar.gz" -C "$src.new"
  (cd "$src.new" && find . -type f) | while read -r f; do
    cmp -s "$src.new/$f" "$src/$f" || { mkdir -p "$(dirname "$src/$f")" && cp "$src.new/$f" "$src/$f"; }
  done
  rm -rf "$src.new" && cp "$deps/commit" "$src/.commit"
fi
stage="$root/${LOOM_GPU_STAGE:-.gpu}"
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(loom test_exec test_ops test_hrx)
t0=$(date +%s)
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_PORTABLE=ON -DLOOM_NATIVE=OFF \
    -DCMAKE_PREFIX_PATH="$deps/usr" \
    -DCMAKE_CXX_FLAGS="-march=x86-64-v3" -DLOOM_BUILD_FUZZ=OFF > /tmp/remote-cmake.log 2>&1 ||
    { tail -30 /tmp/remote-cmake.log; exit 1; }
fi
if ! cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" > /tmp/remote-build.log 2>&1; then
  grep -E "error|FAILED" /tmp/remote-build.log | head -40
  echo "remote_build.sh: build failed (full log /tmp/remote-build.log)"
  exit 1
fi
rm -rf "$stage" && mkdir -p "$stage/bin"
cp "$build/loom" "$stage/bin/"
for t in "$build"/tests/test_*; do [[ -x "$t" && ! -d "$t" ]] && cp "$t" "$stage/bin/"; done
cp "$deps/commit" "$stage/commit"
echo "$src" > "$stage/source_dir"
echo "remote_build.sh: built ${targets[*]} in $(( $(date +%s) - t0 )) s"
