#!/usr/bin/env bash
# ggml-hrx on the GPU machine: one stock llama.cpp (the llama-cpp-python sdist's, as
# tools/llama_cpp.sh builds it here, with GGML_BACKEND_DL=ON) whose CUDA backend and HRX backend
# run side by side on the same files.
#   here:  bash tools/gpu/llama_peer.sh pack      (carry ".gpu-llama")
#   there: bash tools/gpu/ggml_hrx.sh build [JOBS]
#            starts the build of llama.cpp with GGML_BACKEND_DL=ON, GGML_CUDA=ON (sm_90) in the
#            background in its own process session (log /tmp/llama-dl/build.log): test-backend-ops,
#            llama-bench, llama-perplexity, llama-completion and the backend modules libggml-cpu.so
#            and libggml-cuda.so
#          bash tools/gpu/ggml_hrx.sh wait       blocks until that build ends
#          bash tools/gpu/ggml_hrx.sh module     builds libggml-hrx.so against it in the build folder
#            of tools/gpu/remote_build.sh (/tmp/loom-build) and stages it beside the binaries
#          bash tools/gpu/ggml_hrx.sh devices    llama-bench --list-devices with ggml-hrx loaded
#          bash tools/gpu/ggml_hrx.sh ops [DEVICE] [OP...]
#            test-backend-ops -b DEVICE (default HRX0, the first GPU) for each op (default: all
#            that ggml-hrx claims); per op the cases claimed, tested and passed in
#            $OUT/ggml_hrx_ops.jsonl, the full log in $OUT/test-backend-ops-DEVICE.log
#          bash tools/gpu/ggml_hrx.sh bench FILE...
#            llama-bench -dev HRX0 and -dev CUDA0 (-ngl 99 -fa 1) alternating for ${ROUNDS:-2} rounds
#            of -r ${REPS:-3}, ${FLAGS:--p 512 -n 128}; JSON lines in $OUT/ggml_hrx_bench.jsonl
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/stage_env.sh"
pack="$root/.gpu-llama"
bld=/tmp/llama-dl
loom_build=/tmp/loom-build
llbin="$bld/build/bin"
module="$root/$stage/bin/libggml-hrx.so"
hrx_env() { export GGML_BACKEND_PATH="$module"; }
case "${1:-}" in
  build)
    [[ -f "$pack/llama-src.tar.gz" ]] || { echo "ggml_hrx.sh: $pack missing: run llama_peer.sh pack here, carry .gpu-llama" >&2; exit 1; }
    jobs="${2:-8}"
    rm -rf "$bld" && mkdir -p "$bld/src"
    tar -xzf "$pack/llama-src.tar.gz" -C "$bld/src"
    # The same configuration as tools/llama_cpp.sh (shared libraries, loadable backends, the AVX2
    # set instead of -march=native, no HTTPS client), plus the CUDA backend for sm_90.
    setsid bash -c "cd '$bld' && { cmake -S src -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=ON \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF && \
        cmake --build build -j$jobs --target ggml-cpu ggml-cuda test-backend-ops llama-bench llama-perplexity \
        llama-completion; echo \"exit \$?\" > done; } > build.log 2>&1" < /dev/null > /dev/null 2>&1 &
    echo "ggml_hrx.sh: llama.cpp $(cat "$pack/version") (GGML_BACKEND_DL, CUDA) building in the background (log $bld/build.log)"
    ;;
  wait)
    LLAMA_PEER_BUILD_DIR="$bld" bash "$root/tools/gpu/llama_peer.sh" wait
    ;;
  module)
    [[ -f "$loom_build/build.ninja" ]] || { echo "ggml_hrx.sh: $loom_build missing: tools/gpu/remote_build.sh first" >&2; exit 1; }
    cmake "$loom_build" -DLOOM_GGML_DIR="$bld/src" -DLOOM_GGML_BUILD_DIR="$bld/build" > /tmp/ggml-hrx-cmake.log 2>&1 ||
      { tail -20 /tmp/ggml-hrx-cmake.log; exit 1; }
    cmake --build "$loom_build" -j"$(nproc)" --target ggml-hrx > /tmp/ggml-hrx-build.log 2>&1 ||
      { grep -E "error|FAILED" /tmp/ggml-hrx-build.log | head -30; exit 1; }
    cp "$loom_build/libggml-hrx.so" "$module"
    echo "ggml_hrx.sh: staged $module"
    ;;
  devices)
    hrx_env
    "$llbin/llama-bench" --list-devices 2>&1 | grep -v "^load_backend" | tail -8
    ;;
  ops)
    shift
    dev="${1:-HRX0}"; shift || true
    ops=("$@")
    [[ ${#ops[@]} -gt 0 ]] || ops=(ADD MUL SWIGLU GEGLU ROPE SCALE RMS_NORM NORM GET_ROWS SET_ROWS CONT CPY SOFT_MAX MUL_MAT
                                   FLASH_ATTN_EXT)
    hrx_env
    log="$out/test-backend-ops-$dev.log"
    : > "$log"
    for op in "${ops[@]}"; do
      echo "ggml_hrx.sh: test-backend-ops -b $dev -o $op"
      t0=$(date +%s)
      rc=0
      "$llbin/test-backend-ops" -b "$dev" -o "$op" > "$bld/ops-$op.log" 2>&1 || rc=$?
      cat "$bld/ops-$op.log" >> "$log"
      python3 - "$op" "$dev" "$rc" "$(( $(date +%s) - t0 ))" "$commit" "$bld/ops-$op.log" >> "$out/ggml_hrx_ops.jsonl" <<'PY'
import json, re, sys
op, dev, rc, secs, commit, path = sys.argv[1:7]
text = re.sub(r"\x1b\[[0-9;]*m", "", open(path, errors="replace").read())
claimed = passed = unclaimed = 0
failed = []
for line in text.splitlines():
    m = re.match(r"^  ([A-Z_0-9]+)\((.*)\): (.*)$", line)
    if not m or m.group(1) != op:
        continue
    status = m.group(3).strip()
    if status.startswith("not supported"):
        unclaimed += 1
        continue
    claimed += 1
    if status.endswith("OK"):
        passed += 1
    else:
        failed.append(m.group(2))
summary = re.search(r"^  (\d+)/(\d+) tests passed$", text, re.M)
print(json.dumps({"op": op, "device": dev, "commit": commit, "claimed": claimed, "passed": passed,
                  "failed": len(failed), "failed_cases": failed[:20], "left_to_cpu": unclaimed,
                  "summary": [int(summary.group(1)), int(summary.group(2))] if summary else None,
                  "exit": int(rc), "seconds": int(secs)}))
PY
      tail -1 "$out/ggml_hrx_ops.jsonl"
    done
    ;;
  bench)
    shift
    hrx_env
    for round in $(seq 1 "${ROUNDS:-2}"); do
      for f in "$@"; do
        for dev in HRX0 CUDA0; do
          echo "ggml_hrx.sh: round $round: llama-bench -dev $dev $(basename "$f")"
          # shellcheck disable=SC2086
          "$llbin/llama-bench" -m "$f" -dev "$dev" -ngl 99 -fa 1 -r "${REPS:-3}" ${FLAGS:--p 512 -n 128} -o jsonl \
            2> "$bld/bench-$dev.err" | python3 -c '
import json, sys
for l in sys.stdin:
    o = json.loads(l); o["loom_device"] = sys.argv[1]; o["round"] = int(sys.argv[2]); o["loom_commit"] = sys.argv[3]
    print(json.dumps(o)); sys.stdout.flush()
    t = "pp%d" % o["n_prompt"] if o["n_prompt"] else "tg%d" % o["n_gen"]
    print(sys.argv[1], o["model_filename"].split("/")[-1], t, round(o["avg_ts"], 1), "+-", round(o["stddev_ts"], 1),
          file=sys.stderr)' "$dev" "$round" "$commit" >> "$out/ggml_hrx_bench.jsonl" ||
            { echo "ggml_hrx.sh: llama-bench -dev $dev failed:"; tail -5 "$bld/bench-$dev.err"; }
        done
      done
    done
    ;;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
