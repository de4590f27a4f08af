#!/usr/bin/env bash
# Moves a model file larger than one device call's carry limit (64 MiB) to the GPU machine in
# pieces over consecutive calls (the machine must stay warm between them: /tmp survives only
# then).
#   here:  bash tools/gpu/carry_model.sh split FILE MIB1 [MIB2 ...]
#          writes piece k (MIBk MiB, the last one takes the rest) to .gpu-model-k/NAME.part with
#          NAME.sha256 beside it; carry ".gpu-model-k" in call k.
#   there: bash tools/gpu/carry_model.sh join NAME
#          appends the carried piece to $LOOM_CACHE_DIR/models/NAME.partial (default cache
#          /tmp/loom-cache, as tools/gpu/stage_env.sh sets); once the size is complete and the
#          SHA-256 matches, renames it to NAME. Prints what it has so far.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
case "${1:-}" in
  split)
    file="${2:?file}"; shift 2
    [[ $# -ge 1 ]] || { echo "carry_model.sh: give the MiB of each piece but the last" >&2; exit 2; }
    name="$(basename "$file")"
    size=$(stat -c %s "$file")
    sha=$(sha256sum "$file" | cut -d' ' -f1)
    off=0 k=1
    for mib in "$@" rest; do
      rm -rf ".gpu-model-$k" && mkdir -p ".gpu-model-$k"
      if [[ $mib == rest ]]; then n=$(( size - off )); else n=$(( mib * 1048576 )); fi
      (( off + n > size )) && n=$(( size - off ))
      dd if="$file" of=".gpu-model-$k/$name.part" bs=1M skip="$off" count="$n" iflag=skip_bytes,count_bytes status=none
      echo "$sha $size $off" > ".gpu-model-$k/$name.sha256"
      echo "carry_model.sh: piece $k: $n bytes at $off -> .gpu-model-$k"
      off=$(( off + n )) k=$(( k + 1 ))
      (( off >= size )) && break
    done
    ;;
  join)
    name="${2:?name}"
    dir="${LOOM_CACHE_DIR:-/tmp/loom-cache}/models"
    mkdir -p "$dir"
    for piece in .gpu-model-*/"$name.part"; do
      [[ -f "$piece" ]] || continue
      read -r sha size off < "${piece%.part}.sha256"
      have=$(stat -c %s "$dir/$name.partial" 2>/dev/null || echo 0)
      if (( have == off )); then cat "$piece" >> "$dir/$name.partial"; fi
      have=$(stat -c %s "$dir/$name.partial")
      echo "carry_model.sh: $name: $have of $size bytes"
      if (( have == size )); then
        [[ "$(sha256sum "$dir/$name.partial" | cut -d' ' -f1)" == "$sha" ]] ||
          { echo "carry_model.sh: $name: SHA-256 mismatch" >&2; rm -f "$dir/$name.partial"; exit 1; }
        mv "$dir/$name.partial" "$dir/$name"
        echo "carry_model.sh: $name complete (sha256 $sha)"
      fi
    done
    ;;
  *) echo "usage: carry_model.sh split FILE MIB... | join NAME" >&2; exit 2 ;;
esac
