// The warp grid of the tensor-core matmuls (mma_tile.h).
#include "loom/kernels/mma_tile.h"

namespace loom::kernels::mma {

using ir::Mode;
using ir::Value;

MmaTile mma_tile(Emit& b, int64_t wm, int64_t wn, int64_t mtiles, int64_t ntiles) {
  auto i32c = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };
  MmaTile t{};
  t.mtiles = mtiles;
  t.ntiles = ntiles;
  t.bm = 16 * mtiles * wm;
  t.bn = 8 * ntiles * wn;
  t.threads = 32 * wm * wn;
  t.tid = b.thread_id(Mode::kX);
  Value* warp = b.div(t.tid, b.i32(32));
  t.lane = b.rem(t.tid, b.i32(32));
  t.gq = b.div(t.lane, b.i32(4));
  t.qq = b.rem(t.lane, b.i32(4));
  t.m0 = b.mul(b.block_id(Mode::kX), i32c(t.bm));
  t.n0 = b.mul(b.block_id(Mode::kY), i32c(t.bn));
  t.wm0 = b.mul(b.rem(warp, i32c(wm)), i32c(16 * mtiles));
  t.wn0 = b.mul(b.div(warp, i32c(wm)), i32c(8 * ntiles));
  return t;
}

void store_c(Emit& b, const MmaTile& t, const std::vector<Value*>& acc, Value* y, int64_t n_out, int64_t nt) {
  auto i32c = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };
  for (int64_t mt = 0; mt < t.mtiles; ++mt)
    for (int64_t n8 = 0; n8 < t.ntiles; ++n8)
      for (int i = 0; i < 4; ++i) {
        Value* r = b.add(t.m0, b.add(t.wm0, b.addc(t.gq, 16 * mt + 8 * (i / 2))));
        Value* tok = b.add(t.n0, b.add(t.wn0, b.addc(b.mulc(t.qq, 2), 8 * n8 + i % 2)));
        Value* ok = b.bit_and(b.cmp(Mode::kLt, r, i32c(n_out)), b.cmp(Mode::kLt, tok, i32c(nt)));
        Value* v = b.extract(acc[static_cast<size_t>(mt * t.ntiles + n8)], i);
        b.if_then_else(ok, {}, [&] {
          b.store(y, b.add(b.mul(tok, i32c(n_out)), r), v);
          return std::vector<Value*>{};
        });
      }
}

std::vector<Value*> wgmma_c_fragments(Emit& b, Value* acc) {
  std::vector<Value*> out;
  for (int j = 0; j < acc->type.lanes() / 4; ++j) {
    std::vector<Value*> l4;
    for (int i = 0; i < 4; ++i) l4.push_back(b.extract(acc, 4 * j + i));
    out.push_back(b.build(l4));
  }
  return out;
}

KernelLaunch mma_launch(const std::string& kname, const MmaTile& t, int64_t n_out, int64_t nt) {
  KernelLaunch l;
  l.kernel = kname;
  l.args = {0, 1, 2};
  l.grid = {static_cast<uint32_t>((n_out + t.bm - 1) / t.bm), static_cast<uint32_t>((nt + t.bn - 1) / t.bn), 1};
  l.block = {static_cast<uint32_t>(t.threads), 1, 1};
  return l;
}

Generated per_output_kernel(const std::string& kname, ir::TargetKind target, ir::Scalar x_elem, const char* x_name,
                            int64_t n_out, int64_t nt, int64_t threads,
                            const std::function<Value*(Emit&, Value*, Value*, Value*, Value*)>& dot) {
  Generated g;
  ir::Kernel* k = g.module.add_kernel(kname);
  Emit b(*k);
  b.cpu = target == ir::TargetKind::kCpp;
  Value* w = b.param(ty::gptr(ir::Scalar::kU8), "w");
  Value* x = b.param(ty::gptr(x_elem), x_name);
  Value* y = b.param(ty::gptr(ir::Scalar::kF32), "y");
  Value* r = b.global_x();
  Value* t = b.block_id(Mode::kY);
  b.if_then_else(b.cmp(Mode::kLt, r, b.i32(static_cast<int32_t>(n_out))), {}, [&] {
    Value* acc = dot(b, w, x, r, t);
    b.store(y, b.add(b.mul(t, b.i32(static_cast<int32_t>(n_out))), r), acc);
    return std::vector<Value*>{};
  });
  KernelLaunch l;
  l.kernel = kname;
  l.args = {0, 1, 2};
  l.grid = {static_cast<uint32_t>((n_out + threads - 1) / threads), static_cast<uint32_t>(nt), 1};
  l.block = {static_cast<uint32_t>(threads), 1, 1};
  g.launches.push_back(l);
  return g;
}

}  // namespace loom::kernels::mma
