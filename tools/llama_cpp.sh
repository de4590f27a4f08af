#!/usr/bin/env bash
# Stock llama.cpp for ggml-hrx: fetches the llama.cpp that the PyPI sdist of llama-cpp-python
# carries (vendor/llama.cpp), builds its tools with dynamically loaded backends, then builds
# Loom's libggml-hrx.so against its ggml headers (docs/ggml_hrx.md). Everything fetched or built
# from llama.cpp lives under the cache folder below, never in the repository; a re-run is a
# no-op.
#
#   tools/llama_cpp.sh            fetch, build llama.cpp's tools, build libggml-hrx.so
#   tools/llama_cpp.sh --native   also (only) build llama-bench for this CPU (GGML_NATIVE=ON: the
#                                 instruction sets it has but AMX), the CPU benchmarks' peer
#   tools/llama_cpp.sh --print    print the llama.cpp folders (source, bin, native_bin) and exit
#
# Builds take /tmp/loom-build.lock (other builds share this machine); when the caller already
# holds it (`flock /tmp/loom-build.lock tools/llama_cpp.sh`), the inherited lock is used.
set -euo pipefail

# The one place the llama.cpp version is named: a newer llama.cpp is a new number here.
LLAMA_CPP_PYTHON_VERSION=0.3.36

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
loom_build="${LOOM_BUILD_DIR:-$root/build}"
cache="${LOOM_CACHE_DIR:-$HOME/.cache/loom}/llama.cpp-python-$LLAMA_CPP_PYTHON_VERSION"
src="$cache/src"    # vendor/llama.cpp of the sdist
bld="$cache/build"  # llama.cpp's build; tools and libggml-*.so in bin/
log="$cache/build.log"
lock=/tmp/loom-build.lock
# The tools ggml-hrx is tested and used with; ggml-cpu is a loadable module (GGML_BACKEND_DL),
# so nothing else pulls it in.
targets=(ggml-cpu test-backend-ops llama-cli llama-completion llama-perplexity llama-bench llama-server)

native_bld="$cache/build-native"  # llama-bench built for this CPU (bench/bench_cpu.py's peer)
native=0
if [[ "${1:-}" == "--print" ]]; then
  echo "source $src"
  echo "bin $bld/bin"
  echo "native_bin $native_bld/bin"
  exit 0
