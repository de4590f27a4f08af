#!/usr/bin/env bash
# llama.cpp's CUDA backend as the peer of `loom bench` on the GPU machine, built there from the
# llama.cpp that the llama-cpp-python sdist carries (the version named in tools/llama_cpp.sh), so
# that both run on the same GGUF files in the same device session.
#   here:  bash tools/gpu/llama_peer.sh pack
#            fetches the sdist with pip (cached in $LOOM_CACHE_DIR) and packs the source subset
#            that llama-bench needs into .gpu-llama/ (~10 MiB; carry ".gpu-llama")
#   there: bash tools/gpu/llama_peer.sh build [JOBS]
#            starts the CUDA build (sm_90: llama-bench and llama-perplexity) in the background in its own
#            process session, so it runs on while other commands of the call or the next call run;
#            log /tmp/llama-cuda/build.log
#          bash tools/gpu/llama_peer.sh wait     blocks until that build ends; prints its tail
#          bash tools/gpu/llama_peer.sh bench FILE...
#            llama-bench -fa 1 -ngl 99 -r ${LLAMA_PEER_REPS:-3} ${LLAMA_PEER_FLAGS:--p 512 -n 128}
#            on each file, one JSON line per test in $OUT/llama_bench.jsonl
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
version="$(sed -n 's/^LLAMA_CPP_PYTHON_VERSION=//p' tools/llama_cpp.sh)"
pack="$root/.gpu-llama"
# LLAMA_PEER_BUILD_DIR: where the build lives (tools/gpu/ggml_hrx.sh waits on its own through `wait`).
bld="${LLAMA_PEER_BUILD_DIR:-/tmp/llama-cuda}"
case "${1:-}" in
  pack)
    cache="${LOOM_CACHE_DIR:-$HOME/.cache/loom}/llama-peer-$version"
    mkdir -p "$cache"
    sdist="$cache/llama_cpp_python-$version.tar.gz"
    [[ -f "$sdist" ]] || python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$cache"
    top="llama_cpp_python-$version/vendor/llama.cpp"
    # tests: test-backend-ops, for tools/gpu/ggml_hrx.sh.
    parts=(CMakeLists.txt cmake ggml src include common tools vendor licenses LICENSE app tests)
    rm -rf "$pack" && mkdir -p "$pack"
    tar -xzf "$sdist" -C "$cache" "${parts[@]/#/$top/}"
    tar -czf "$pack/llama-src.tar.gz" -C "$cache/$top" "${parts[@]}"
    echo "$version" > "$pack/version"
    du -sh "$pack"
    ;;
  build)
    [[ -f "$pack/llama-src.tar.gz" ]] || { echo "llama_peer.sh: $pack missing: run 'pack' here and carry .gpu-llama" >&2; exit 1; }
    jobs="${2:-8}"
    rm -rf "$bld" && mkdir -p "$bld/src"
    tar -xzf "$pack/llama-src.tar.gz" -C "$bld/src"
    setsid bash -c "cd '$bld' && { cmake -S src -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_CURL=OFF && cmake --build build -j$jobs --target llama-bench llama-perplexity; echo \"exit \$?\" > done; } > build.log 2>&1" \
      < /dev/null > /dev/null 2>&1 &
    echo "llama_peer.sh: llama.cpp $(cat "$pack/version") building in the background (log $bld/build.log)"
    ;;
  wait)
    while [[ ! -f "$bld/done" ]]; do
      sleep 10
      echo "llama_peer.sh: building: $(grep -c '^\[' "$bld/build.log" 2>/dev/null || echo 0) steps so far"
    done
    tail -3 "$bld/build.log"
    grep -q "exit 0" "$bld/done"
    ;;
  bench)
    shift
    out="${OUT:-$root/gpu-out}"
    mkdir -p "$out"
    exe="$bld/build/bin/llama-bench"
    [[ -x "$exe" ]] || { echo "llama_peer.sh: $exe missing: build first" >&2; exit 1; }
    for f in "$@"; do
      echo "llama_peer.sh: llama-bench $f"
      # shellcheck disable=SC2086
      "$exe" -m "$f" -fa 1 -ngl 99 -r "${LLAMA_PEER_REPS:-3}" ${LLAMA_PEER_FLAGS:--p 512 -n 128} -o jsonl |
        tee -a "$out/llama_bench.jsonl" |
        python3 -c 'import json,sys
for l in sys.stdin:
    o=json.loads(l); print(o.get("model_filename","?").split("/")[-1], "pp%d" % o["n_prompt"] if o["n_prompt"] else "tg%d" % o["n_gen"], round(o["avg_ts"],1), "+-", round(o["stddev_ts"],1))'
    done
    ;;
  *) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
