#!/usr/bin/env bash
# Builds a portable Loom (static libstdc++/libgcc, static PCRE2, header-only fmt, CUDA through
# dlopen) for the GPU machine into build-gpu/, and stages the binaries in .gpu/bin, the folder
# the device tool carries (`carry: [".gpu"]`). Run here, before tools/gpu/run.sh runs there.
# LOOM_GPU_BUILD (build folder) and LOOM_GPU_STAGE (staging folder, relative to the repository
# root, e.g. .gpu-hrx; carry that name and pass it to run.sh the same way) let several people
# stage builds side by side.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${LOOM_GPU_BUILD:-$root/build-gpu}"
stage="$root/${LOOM_GPU_STAGE:-.gpu}"
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_PORTABLE=ON -DLOOM_NATIVE=OFF \
    -DCMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache || true)" \
    -DCMAKE_CXX_FLAGS="-march=x86-64-v3" >/dev/null
fi
cmake --build "$build" -j"$(nproc)" ${LOOM_GPU_TARGETS:+--target $LOOM_GPU_TARGETS}
rm -rf "$stage" && mkdir -p "$stage/bin"
cp "$build/loom" "$stage/bin/"
for t in "$build"/tests/test_*; do [[ -x "$t" && ! -d "$t" ]] && cp "$t" "$stage/bin/"; done
strip "$stage"/bin/* 2>/dev/null || true
git -C "$root" rev-parse HEAD > "$stage/commit"
echo "$root" > "$stage/source_dir"  # tests find their data under the build-time source path
du -sh "$stage"
