// The settings of the HRX lowering that a caller may choose (tests, `loom info --flags`): kept
// apart from fuse.h so that the backend's public header stays light.
#pragma once

#include <cstdint>

namespace loom::exec {

struct FuseOptions {
  // The launch fusions of fuse.h; off, only the quantize launches are placed (the plain step
  // needs them to lower at all). Default (LOOM_FUSE=gpu): on for PTX targets; the cpu driver's
  // kernels are bit-identical to the reference, so tests turn them on there (LOOM_FUSE=1) to
  // check the pass; LOOM_FUSE=0 turns them off everywhere.
  bool fuse = true;
  // Steps of up to this many tokens use the decode attention (the one that can also write its
  // readers' quantized rows), longer ones the tiled prompt attention (LOOM_DECODE_ATTENTION_MAX).
  int64_t decode_attention_max = 8;
};

}  // namespace loom::exec
