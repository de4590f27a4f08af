// The A/B switches of the HRX lowering (issues 6 and 7; docs/performance.md names the runs that
// set them), read from the environment once, when a backend is made, and handed to the code that
// decides (FusionPlanner, the weight layout, the step plans). Nothing below the backend reads
// them from the environment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::exec {

struct LoweringOptions {
  // LOOM_GPU_FAST_OPS=0: GPUs use the generic matvec/matmul (no matvec_gpu, matmul_mma, planar
  // weights).
  bool gpu_fast_ops = true;
  // LOOM_GPU_BATCH_MATVEC=0: matvec_gpu for one-token steps only, as before issue 6 (and GGUF rows).
  bool gpu_batch_matvec = true;
  // LOOM_PLANAR=0: weights stay in GGUF rows on GPUs.
  bool planar = true;
  // LOOM_FUSE: the launch fusions on GPUs by default; 0 turns them off everywhere, 1 on for the
  // cpu driver too (its kernels are bit-identical to the reference: tests check the lowering).
  enum class Fuse { kGpuOnly, kOff, kOn };
  Fuse fuse = Fuse::kGpuOnly;
  // LOOM_FUSE_NORM: q8 (rms_norm_q8 writing Q8_0/Q8_1/Q8_K blocks, add_rms_norm for the other
  // adds before a norm), q8_0 (Q8_0/Q8_1 only: session 5's form), add (add_rms_norm only), 0.
  enum class FuseNorm { kQ8, kQ8_0, kAdd, kOff };
  FuseNorm fuse_norm = FuseNorm::kQ8;
  // LOOM_FUSE_ATTN: the decode attention writes its readers' Q8 blocks for attention rows of
  // at most 2048 values (default), for every row (1), or never (0).
  enum class FuseAttn { kShortRows, kAll, kOff };
  FuseAttn fuse_attn = FuseAttn::kShortRows;
  // LOOM_GPU_PDL_PROMPT=1: programmatic dependent launch for prompt steps too (decode always).
  bool pdl_prompt = false;
  // LOOM_DECODE_ATTENTION_MAX: steps of up to this many tokens use the split-key decode
  // attention, longer ones the tiled prompt attention.
  int64_t decode_attention_max = 8;

  // Whether weights may live in the planar layout: only matvec_gpu and matmul_mma read it, and
  // every matmul goes to them only with the fast ops on for any number of tokens.
  bool planar_layout() const { return planar && gpu_fast_ops && gpu_batch_matvec; }

  // The environment's settings over the defaults. A value a switch does not know leaves its
  // default and adds one line to *warnings (when given).
  static LoweringOptions from_env(std::vector<std::string>* warnings = nullptr);
};

}  // namespace loom::exec
