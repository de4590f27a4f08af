// The expert lists of the grouped mixture-of-experts matmuls (moe_groups.h).
#include "loom/kernels/moe_groups.h"

#include <span>
#include <vector>

namespace loom::kernels {

using ir::Mode;
using ir::Scalar;
using ir::Value;

Value* clamp_expert(Emit& b, Value* id, int64_t n_expert) {
  Value* ok = b.bit_and(b.cmp(Mode::kGe, id, b.i32(0)), b.cmp(Mode::kLt, id, b.i32(static_cast<int32_t>(n_expert))));
  return b.select(ok, id, b.i32(0));
}

void add_moe_groups_kernel(Generated& g, const std::string& name, int64_t n_expert, int64_t pairs, bool cpu,
                           int ids_arg, int groups_arg) {
  ir::Kernel* k = g.module.add_kernel(name);
  Emit b(*k);
  b.cpu = cpu;
  Value* ids = b.param(ty::gptr(Scalar::kI32), "ids");
  Value* groups = b.param(ty::gptr(Scalar::kI32), "groups");
  const int32_t ne = static_cast<int32_t>(n_expert), np = static_cast<int32_t>(pairs);
  // Whether pair p (in range) chose expert e.
  auto chose = [&](Value* p, Value* e) { return b.cmp(Mode::kEq, clamp_expert(b, b.load(ids, p), ne), e); };
  KernelLaunch l;
  l.kernel = name;
  l.args = {ids_arg, groups_arg};
  if (cpu) {  // one thread walks every expert's pairs
    b.for_loop(b.i32(0), b.i32(ne), b.i32(1), {}, [&](Value* e, std::span<Value* const>) {
      Value* list = b.offset(groups, b.add(b.i32(ne), b.mul(e, b.i32(np))));
      auto cnt = b.for_loop(b.i32(0), b.i32(np), b.i32(1), {b.i32(0)}, [&](Value* p, std::span<Value* const> it) {
        Value* hit = chose(p, e);
        b.when(hit, [&] { b.store(list, it[0], p); });
        return std::vector<Value*>{b.select(hit, b.add(it[0], b.i32(1)), it[0])};
      });
      b.store(groups, e, cnt[0]);
      return std::vector<Value*>{};
    });
    g.launches.push_back(l);
    return;
  }
  // GPUs: a warp per expert takes 32 pairs at a time; an inclusive scan of the lanes' hits (five
  // shuffles up) gives each hit its place after the pairs listed so far, so the list stays in
  // ascending order.
  Value* e = b.block_id(Mode::kX);
  Value* lane = b.thread_id(Mode::kX);
  Value* list = b.offset(groups, b.add(b.i32(ne), b.mul(e, b.i32(np))));
  auto cnt = b.for_loop(b.i32(0), b.i32(np), b.i32(32), {b.i32(0)}, [&](Value* p0, std::span<Value* const> it) {
    Value* p = b.add(p0, lane);
    Value* hit = b.bit_and(b.cmp(Mode::kLt, p, b.i32(np)), chose(b.min(p, b.i32(np - 1)), e));
    Value* sum = b.select(hit, b.i32(1), b.i32(0));
    for (int32_t d = 1; d < 32; d *= 2) {
      Value* up = b.shfl(Mode::kUp, sum, b.i32(d));
      sum = b.add(sum, b.select(b.cmp(Mode::kGe, lane, b.i32(d)), up, b.i32(0)));
    }
    b.when(hit, [&] { b.store(list, b.add(it[0], b.addc(sum, -1)), p); });
    return std::vector<Value*>{b.add(it[0], b.shfl(Mode::kIdx, sum, b.i32(31)))};
  });
  b.when(b.cmp(Mode::kEq, lane, b.i32(0)), [&] { b.store(groups, e, cnt[0]); });
  l.grid = {static_cast<uint32_t>(ne), 1, 1};
  l.block = {32, 1, 1};
  g.launches.push_back(l);
}

}  // namespace loom::kernels
