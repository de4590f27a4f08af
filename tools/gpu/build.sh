#!/usr/bin/env bash
# Builds a portable Loom (static libstdc++/libgcc, static PCRE2, header-only fmt, CUDA through
# dlopen) for the GPU machine into build-gpu/, and stages the binaries in .gpu/bin, the folder
# the device tool carries (`carry: [".gpu"]`). Run here, before tools/gpu/run.sh runs there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$root/build-gpu"
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_PORTABLE=ON -DLOOM_NATIVE=OFF \
    -DCMAKE_CXX_FLAGS="-march=x86-64-v3" >/dev/null
fi
cmake --build "$build" -j"$(nproc)"
rm -rf "$root/.gpu" && mkdir -p "$root/.gpu/bin"
cp "$build/loom" "$root/.gpu/bin/"
for t in "$build"/tests/test_*; do [[ -x "$t" && ! -d "$t" ]] && cp "$t" "$root/.gpu/bin/"; done
strip "$root"/.gpu/bin/* 2>/dev/null || true
git -C "$root" rev-parse HEAD > "$root/.gpu/commit"
echo "$root" > "$root/.gpu/source_dir"  # tests find their data under the build-time source path
du -sh "$root/.gpu"
