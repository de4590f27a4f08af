#!/usr/bin/env bash
# The test command: installs what the tests need, builds, checks the include graph against the
# parts' declared layers, then runs the C++ unit tests (ctest), bounded fuzz runs and the oracle
# comparisons against llama.cpp / gguf / jinja2 (pytest).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/setup.sh" --dev
build="${LOOM_BUILD_DIR:-$root/build}"
export LOOM_BIN="$build/loom"

# Under a second. The build cannot catch an include that crosses a layer: every part compiles
# against the same src/ include root and the CLI links all of them.
echo "== layers (tools/check_layers.py)"
python3 "$root/tools/check_layers.py"

echo "== unit tests (ctest)"
if ! ctest --test-dir "$build" --output-on-failure -j"$(nproc)"; then
  # Show the failing tests' own output last, where a truncated CI log still has it.
  log="$build/Testing/Temporary/LastTest.log"
  echo "== ctest failed; the failing tests' output (from $log):"
  [[ -f "$log" ]] && awk '/^[0-9]+\/[0-9]+ Testing: /{blk=""} {blk=blk $0 "\n"} /^Test Failed\./{printf "%s", blk}' "$log" | tail -n 80
  exit 1
fi

if [[ -x "$root/tools/fuzz.sh" ]]; then
  echo "== fuzz (bounded)"
  "$root/tools/fuzz.sh" "${LOOM_FUZZ_SECONDS:-30}"
fi

echo "== oracle tests (pytest)"
cd "$root"
# The slowest tests are listed at the end (what to look at when CI time grows).
python3 -m pytest -q --durations=15 tests/py "$@"
