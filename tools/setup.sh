#!/usr/bin/env bash
# Installs everything Loom needs on a fresh Debian machine, fetches the models and builds.
#   tools/setup.sh          runtime deps + build + SmolLM2 (enough for `loom chat`)
#   tools/setup.sh --dev    + test/oracle deps (llama-cpp-python, gguf, jinja2, clang for fuzzing,
#                             graphviz for docs/architecture.svg, tmux for the terminal chat
#                             test), stock llama.cpp and
#                             libggml-hrx.so (tools/llama_cpp.sh)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dev=0
[[ "${1:-}" == "--dev" ]] && dev=1

SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
pkgs=(cmake ninja-build g++ pkg-config libpcre2-dev libfmt-dev nlohmann-json3-dev libcli11-dev
      libsqlite3-dev libpq-dev libboost1.81-dev libedit-dev libcurl4 libhsa-runtime-dev python3 python3-pip)
if [[ $dev -eq 1 ]]; then
  pkgs+=(libgtest-dev clang-19 llvm-19 lld-19 chromium fonts-dejavu-core graphviz tmux postgresql)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

py=python3
if [[ $dev -eq 1 ]]; then
  # Oracles nobody here wrote: llama.cpp (llama-cpp-python), gguf, jinja2; pytest runs them.
  need=()
  # Pinned so the oracles do not move under the tests.
  for m in "pytest:pytest==9.2.0" "numpy:numpy==2.4.6" "gguf:gguf==0.19.0" "jinja2:jinja2==3.1.6" \
           "llama_cpp:llama-cpp-python==0.3.36" "openai:openai==3.57.0" "requests:requests==2.34.2" \
           "jsonschema:jsonschema==4.26.0"; do
    mod="${m%%:*}"; spec="${m#*:}"
    $py -c "import importlib.metadata as m, sys; sys.exit(m.version('${spec%%==*}') != '${spec##*==}')" \
      2>/dev/null || need+=("$spec")
  done
  if [[ ${#need[@]} -gt 0 ]]; then
    echo "setup: pip install ${need[*]}" >&2
    # llama-cpp-python's bindings only: they run over the stock llama.cpp that tools/llama_cpp.sh
    # builds below (tools/llama_oracle.py), so llama.cpp is compiled once, not twice.
    CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF ${CMAKE_ARGS:-}" $py -m pip install -q "${need[@]}"
  fi
fi

$py "$root/tools/fetch_models.py" smollm2 >/dev/null
[[ $dev -eq 1 ]] && $py "$root/tools/fetch_models.py" gemma3 >/dev/null

"$root/tools/build.sh"
# Stock llama.cpp and libggml-hrx.so, for the ggml-hrx tests (tests/py/test_ggml_hrx.py).
if [[ $dev -eq 1 ]]; then
  "$root/tools/llama_cpp.sh"
fi
