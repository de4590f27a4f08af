#!/usr/bin/env bash
# Quality of the GPU path on real weights, on the GPU machine: for each model file, the mean
# KL-divergence of Loom on cuda from Loom's reference path (cpu-ref), beside the mean KL-divergence
# of llama.cpp's CUDA backend from llama.cpp's CPU backend, both over the same text and context
# (tests/data/perplexity.txt, -c 128 -b 128, every chunk), in the same device session. Then the
# engine's real-model logits tests on cuda (HrxEngine.*cuda_<model>*: KL divergence per position
# from the reference on the same text).
#   there: bash tools/gpu/quality.sh FILE...
# Needs: Loom staged by tools/gpu/remote_build.sh (loom test_exec), llama.cpp built by
# tools/gpu/llama_peer.sh build (llama-perplexity), the model files (tools/gpu/carry_model.sh).
# Writes one JSON line per model to $OUT/quality.jsonl.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/stage_env.sh"
# llama-perplexity of tools/gpu/llama_peer.sh's build, else of tools/gpu/ggml_hrx.sh's.
llama=/tmp/llama-cuda/build/bin/llama-perplexity
[[ -x "$llama" ]] || llama=/tmp/llama-dl/build/bin/llama-perplexity
[[ -x "$llama" ]] || { echo "quality.sh: llama-perplexity missing: tools/gpu/llama_peer.sh build" >&2; exit 1; }
# A Loom run past the deadline prints its threads' stacks before it is killed (tools/gpu/deadline.sh).
deadline=(bash "$root/tools/gpu/deadline.sh" "${QUALITY_DEADLINE:-300}")
text="$root/tests/data/perplexity.txt"
args=(-f "$text" -c 128 -b 128)
work=/tmp/quality && mkdir -p "$work"
threads=$(nproc)
for f in "$@"; do
  name="$(basename "$f" .gguf)"
  echo "quality.sh: $name: llama.cpp CPU backend (base)"
  "$llama" -m "$f" "${args[@]}" -t "$threads" --device none -ngl 0 --kl-divergence-base "$work/$name.llama.kld" \
    > "$work/$name.llama-cpu.log" 2>&1
  echo "quality.sh: $name: llama.cpp CUDA backend against it"
  "$llama" -m "$f" "${args[@]}" -t "$threads" -ngl 99 -fa on --kl-divergence-base "$work/$name.llama.kld" --kl-divergence \
    > "$work/$name.llama-cuda.log" 2>&1
  echo "quality.sh: $name: Loom cpu-ref (base)"
  "${deadline[@]}" "$bin/loom" perplexity -m "$f" "${args[@]}" -t "$threads" --device cpu-ref --kl-divergence-base "$work/$name.loom.kld" \
    --json > "$work/$name.loom-ref.json"
  echo "quality.sh: $name: Loom cuda against it"
  "${deadline[@]}" "$bin/loom" perplexity -m "$f" "${args[@]}" -t "$threads" --device cuda:0 --kl-divergence-base "$work/$name.loom.kld" \
    --kl-divergence --json > "$work/$name.loom-cuda.json"
  python3 - "$name" "$work" "$commit" >> "$out/quality.jsonl" <<'PY'
import json, re, sys
name, work, commit = sys.argv[1:4]
log = open(f"{work}/{name}.llama-cuda.log").read()
def grab(rx):
    m = re.search(rx, log, re.M)
    return float(m.group(1)) if m else None
llama = {"ppl_cuda": grab(r"^Mean PPL\(Q\)\s*:\s*([0-9.]+)"), "ppl_cpu": grab(r"^Mean PPL\(base\)\s*:\s*([0-9.]+)"),
         "mean_kld": grab(r"^Mean\s+KLD:\s*([0-9.]+)"), "same_top_pct": grab(r"^Same top p:\s*([0-9.]+)")}
loom = json.load(open(f"{work}/{name}.loom-cuda.json"))
ref = json.load(open(f"{work}/{name}.loom-ref.json"))
print(json.dumps({"model": name, "commit": commit, "llama_cuda_vs_cpu": llama,
                  "loom_cuda_vs_cpu_ref": loom, "loom_cpu_ref": {"ppl": ref.get("ppl")}}))
PY
  tail -1 "$out/quality.jsonl"
done
filter=""
for f in "$@"; do filter+="Models/HrxEngine.*cuda_$(basename "$f" | tr -c 'A-Za-z0-9\n' '_')*:"; done
echo "quality.sh: engine logits tests on cuda: $filter"
"$bin/test_exec" --gtest_filter="$filter" 2>&1 | tail -25
