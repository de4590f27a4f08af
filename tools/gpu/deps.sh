#!/usr/bin/env bash
# Packs the Debian build dependencies that the GPU machine lacks (header-only fmt, nlohmann-json
# and CLI11; static PCRE2, SQLite and GoogleTest; the Boost headers that the HTTP server includes)
# into .gpu-deps/, mirroring their /usr paths so that their CMake config files still work there.
# It also packs the source at HEAD. tools/gpu/remote_build.sh builds that on the GPU machine
# (carry ".gpu-deps").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dst="$root/.gpu-deps"
rm -rf "$dst" && mkdir -p "$dst"
lib=/usr/lib/x86_64-linux-gnu
paths=(
  /usr/include/fmt /usr/include/nlohmann /usr/include/CLI /usr/include/gtest /usr/include/gmock
  /usr/include/pcre2.h /usr/include/sqlite3.h /usr/include/sqlite3ext.h
  /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 $lib/cmake/GTest
  $lib/libpcre2-8.a $lib/libsqlite3.a $lib/libgtest.a $lib/libgtest_main.a $lib/libgmock.a $lib/libgmock_main.a
)
for p in "${paths[@]}"; do
  [[ -e "$p" ]] || { echo "deps.sh: missing $p (run tools/setup.sh --dev)" >&2; exit 1; }
  mkdir -p "$dst$(dirname "$p")"
  cp -a "$p" "$dst$(dirname "$p")/"
done
# Boost.Beast/Asio are header-only but large (180 MB): only the headers that the server's
# sources include travel (their closure as the compiler reports it).
for f in "$root"/src/loom/serve/http.cpp; do
  g++ -std=c++20 -M -I"$root/src" "$f"
done | tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u | while read -r h; do
  mkdir -p "$dst$(dirname "$h")" && cp -a "$h" "$dst$(dirname "$h")/"
done
# The source at HEAD (committed work only: the working tree may hold others' unfinished edits),
# with the working-tree versions of the paths in LOOM_GPU_OVERLAY laid over it (a change tried on
# the GPU before it is committed); its commit then reads HEAD+overlay.
if [[ -n "${LOOM_GPU_OVERLAY:-}" ]]; then
  idx="$(mktemp)"
  # shellcheck disable=SC2086
  tree="$(cd "$root" && export GIT_INDEX_FILE="$idx" && git read-tree HEAD && git add -- $LOOM_GPU_OVERLAY && git write-tree)"
  rm -f "$idx"
  git -C "$root" archive --format=tar.gz -o "$dst/src.tar.gz" "$tree"
  echo "$(git -C "$root" rev-parse HEAD)+overlay-${tree:0:12}" > "$dst/commit"
else
  git -C "$root" archive --format=tar.gz -o "$dst/src.tar.gz" HEAD
  git -C "$root" rev-parse HEAD > "$dst/commit"
fi
du -sh "$dst"