elif [[ "${1:-}" == "--native" && $# -eq 1 ]]; then
  native=1
elif [[ $# -gt 0 ]]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi

tty=0
[[ -t 1 ]] && tty=1
t_start=$SECONDS
step_no=0
step() {  # one line per step, with the time since the script started
  step_no=$((step_no + 1))
  printf 'llama_cpp.sh [%d] %s (%ds)\n' "$step_no" "$*" $((SECONDS - t_start))
}
# Runs a build command: on a terminal its own progress shows; otherwise its output goes to the
# log, whose tail is printed if the command fails.
run_logged() {
  if [[ $tty -eq 1 ]]; then
    "$@"
  elif ! "$@" >>"$log" 2>&1; then
    echo "llama_cpp.sh: failed: $*" >&2
    echo "llama_cpp.sh: the last lines of $log:" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
}
have_lock=0
take_build_lock() {
  [[ $have_lock -eq 1 ]] && return 0
  local fd
  # A caller's `flock FILE cmd` leaves its descriptor open in this process: locking that same
  # open file again succeeds at once, where a fresh open of FILE would wait for ourselves.
  for fd in /proc/$$/fd/*; do
    if [[ "$(readlink "$fd" 2>/dev/null)" == "$lock" ]]; then
      flock "${fd##*/}"
      have_lock=1
      return 0
    fi
  done
  exec 9>>"$lock"
  if ! flock -n 9; then
    step "waiting for $lock (another build)"
    flock 9
  fi
  have_lock=1
}

mkdir -p "$cache"
: >"$log"

# 1. The sources: the sdist, unpacked once (pip builds its metadata, which needs the network
#    only for the build requirements).
if [[ ! -f "$src/ggml/include/ggml-backend.h" ]]; then
  step "fetching llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (sdist) from PyPI"
  mkdir -p "$cache/sdist"
  sdist="$cache/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
  if [[ ! -f "$sdist" ]]; then
    run_logged python3 -m pip download -q --no-deps --no-binary :all: \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$cache/sdist"
  fi
  step "unpacking vendor/llama.cpp"
  rm -rf "$cache/unpack"
  mkdir -p "$cache/unpack"
  tar -xzf "$sdist" -C "$cache/unpack" "llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
  rm -rf "$src"
  mv "$cache/unpack/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp" "$src"
  rm -rf "$cache/unpack"
fi
ggml_version="$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))/\2/p' "$src/ggml/CMakeLists.txt" | paste -sd.)"

# 1b. --native: llama-bench with the CPU backend compiled for this machine (-march=native; ggml
#     refuses GGML_NATIVE with loadable backends, so the backend is built in), in its own folder.
#     The oracle build below stays portable and AVX2-pinned; this one is llama.cpp at its fastest
#     here, which is what Loom's CPU speed is compared with.
#     Without AMX: on the Sapphire Rapids Xeon this project measures on, ggml's AMX matmul dies
#     of SIGILL at its first tileloadd (ggml_backend_amx_mul_mat, ggml 0.25.3), so the peer is
#     llama.cpp's fastest configuration that runs there: AVX-512 with VNNI/VBMI and its repacked
#     weights.
if [[ $native -eq 1 ]]; then
  noamx=""
  grep -qw amx_tile /proc/cpuinfo 2>/dev/null && noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  ncfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=OFF -DGGML_NATIVE=ON
        "-DCMAKE_C_FLAGS=$noamx" "-DCMAKE_CXX_FLAGS=$noamx"
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF)
  if [[ ! -f "$native_bld/build.ninja" || "$(cat "$native_bld/loom-cmake-args" 2>/dev/null)" != "${ncfg[*]}" ]]; then
    take_build_lock
    step "configuring llama.cpp for this CPU in $native_bld"
    run_logged cmake -S "$src" -B "$native_bld" "${ncfg[@]}"
    echo "${ncfg[*]}" >"$native_bld/loom-cmake-args"
  fi
  take_build_lock
  step "building llama-bench for this CPU"
  run_logged cmake --build "$native_bld" -j"$(nproc)" --target llama-bench
  step "llama-bench for this CPU: $native_bld/bin/llama-bench"
  exit 0
fi

# 2. llama.cpp: shared libraries, every backend a module loaded at run time, only the CPU one
#    built. GGML_NATIVE=OFF keeps the binaries portable; on AVX2 machines the CPU backend gets
#    the AVX2 set, the one the tools/setup.sh oracle uses and Loom's reference mirrors.
cpu_flags=()
if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
  cpu_flags=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
fi
# No network at build time: no HTTPS client, no web UI (its prebuilt assets are a download).
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF
     "${cpu_flags[@]}" -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_TOOLS=ON
     -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF)
cfg_stamp="$bld/loom-cmake-args"
stamp="$bld/loom-built-targets"
if [[ ! -f "$bld/build.ninja" || ! -f "$cfg_stamp" || "$(cat "$cfg_stamp")" != "${cfg[*]}" ]]; then
  step "configuring llama.cpp (ggml $ggml_version) in $bld"
  take_build_lock
  rm -f "$stamp"
  run_logged cmake -S "$src" -B "$bld" "${cfg[@]}"
  echo "${cfg[*]}" >"$cfg_stamp"
fi
# The unpacked sources never change and the server's UI step reruns at every build (so ninja
# never reports "no work"): a stamp written after a complete build says it is done.
if [[ -f "$stamp" && "$(cat "$stamp")" == "${targets[*]}" ]]; then
  step "llama.cpp is built ($bld/bin)"
else
  take_build_lock
  step "building llama.cpp: ${targets[*]}"
  run_logged cmake --build "$bld" -j"$(nproc)" --target "${targets[@]}"
  echo "${targets[*]}" >"$stamp"
fi

# 3. libggml-hrx.so in Loom's build, against these headers and this libggml-base.so.
if [[ ! -f "$loom_build/build.ninja" ]]; then
  echo "llama_cpp.sh: no Loom build in $loom_build (run tools/build.sh first)" >&2
  exit 1
fi
cached="$(sed -n 's/^LOOM_GGML_DIR:[A-Z]*=//p' "$loom_build/CMakeCache.txt")"
if [[ "$cached" != "$src" ]] || ! grep -q 'libggml-hrx\.so' "$loom_build/build.ninja"; then
  step "configuring Loom's build with LOOM_GGML_DIR=$src"
  take_build_lock
  run_logged cmake "$loom_build" -DLOOM_GGML_DIR="$src" -DLOOM_GGML_BUILD_DIR="$bld"
fi
# Loom's build is shared with the rest of the tree: ninja decides what is out of date.
take_build_lock
step "building libggml-hrx.so"
run_logged cmake --build "$loom_build" -j"$(nproc)" --target ggml-hrx
step "done: GGML_BACKEND_PATH=$loom_build/libggml-hrx.so $bld/bin/llama-cli --list-devices"
