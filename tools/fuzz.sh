#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-19 (ASan+UBSan) into build-fuzz/ and runs each for
# SECONDS (default 30) from its committed seed corpus fuzz/corpus/<name>/. Fails on any crash.
#   tools/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
secs="${1:-30}"; shift || true
build="$root/build-fuzz"
if [[ ! -f "$build/build.ninja" ]]; then
  CC=clang-19 CXX=clang++-19 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLOOM_BUILD_FUZZ=ON -DLOOM_BUILD_TESTS=OFF -DLOOM_NATIVE=OFF >/dev/null
fi
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for f in "$root"/fuzz/fuzz_*.cpp; do targets+=("$(basename "${f%.cpp}")"); done
fi
cmake --build "$build" --target "${targets[@]}" -j"$(nproc)"
# One target per core at a time (each fuzzer is one single-threaded process); each reports when
# it ends, and the script fails if any found a crash.
run_one() {
  local t="$1" name="${1#fuzz_}"
  local seeds="$root/fuzz/corpus/$name" work="$build/corpus-$name" log="$build/$1.log"
  mkdir -p "$work" "$build/crashes-$name"
  echo "fuzz: $t for ${secs}s (seeds: fuzz/corpus/$name)"
  if "$build/fuzz/$t" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
       -artifact_prefix="$build/crashes-$name/" -print_final_stats=1 "$work" "$seeds" >"$log" 2>&1; then
    execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    echo "fuzz: $t ok: ${execs:-?} executions, 0 crashes"
  else
    echo "fuzz: $t FAILED; artifacts in $build/crashes-$name/"; tail -40 "$log"; return 1
  fi
}
status=0
jobs_max="$(nproc)"
pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  if (( ${#pids[@]} >= jobs_max )); then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
