#!/usr/bin/env bash
# Packs the Debian build dependencies that the GPU machine lacks (header-only fmt, nlohmann-json
# and CLI11; static PCRE2, SQLite and GoogleTest; cpp-httplib with the shared libraries it needs)
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
  /usr/include/pcre2.h /usr/include/sqlite3.h /usr/include/sqlite3ext.h /usr/include/httplib.h
  /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 $lib/cmake/GTest
  $lib/libpcre2-8.a $lib/libsqlite3.a $lib/libgtest.a $lib/libgtest_main.a $lib/libgmock.a $lib/libgmock_main.a
  $lib/libcpp-httplib.so $lib/libcpp-httplib.so.0.11 $lib/libcpp-httplib.so.0.11.4
)
for p in "${paths[@]}"; do
  [[ -e "$p" ]] || { echo "deps.sh: missing $p (run tools/setup.sh --dev)" >&2; exit 1; }
  mkdir -p "$dst$(dirname "$p")"
  cp -a "$p" "$dst$(dirname "$p")/"
done
# The shared libraries cpp-httplib needs at run time, staged beside the binary there.
mkdir -p "$dst/runtime"
for l in libcpp-httplib.so.0.11 libbrotlidec.so.1 libbrotlienc.so.1 libbrotlicommon.so.1 libssl.so.3 libcrypto.so.3; do
  cp -L "$lib/$l" "$dst/runtime/" 2>/dev/null || cp -L "/lib/x86_64-linux-gnu/$l" "$dst/runtime/"
done
# The source at HEAD (committed work only: the working tree may hold others' unfinished edits).
git -C "$root" archive --format=tar.gz -o "$dst/src.tar.gz" HEAD
git -C "$root" rev-parse HEAD > "$dst/commit"
du -sh "$dst"
