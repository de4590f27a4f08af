// Weight tiles of matmul_mma: where a GGUF block's bytes are (GGUF rows or matvec_gpu's planar
// layout) and their dequantization to the f16 values the tensor cores see, emitted as Loom IR in
// two parts (loads, then arithmetic) so that a pipelined kernel can keep loads in flight.
#pragma once

#include <array>
#include <functional>
#include <utility>
#include <vector>

#include "loom/gguf/planar.h"
#include "loom/gguf/quant.h"
#include "loom/kernels/op_util.h"

namespace loom::kernels::mma {

// Block size in elements and bytes of the weight formats matmul_mma reads (Q4_0, Q8_0, Q4_K,
// Q6_K); false for the others.
struct MFormat {
  int block_elems;
  int block_bytes;
};
bool m_format(llm::GgmlType t, MFormat* f);

// Where a weight block's bytes are: GGUF rows, or the planar layout of matvec_gpu (gguf/planar.h,
// shape dim "planar" = 1), so that the prompt path reads the weights the decode path streams.
struct WLayout {
  bool planar = false;
  int64_t nb = 0;         // blocks per row
  int64_t rows = 0;       // n_out
  int block_bytes = 0;
  llm::PlanarGeometry pg;
};
WLayout layout_of(const Shape& s, llm::GgmlType wt, int64_t n_in, int64_t n_out, int block_elems, int block_bytes);

// Weights k0 .. k0+15 (k0 a multiple of 16) of row `r` (i32), as 16 values already rounded as the
// f16 the tensor cores see (value = scale * q - offset). The loads are emitted at the call; the
// arithmetic when the returned function is called (it must be called while `b` is alive). The
// function returns f32 values (f16 values when `f16_out`, the layout is planar and the format has
// a packed f16 form: Q4_0, Q4_K).
using Unpack16 = std::function<std::vector<ir::Value*>()>;
Unpack16 dequant16_split(Emit& b, llm::GgmlType t, ir::Value* w, const WLayout& L, ir::Value* r, ir::Value* k0,
                         bool f16_out = false);
// Loads and arithmetic together.
std::vector<ir::Value*> dequant16(Emit& b, llm::GgmlType t, ir::Value* w, const WLayout& L, ir::Value* r, ir::Value* k0);

// The f32 scale d * sc and min dmin * m of sub-blocks 2 pp and 2 pp + 1 of a Q4_K super-block
// from its 16-byte header as u32x4 (d | dmin << 16, then the 12 bytes of 6-bit scales and mins);
// pp (i32) is the pair 0..3.
std::array<std::pair<ir::Value*, ir::Value*>, 2> q4k_pair_scales(Emit& b, ir::Value* hdr, ir::Value* pp);

}  // namespace loom::kernels::mma
