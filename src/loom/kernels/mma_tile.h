// The warp grid of the tensor-core matmuls (matmul_mma, matmul_mmq): a CTA of wm x wn warps
// computes bm = 16 mtiles wm weight rows x bn = 8 ntiles wn tokens, each warp mtiles x ntiles mma
// tiles of 16 rows x 8 tokens. The ids every such kernel starts from, the store of its
// accumulators into y [tokens][n_out] and its launch.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loom/kernels/op_util.h"

namespace loom::kernels::mma {

struct MmaTile {
  ir::Value *tid, *lane;    // thread in the CTA, lane in the warp
  ir::Value *m0, *n0;       // the CTA's first row and token
  ir::Value *wm0, *wn0;     // the warp's, within the CTA
  ir::Value *gq, *qq;       // lane / 4 and lane % 4 (g and q of the fragment layouts)
  int64_t mtiles, ntiles, bm, bn, threads;
};

// Emits the ids (thread, lane, g, q, the CTA's and warp's first row and token) of a CTA of
// wm x wn warps whose warps own mtiles x ntiles tiles; warp w is (w % wm, w / wm).
MmaTile mma_tile(Emit& b, int64_t wm, int64_t wn, int64_t mtiles, int64_t ntiles);

// The accumulators (mtiles x ntiles f32x4 C fragments, row-major by tile) stored into y
// [tokens][n_out]: C fragment lane i is row g + 8 (i / 2), token 2q + i % 2; rows and tokens past
// the ends are not stored.
void store_c(Emit& b, const MmaTile& t, const std::vector<ir::Value*>& acc, ir::Value* y, int64_t n_out, int64_t nt);

// A warpgroup MMA's accumulators (f32xN) as the N / 4 f32x4 C fragments that store_c takes
// (fragment j = lanes 4j .. 4j + 3: one warp's 16 rows x 8 tokens).
std::vector<ir::Value*> wgmma_c_fragments(Emit& b, ir::Value* acc);

// The launch of kernel `kname` (args w, x, y) over ceil(n_out / bm) x ceil(nt / bn) CTAs.
KernelLaunch mma_launch(const std::string& kname, const MmaTile& t, int64_t n_out, int64_t nt);

// The cpu form of these matmuls (mma is PTX-only): kernel `kname` (params w: u8 weights, x of
// element type x_elem named x_name, y: f32) with one thread per (row r = global x, token t =
// block y) of `threads`-wide blocks; `dot(b, w, x, r, t)` emits the row's dot product with the
// token, which lands in y [t][r] for r < n_out.
Generated per_output_kernel(const std::string& kname, ir::TargetKind target, ir::Scalar x_elem, const char* x_name,
                            int64_t n_out, int64_t nt, int64_t threads,
                            const std::function<ir::Value*(Emit&, ir::Value*, ir::Value*, ir::Value*, ir::Value*)>& dot);

}  // namespace loom::kernels::mma
