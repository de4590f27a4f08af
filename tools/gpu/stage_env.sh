# Sourced by the GPU-machine scripts (tools/gpu/*.sh, tests/*/gpu_*.sh): the repository root (cd
# there), $out (the device tool's $OUT, else gpu-out/), the staged binaries ($stage, default .gpu,
# from tools/gpu/build.sh or remote_build.sh: $bin, $commit), LOOM_CACHE_DIR, and a link from the
# source path the binaries were built at to this checkout (tests look for their data there).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
stage="${LOOM_GPU_STAGE:-.gpu}"
bin="$root/$stage/bin"
commit="$(cat "$stage/commit" 2>/dev/null || echo unknown)"
export LOOM_CACHE_DIR=/tmp/loom-cache
src_dir="$(cat "$stage/source_dir" 2>/dev/null || true)"
if [[ -n "$src_dir" && "$src_dir" != "$root" && ! -e "$src_dir" ]]; then
  mkdir -p "$(dirname "$src_dir")" && ln -s "$root" "$src_dir"
fi
