#!/usr/bin/env bash
# Runs a command with a deadline; a command still running at the deadline is a hang to explain,
# not just to kill: its threads' stacks are printed first (gdb where the machine has it, else
# each thread's kernel wait channel and state from /proc), then it is killed and the exit is 124.
#   bash tools/gpu/deadline.sh SECONDS COMMAND [ARGS...]
set -uo pipefail
secs="${1:?seconds}"; shift
"$@" &
pid=$!
for ((i = 0; i < secs; ++i)); do
  kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit $?; }
  sleep 1
done
echo "deadline.sh: $1 still running after ${secs} s (pid $pid): its threads" >&2
if command -v gdb > /dev/null; then
  timeout 60 gdb -p "$pid" -batch -ex "thread apply all bt 12" 2>&1 | grep -E "^Thread|^#" | head -150 >&2
else
  for t in /proc/"$pid"/task/*; do
    echo "  thread ${t##*/}: $(cut -d' ' -f3 "$t/stat") wchan=$(cat "$t/wchan" 2>/dev/null) $(cat "$t/comm")" >&2
  done
fi
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
exit 124
