#!/usr/bin/env bash
# Redraws docs/architecture.svg from the part graph in CMakeLists.txt (tools/check_layers.py --dot;
# graphviz's `dot`, installed by tools/setup.sh --dev). tests/py/test_layers.py fails when the
# committed docs/architecture.dot no longer matches the CMake graph.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The graph is drawn even while some include crosses a layer (the check still reports it and
# this script's exit status says so); only a cycle leaves nothing to draw.
status=0
python3 "$root/tools/check_layers.py" --dot "$root/docs/architecture.dot" >/dev/null || status=$?
dot -Tsvg "$root/docs/architecture.dot" -o "$root/docs/architecture.svg"
echo "wrote docs/architecture.dot and docs/architecture.svg"
exit $status
