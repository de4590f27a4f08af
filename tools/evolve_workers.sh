#!/usr/bin/env bash
# Starts N local `loom evolve worker` processes against one evolve database, for a try-out of a
# search spread over workers (docs/evolve.md, "Several machines"). They run until Ctrl-C (or
# SIGTERM), which ends them all; each writes its lines to stdout, prefixed with its host:pid.
#   tools/evolve_workers.sh N postgresql://USER@HOST/DB [--device cpu|cuda|cuda:K] [--lease S]
# With --device cuda and no :K, worker i gets cuda:i (one per GPU). Then, elsewhere:
#   loom evolve run --op ... --shape ... --db postgresql://USER@HOST/DB --workers 0
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
loom="${LOOM_BIN:-$root/build/loom}"
if [[ $# -lt 2 || ! "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N DATABASE_URL [--device D] [--lease SECONDS]" >&2
  exit 2
fi
n="$1"; db="$2"; shift 2
device=cpu; lease=30
while [[ $# -gt 0 ]]; do
  case "$1" in
    --device) device="$2"; shift 2 ;;
    --lease) lease="$2"; shift 2 ;;
    *) echo "$0: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x "$loom" ]] || { echo "$0: no loom binary at $loom (build it, or set LOOM_BIN)" >&2; exit 2; }
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' INT TERM EXIT
for ((i = 0; i < n; i++)); do
  d="$device"
  [[ "$device" == cuda ]] && d="cuda:$i"
  "$loom" evolve worker --db "$db" --device "$d" --lease "$lease" &
  pids+=($!)
done
echo "started $n workers (${pids[*]}) on $device against ${db%%\?*}; Ctrl-C ends them" >&2
wait
