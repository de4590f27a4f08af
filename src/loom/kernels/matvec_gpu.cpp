// matvec_gpu: y = W x for 1..16 tokens, written for GPUs that stream weights at memory speed: each
// lane reads a contiguous run of weight blocks with the widest loads the layout allows (16-byte
// vectors through the read-only path), the tokens' activations are staged once per CTA in shared
// memory in an aligned layout, integer dot products use dot4 (dp4a), each thread serves several
// rows, and every weight unit it loads is dotted with every token's row (a batched decode step
// reads the weights once). A token's result is bit-identical whatever the token count.
// The same IR runs on the cpu target (threads run in turn; the lane partials meet in shared
// memory after a top-level barrier), so the cpu op tests check the GPU kernel itself.
// This file is the op (shapes, schedules, generation, reference); matvec_gpu_parts.h has the
// weight and activation access primitives it builds on.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "loom/gguf/planar.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/kernels/matvec_gpu_parts.h"
#include "loom/kernels/op_list.h"
#include "loom/kernels/op_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::kernels {
namespace {

using ir::AddrSpace;
using ir::Mode;
using ir::Scalar;
using ir::Type;
using ir::Value;
using llm::GgmlType;
using namespace matvec_gpu_detail;

// Tokens per launch (a batched decode step of up to 16 streams), and the shared memory
// the staged rows (and, on the cpp target, the lane partials) may take.
constexpr int64_t kMaxTokens = 16;
constexpr int64_t kSharedBudget = 46 * 1024;
// Prefetching carries the next unit of every row of a thread in registers: only for units small
// enough (Q6_K's 1680-byte units would spill).
constexpr int64_t kMaxPrefetchBytes = 640;

// The weight matrices of one launch (the fused decode step): n_w (1..3) matrices that
// read the same activations, with the same n_in and type (q|k|v, gate|up), each with its own
// rows (n_out, n_out1, n_out2) and output; or, with glu, gate and up of the same rows whose
// silu(gate) * up is the one output (the SwiGLU after them fused in). Shapes of one matrix
// carry none of the extra dims (their keys, and so the kernel store's, do not change).
struct Group {
  int n_w = 1;
  bool glu = false;
  int64_t rows[3] = {0, 0, 0};
  int64_t total() const { return rows[0] + rows[1] + rows[2]; }
  int outputs() const { return glu ? 1 : n_w; }
};

Group group_of(const Shape& s) {
  auto dim = [&](const char* k) {
    auto it = s.dims.find(k);
    return it == s.dims.end() ? int64_t{0} : it->second;
  };
  Group g;
  g.n_w = s.dims.count("n_w") ? static_cast<int>(dim("n_w")) : 1;
  g.glu = dim("glu") != 0;
  g.rows[0] = dim("n_out");
  if (g.n_w >= 2) g.rows[1] = dim("n_out1");
  if (g.n_w >= 3) g.rows[2] = dim("n_out2");
  return g;
}

// silu(g) * u as the swiglu op computes it (ggml's exp: bit for bit llm::ref::swiglu).
Value* silu_mul(Emit& b, Value* g, Value* u) {
  Value* e = elt::exp_ggml(b, b.sub(b.f32(0.0), g));
  return b.mul(b.div(g, b.add(b.f32(1.0), e)), u);
}

class MatvecGpuOp final : public OpSpec {
 public:
  std::string_view name() const override { return "matvec_gpu"; }
  std::string_view description() const override {
    return "y = W x for 1..16 tokens, streaming weights with wide loads (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K; x staged in "
           "shared memory, dot4); each token's result is bit-identical to its one-token launch";
  }

  Status validate(const Shape& s) const override {
    LOOM_ASSIGN_OR_RETURN(GgmlType wt, shape_type(s, "wtype"));
    WFormat f{};
    if (!w_format(wt, &f))
      return invalid_argument("matvec_gpu: weight type {} is not supported (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K)",
                              llm::ggml_type_name(wt));
    LOOM_ASSIGN_OR_RETURN(int64_t n_in, s.get("n_in"));
    LOOM_ASSIGN_OR_RETURN(int64_t n_out, s.get("n_out"));
    LOOM_ASSIGN_OR_RETURN(int64_t nt, s.get("n_tokens"));
    if (n_in <= 0 || n_in % f.block_elems != 0)
      return invalid_argument("matvec_gpu: n_in={} must be a positive multiple of {}", n_in, f.block_elems);
    if (n_out <= 0 || n_out > (1 << 24)) return invalid_argument("matvec_gpu: n_out={} out of range", n_out);
    if (nt < 1 || nt > kMaxTokens)
      return invalid_argument("matvec_gpu: n_tokens={} (1..{}; use matmul_mma or matmul)", nt, kMaxTokens);
    const Group grp = group_of(s);
    if (grp.n_w < 1 || grp.n_w > 3) return invalid_argument("matvec_gpu: n_w={} (1..3 weight matrices)", grp.n_w);
    for (int m = 1; m < grp.n_w; ++m)
      if (grp.rows[m] <= 0 || grp.rows[m] > (1 << 24))
        return invalid_argument("matvec_gpu: n_out{}={} out of range", m, grp.rows[m]);
    if (grp.glu && (grp.n_w != 2 || grp.rows[1] != n_out))
      return invalid_argument("matvec_gpu: glu needs n_w=2 and n_out1 = n_out (gate and up rows)");
    if (grp.total() > (1 << 24)) return invalid_argument("matvec_gpu: {} rows in all", grp.total());
    // One token's staged row, plus the lane partials, must fit the 48 KiB of shared memory;
    // more tokens are staged in groups that fit.
    const int64_t nb = n_in / f.block_elems;
    if (s.dims.count("planar") && s.at("planar") != 0 && s.at("planar") != 1)
      return invalid_argument("matvec_gpu: planar={} (0 or 1)", s.at("planar"));
    if (planar_of(s)) {
      llm::PlanarGeometry pg;
      if (!llm::planar_geometry(wt, &pg) || pg.block_bytes() != f.block_bytes)
        return invalid_argument("matvec_gpu: no planar layout for {}", llm::ggml_type_name(wt));
    }
    if (staged_bytes(f.xtype, nb, plan_of(f, nb, planar_of(s)).blocks, planar_of(s)) > 30 * 1024)
      return invalid_argument("matvec_gpu: n_in={} does not fit the staged activation row (30 KiB)", n_in);
    return Status();
  }

  // Arguments: w [w1 [w2]], xq, y [y1 [y2]] (glu: the one output y).
  std::vector<ArgSpec> args(const Shape& s) const override {
    WFormat f{};
    w_format(static_cast<GgmlType>(s.at("wtype")), &f);
    const Group grp = group_of(s);
    const int64_t n_in = s.at("n_in"), nt = s.at("n_tokens");
    const int64_t nb = n_in / f.block_elems;
    const int64_t xrow = static_cast<int64_t>(llm::ref::quantized_row_bytes(f.xtype, n_in));
    std::vector<ArgSpec> a;
    for (int m = 0; m < grp.n_w; ++m)
      a.push_back({m ? fmt::format("w{}", m) : "w", ArgKind::kBuffer, ArgRole::kInput, grp.rows[m] * nb * f.block_bytes,
                   Scalar::kU8});
    a.push_back({"xq", ArgKind::kBuffer, ArgRole::kInput, xrow * nt, Scalar::kU8});
    for (int m = 0; m < grp.outputs(); ++m)
      a.push_back({m ? fmt::format("y{}", m) : "y", ArgKind::kBuffer, ArgRole::kOutput, grp.rows[m] * nt * 4, Scalar::kF32});
    return a;
  }

  Cost cost(const Shape& s) const override {
    double bytes = 0;
    for (const ArgSpec& a : args(s)) bytes += static_cast<double>(a.bytes);
    return {bytes, 2.0 * static_cast<double>(s.at("n_in")) * static_cast<double>(group_of(s).total()) *
                       static_cast<double>(s.at("n_tokens"))};
  }

  // As matvec's: the row's blocks are summed per lane, then across lanes, in another order than
  // the reference's (float rounding of ~n_in/32 terms); integer block sums are exact.
  // glu: silu(g) * u moves g's error by up to ~1.1 times, times |u| (a few units here).
  Tolerance tolerance(const Shape& s) const override {
    const double k = group_of(s).glu ? 8.0 : 1.0;
    return {k * 2e-6 * std::sqrt(static_cast<double>(s.at("n_in"))), k * 1e-5, false};
  }

  // lanes_per_row and the unit plan fix each row's order of operations; the other knobs only
  // place work, so a token's result does not depend on them (nor on the token count).
  std::vector<Knob> schedule_space(const Shape&, ir::TargetKind) const override {
    return {{"warps", {2, 4, 8}},
            {"lanes_per_row", {1, 2, 4, 8, 16, 32}},
            {"rows_per_thread", {1, 2, 4}},
            {"passes", {1, 2, 4}},
            {"prefetch", {0, 1}}};
  }

  // From the sweeps on the H200 (bench/results/2026-11-30-h200-gpudecode-run1.json, -run2):
  // enough lanes per row that the launch has ~16K threads (512 warps) and each lane at most 4
  // units (small matrices: up to the next power of two of the units, some lanes idle: SmolLM2's
  // 1536 -> 576 took 2.2 us with 8 lanes for 6 units, 3.6 us with 4); two rows per thread on long
  // matrices, for batches too (16 tokens at 4096x14336: 49 us, 64 with one row); 8 warps per CTA
  // on long matrices and 2 on small ones (more CTAs for the SMs); prefetch for the
  // one-block-scale formats (Q4_K's scale unpacking with the carried bytes was slower).
  // lanes_per_row must not depend on n_tokens (bit-identity across batch sizes).
  Schedule default_schedule(const Shape& s, ir::TargetKind) const override {
    WFormat f{};
    w_format(static_cast<GgmlType>(s.at("wtype")), &f);
    const int64_t nb = s.at("n_in") / f.block_elems;
    const int64_t units = nb / plan_of(f, nb, planar_of(s)).blocks;
    // Several matrices in one launch count as one of all their rows (glu: a thread's gate and
    // up rows are its two rows, so rows_per_thread counts pairs).
    const Group grp = group_of(s);
    const int64_t rows = grp.total();
    const int64_t rpt = rows > 2048 && s.at("n_in") >= 1024 ? 2 : 1;
    int64_t lpr = 1;
    while (lpr < 32 && lpr < units && (rows * lpr / rpt < 16384 || lpr * 4 < units)) lpr *= 2;
    const bool kquant = f.xtype == GgmlType::Q8_K;
    // Planar K-quant gate|up: a lane per block up to 16 (8B Q4_K, 16 blocks a row: 16 lanes 21.3
    // us, the rule above's 4 lanes 27.6). Not for q|k|v or down: 16 lanes measured 7.15 vs 6.69
    // us (q|k|v, the rule's 8) and 32 lanes 22.3 vs 19.5 (Q6_K down, the rule's 16).
    if (planar_of(s) && kquant && grp.glu)
      while (lpr < 16 && lpr * 2 <= units) lpr *= 2;
    const int64_t threads = rows * lpr / rpt;  // small matrices: more, smaller CTAs
    // Planar (sweep on the H200, bench/results/2026-11-30-h200-s6-planar.json): 8 warps for the
    // one-block-scale formats from ~8K threads (8B down 13.5 us against 17.5 with 4), 4 for the
    // K-quants (8B Q4_K gate|up 21.3 us against 27.6 with 8).
    int64_t warps = rows >= 8192 ? 8 : threads < 8192 ? 2 : 4;
    if (planar_of(s) && threads >= 8192) warps = kquant ? 4 : 8;
    return {{"warps", warps},
            {"lanes_per_row", lpr},
            {"rows_per_thread", grp.glu ? std::max<int64_t>(1, rpt / 2) : rpt},
            {"passes", 1},
            {"prefetch", kquant ? 0 : 1}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind target) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(check_schedule(schedule_space(s, target), sch));
    WFormat f{};
    w_format(static_cast<GgmlType>(s.at("wtype")), &f);
    const Group grp = group_of(s);
    const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens");
    const int64_t nb = n_in / f.block_elems;
    const int64_t row_bytes = nb * f.block_bytes;
    const bool planar = planar_of(s);
    llm::PlanarGeometry pg;
    if (planar) llm::planar_geometry(f.wtype, &pg);
    const UnitPlan up = plan_of(f, nb, planar);
    const int64_t units = nb / up.blocks;
    const int unit_bytes = up.blocks * f.block_bytes;
    const int64_t warps = sch.at("warps"), lpr = sch.at("lanes_per_row"), rpt = sch.at("rows_per_thread"),
                  passes = sch.at("passes");
    // A thread's weight rows ("entries"): its rpt rows, or with glu its rpt gate rows then the
    // up rows of the same indices.
    const int64_t halves = grp.glu ? 2 : 1;
    const int64_t entries = rpt * halves;
    const bool prefetch = sch.at("prefetch") != 0 && entries * unit_bytes <= kMaxPrefetchBytes;
    const int64_t threads = 32 * warps;
    const int64_t slots = threads / lpr;             // row slots per pass
    const int64_t rows_pass = slots * rpt;           // rows per pass
    const int64_t rows_cta = rows_pass * passes;     // rows per CTA
    const int64_t nxb = n_in / (f.xtype == GgmlType::Q8_K ? 256 : 32);
    const int64_t xrow = static_cast<int64_t>(llm::ref::quantized_row_bytes(f.xtype, n_in));
    // GPUs add a row's lane partials with shuffles; the cpp target (no shuffles) through shared
    // memory. Both add them in lane order, so the two agree bit for bit.
    const bool shfl_reduce = target != ir::TargetKind::kCpp;
    const int64_t per_token =
        staged_bytes(f.xtype, nxb, up.blocks, planar) + (shfl_reduce ? 0 : rows_cta * lpr * 4 * halves);
    if (per_token > kSharedBudget)
      return invalid_argument("matvec_gpu: schedule {} needs {} bytes of shared memory per token", schedule_key(sch),
                              per_token);
    // Tokens staged at once; groups re-read the weights (from the L2) when they do not all fit.
    const int64_t fit = std::min(nt, kSharedBudget / per_token);
    const int64_t groups = (nt + fit - 1) / fit;
    const int64_t tg = (nt + groups - 1) / groups;  // balanced group sizes
    // Several matrices (not glu): each CTA serves rows of one of them; matrix m has the CTAs
    // cta_start[m] .. cta_start[m + 1] - 1.
    const int n_mat = grp.glu ? 1 : grp.n_w;
    int64_t cta_start[4] = {0, 0, 0, 0};
    for (int m = 0; m < n_mat; ++m) cta_start[m + 1] = cta_start[m] + (grp.rows[m] + rows_cta - 1) / rows_cta;

    std::string kname = fmt::format("matvec_gpu_{}", llm::ggml_type_name(f.wtype));
    if (planar) kname += "_planar";
    if (grp.glu) kname += "_glu";
    else if (grp.n_w > 1) kname += fmt::format("_w{}", grp.n_w);
    Generated g;
    ir::Kernel* k = g.module.add_kernel(kname);
    Emit b(*k);
    b.cpu = target == ir::TargetKind::kCpp;
    const Type wty = Type::pointer(AddrSpace::kConstant, Scalar::kU8), yty = ty::gptr(Scalar::kF32);
    std::vector<Value*> wp, yp;
    for (int m = 0; m < grp.n_w; ++m) wp.push_back(b.param(wty, m ? fmt::format("w{}", m) : "w"));
    Value* xq = b.param(ty::gptr(Scalar::kU8), "xq");
    for (int m = 0; m < grp.outputs(); ++m) yp.push_back(b.param(yty, m ? fmt::format("y{}", m) : "y"));
    Value* tid = b.thread_id(Mode::kX);
    Value* nthreads = b.i32(static_cast<int32_t>(threads));
    StagedX sx = alloc_x(b, f.xtype, tg * nxb, up.blocks, planar);
    Value* part = shfl_reduce ? nullptr : b.alloc_shared(Scalar::kF32, rows_cta * lpr * tg * halves);
    Value* lane = b.rem(tid, b.i32(static_cast<int32_t>(lpr)));
    Value* slot = b.div(tid, b.i32(static_cast<int32_t>(lpr)));
    Value* lane0 = shfl_reduce ? b.sub(b.rem(tid, b.i32(32)), lane) : nullptr;  // the row's first lane in the warp
    // This CTA's matrix: its weights, output, rows and first CTA (one uniform branch per CTA).
    Value* bid = b.block_id(Mode::kX);
    Value* w_sel = wp[0];
    Value* y_sel = yp[0];
    Value* nout_v = b.i32(static_cast<int32_t>(n_out));
    Value* cta_local = bid;
    if (n_mat > 1) {
      std::function<std::vector<Value*>(int)> pick = [&](int m) -> std::vector<Value*> {
        auto take = [&, m] {
          return std::vector<Value*>{wp[static_cast<size_t>(m)], yp[static_cast<size_t>(m)],
                                     b.i32(static_cast<int32_t>(grp.rows[m])),
                                     b.sub(bid, b.i32(static_cast<int32_t>(cta_start[m])))};
        };
        if (m == n_mat - 1) return take();
        return b.if_then_else(b.cmp(Mode::kLt, bid, b.i32(static_cast<int32_t>(cta_start[m + 1]))),
                              {wty, yty, kI32, kI32}, take, [&, m] { return pick(m + 1); });
      };
      std::vector<Value*> sel = pick(0);
      w_sel = sel[0], y_sel = sel[1], nout_v = sel[2], cta_local = sel[3];
    }
    // The cpp target splits the kernel at top-level barriers and cannot carry a pointer from
    // one phase to the next (its spill slots are declared const of a const pointer type): there
    // the matrix's pointers are picked again at the start of each phase (the GPU keeps them).
    auto reselect = [&] {
      if (n_mat == 1 || shfl_reduce) return;
      std::function<std::vector<Value*>(int)> pick = [&](int m) -> std::vector<Value*> {
        auto take = [&, m] { return std::vector<Value*>{wp[static_cast<size_t>(m)], yp[static_cast<size_t>(m)]}; };
        if (m == n_mat - 1) return take();
        return b.if_then_else(b.cmp(Mode::kLt, bid, b.i32(static_cast<int32_t>(cta_start[m + 1]))), {wty, yty}, take,
                              [&, m] { return pick(m + 1); });
      };
      std::vector<Value*> sel = pick(0);
      w_sel = sel[0], y_sel = sel[1];
    };
    // Entry e's weights: the CTA's matrix, or (glu) gate for the first rpt entries, up after.
    auto w_of = [&](int64_t e) { return grp.glu && e >= rpt ? wp[1] : w_sel; };
    auto mul_nout = [&](Value* x) { return n_mat > 1 ? b.mul(x, nout_v) : b.mulc(x, n_out); };
    Value* last_row = n_mat > 1 ? b.sub(nout_v, b.i32(1)) : b.i32(static_cast<int32_t>(n_out - 1));
    Value* cta_row0 = b.mul(cta_local, b.i32(static_cast<int32_t>(rows_cta)));
    const int x_words_per_block = f.xtype == GgmlType::Q8_K ? 64 : 8;
    const size_t nchunk = static_cast<size_t>(planar ? pg.pieces + 1 : unit_bytes / up.align);
    // Planar: a row's "offset" is its first block's index in the matrix, a unit's its block; the
    // pieces of the CTA's matrix are rows * nb * 16 bytes apart.
    Value* pstride = planar ? b.mul(b.convert(grp.glu ? b.i32(static_cast<int32_t>(n_out)) : nout_v, kI64),
                                    b.i64(nb * 16))
                            : nullptr;
    auto window = [&](Value* w, Value* base) {
      return planar ? Window(b, w, base, pstride, pg) : Window(b, w, base, up.align);
    };

    // Rows of this thread in pass p: consecutive, so a warp's rows are neighbours.
    auto local_row0 = [&](Value* p) { return b.add(b.mulc(slot, rpt), b.mulc(p, rows_pass)); };
    auto row_offsets = [&](Value* p) {
      std::vector<Value*> wrow;
      for (int64_t r = 0; r < rpt; ++r) {
        Value* row = b.min(b.add(cta_row0, b.addc(local_row0(p), r)), last_row);
        wrow.push_back(b.mul(b.convert(row, kI64), b.i64(planar ? nb : row_bytes)));
      }
      for (int64_t r = 0; r < entries - rpt; ++r) wrow.push_back(wrow[static_cast<size_t>(r)]);  // glu: up rows
      return wrow;
    };
    auto unit_base = [&](Value* u) { return b.mul(b.convert(u, kI64), b.i64(planar ? 1 : unit_bytes)); };
    // Every chunk of unit u (clamped to the row) of each of the thread's rows.
    auto load_unit = [&](const std::vector<Value*>& wrow, Value* u) {
      Value* ub = unit_base(b.min(u, b.i32(static_cast<int32_t>(units - 1))));
      std::vector<Value*> out;
      for (size_t e = 0; e < wrow.size(); ++e) {
        Window win = window(w_of(static_cast<int64_t>(e)), b.add(wrow[e], ub));
        for (Value* c : win.load_all(unit_bytes)) out.push_back(c);
      }
      return out;
    };

    for (int64_t g0 = 0; g0 < nt; g0 += tg) {
      const int64_t cnt = std::min(tg, nt - g0);
      if (g0 > 0) b.barrier();  // every thread is done with the previous group's rows
      // The first unit's weights are requested before the activations are staged (and the
      // barrier waited for), so the first DRAM round trip overlaps the staging.
      std::vector<Value*> wrow0, pre0;
      if (prefetch) {
        wrow0 = row_offsets(b.i32(0));
        pre0 = load_unit(wrow0, lane);
      }
      stage_x(b, sx, f.xtype, xq, nxb, xrow, g0, cnt, tid, nthreads);
      b.barrier();
      // Accumulates pass p's rows for the group's tokens `toks` (indices within the group) and
      // hands each (entry, token) lane partial to `out`, entries first.
      auto pass = [&](Value* p, bool first, const std::vector<Value*>& toks,
                      const std::function<void(int64_t, Value*, Value*)>& out) {
        std::vector<Value*> wrow = first && prefetch ? wrow0 : row_offsets(p);
        const size_t nt_here = toks.size(), nacc = static_cast<size_t>(entries) * nt_here;
        std::vector<Value*> init(nacc, b.f32(0));
        if (prefetch) {
          std::vector<Value*> pre = first ? pre0 : load_unit(wrow, lane);
          init.insert(init.end(), pre.begin(), pre.end());
        }
        auto res = b.for_loop(lane, b.i32(static_cast<int32_t>(units)), b.i32(static_cast<int32_t>(lpr)), init,
                              [&](Value* u, std::span<Value* const> it) {
          std::vector<Value*> a(it.begin(), it.begin() + static_cast<std::ptrdiff_t>(nacc));
          std::vector<Value*> next;
          if (prefetch) next = load_unit(wrow, b.addc(u, lpr));  // in flight while this unit computes
          Value* ubase = unit_base(u);
          std::vector<Window> wins;
          for (int64_t e = 0; e < entries; ++e) {
            wins.push_back(window(w_of(e), b.add(wrow[static_cast<size_t>(e)], ubase)));
            if (prefetch) wins.back().adopt(it.subspan(nacc + static_cast<size_t>(e) * nchunk, nchunk));
          }
          for (int blk = 0; blk < up.blocks; ++blk) {
            Value* xb = b.addc(b.mulc(u, up.blocks), blk);
            for (size_t j = 0; j < nt_here; ++j) {
              Value* xbj = b.add(xb, b.mulc(toks[j], nxb));
              std::vector<Value*> xw = x_words(b, sx, xbj, 0, x_words_per_block);
              for (int64_t e = 0; e < entries; ++e) {
                Value*& acc = a[static_cast<size_t>(e) * nt_here + j];
                acc = block_dot(b, f, wins[static_cast<size_t>(e)], blk * f.block_bytes, sx, xbj, xw, acc);
              }
            }
          }
          a.insert(a.end(), next.begin(), next.end());
          return a;
        });
        for (int64_t e = 0; e < entries; ++e)
          for (size_t j = 0; j < nt_here; ++j) out(e, toks[j], res[static_cast<size_t>(e) * nt_here + j]);
      };
      // Pass 0 (whose first loads were issued before the staging), then the others in a loop.
      auto run_pass = [&](Value* p, bool first) {
        Value* local0 = local_row0(p);
        if (!shfl_reduce) {
          reselect();
          // cpp: one token at a time (an IR loop: the kernel's size does not grow with the token
          // count; a token's arithmetic is the same as in the GPU's all-tokens loop).
          b.for_loop(b.i32(0), b.i32(static_cast<int32_t>(cnt)), b.i32(1), {}, [&](Value* j, std::span<Value* const>) {
            pass(p, first, {j}, [&](int64_t e, Value* tj, Value* acc) {
              const int64_t half = e / rpt, r = e % rpt;
              Value* lr = b.add(b.addc(local0, r + half * rows_cta * tg), b.mulc(tj, rows_cta));
              b.store(part, b.add(b.mulc(lr, lpr), lane), acc);
            });
            return std::vector<Value*>{};
          });
          return;
        }
        std::vector<Value*> toks;
        for (int64_t j = 0; j < cnt; ++j) toks.push_back(b.i32(static_cast<int32_t>(j)));
        std::map<std::pair<int64_t, Value*>, Value*> gate;  // glu: (row entry, token) -> gate sum
        pass(p, first, toks, [&](int64_t e, Value* tj, Value* acc) {
          // The row's lanes' partials in lane order (as the cpp target's shared-memory sum).
          Value* sum = acc;
          if (lpr > 1) {
            sum = b.shfl(Mode::kIdx, acc, lane0);
            for (int64_t l = 1; l < lpr; ++l) sum = b.add(sum, b.shfl(Mode::kIdx, acc, b.addc(lane0, l)));
          }
          if (grp.glu && e < rpt) {
            gate[{e, tj}] = sum;
            return;
          }
          if (grp.glu) sum = silu_mul(b, gate.at({e - rpt, tj}), sum);
          Value* row = b.add(cta_row0, b.addc(local0, e % rpt));
          Value* ok = b.bit_and(b.cmp(Mode::kEq, lane, b.i32(0)), b.cmp(Mode::kLt, row, nout_v));
          b.if_then_else(ok, {}, [&] {
            b.store(y_sel, b.add(row, mul_nout(b.addc(tj, g0))), sum);
            return std::vector<Value*>{};
          });
        });
      };
      int64_t p0 = 0;
      if (prefetch) run_pass(b.i32(0), true), p0 = 1;
      if (p0 < passes)
        b.for_loop(b.i32(static_cast<int32_t>(p0)), b.i32(static_cast<int32_t>(passes)), b.i32(1), {},
                   [&](Value* p, std::span<Value* const>) {
                     run_pass(p, false);
                     return std::vector<Value*>{};
                   });
      if (shfl_reduce) continue;
      b.barrier();
      reselect();
      // One thread per (token, row) adds its lanes' partials in lane order.
      b.for_loop(tid, b.i32(static_cast<int32_t>(rows_cta * cnt)), nthreads, {}, [&](Value* i, std::span<Value* const>) {
        Value* j = b.div(i, b.i32(static_cast<int32_t>(rows_cta)));
        Value* row = b.add(cta_row0, b.sub(i, b.mulc(j, rows_cta)));
        auto lane_sum = [&](int64_t half) {
          Value* base = b.mulc(half ? b.addc(i, half * rows_cta * tg) : i, lpr);
          Value* sum = b.load(part, base);
          for (int64_t l = 1; l < lpr; ++l) sum = b.add(sum, b.load(part, b.addc(base, l)));
          return sum;
        };
        Value* sum = lane_sum(0);
        if (grp.glu) sum = silu_mul(b, sum, lane_sum(1));
        b.if_then_else(b.cmp(Mode::kLt, row, nout_v), {}, [&] {
          b.store(y_sel, b.add(mul_nout(b.addc(j, g0)), row), sum);
          return std::vector<Value*>{};
        });
        return std::vector<Value*>{};
      });
    }

    KernelLaunch l;
    l.kernel = kname;
    for (int i = 0; i < grp.n_w + 1 + grp.outputs(); ++i) l.args.push_back(i);
    l.grid = {static_cast<uint32_t>(cta_start[n_mat]), 1, 1};
    l.block = {static_cast<uint32_t>(threads), 1, 1};
    g.launches.push_back(l);
    return g;
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    WFormat f{};
    const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
    w_format(wt, &f);
    const Group grp = group_of(s);
    const int64_t n_in = s.at("n_in"), nt = s.at("n_tokens");
    auto specs = args(s);
    for (int m = 0; m < grp.n_w; ++m) {
      a[static_cast<size_t>(m)].bytes.resize(static_cast<size_t>(specs[static_cast<size_t>(m)].bytes));
      random_rows(rng, wt, grp.rows[m], n_in, 0.1f, a[static_cast<size_t>(m)].bytes.data());
      if (planar_of(s)) {  // the same random rows, repacked as the engine repacks its weights
        std::vector<uint8_t> gguf = a[static_cast<size_t>(m)].bytes;
        Status st = llm::to_planar(wt, grp.rows[m], n_in, gguf.data(), a[static_cast<size_t>(m)].bytes.data());
        assert(st.ok());
        (void)st;
      }
    }
    HostArg& x = a[static_cast<size_t>(grp.n_w)];
    x.bytes.resize(static_cast<size_t>(specs[static_cast<size_t>(grp.n_w)].bytes));
    const int64_t xrow = specs[static_cast<size_t>(grp.n_w)].bytes / nt;
    for (int64_t t = 0; t < nt; ++t) {
      std::vector<float> xv = random_floats(rng, static_cast<size_t>(n_in), -1.0f, 1.0f);
      llm::ref::quantize_activation(f.xtype, xv.data(), x.bytes.data() + t * xrow, n_in);
    }
  }

  // Each matrix's rows dotted with each token's row by llm::ref::vec_dot; glu: llm::ref::swiglu
  // of the gate and up rows.
  Status reference(const Shape& s, std::span<HostArg> a) const override {
    const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
    const Group grp = group_of(s);
    const int64_t n_in = s.at("n_in"), nt = s.at("n_tokens");
    auto specs = args(s);
    const uint8_t* xq = a[static_cast<size_t>(grp.n_w)].bytes.data();
    const int64_t xrow = specs[static_cast<size_t>(grp.n_w)].bytes / nt;
    std::vector<std::vector<float>> ys(static_cast<size_t>(grp.n_w));
    for (int m = 0; m < grp.n_w; ++m) {
      const int64_t rows = grp.rows[m], wr = specs[static_cast<size_t>(m)].bytes / rows;
      const uint8_t* w = a[static_cast<size_t>(m)].bytes.data();
      std::vector<uint8_t> gguf;
      if (planar_of(s)) {  // back to GGUF rows for llm::ref::vec_dot
        gguf.resize(a[static_cast<size_t>(m)].bytes.size());
        LOOM_RETURN_IF_ERROR(llm::from_planar(wt, rows, n_in, w, gguf.data()));
        w = gguf.data();
      }
      std::vector<float>& yv = ys[static_cast<size_t>(m)];
      yv.resize(static_cast<size_t>(rows * nt));
      for (int64_t t = 0; t < nt; ++t)
        for (int64_t r = 0; r < rows; ++r)
          yv[static_cast<size_t>(t * rows + r)] = llm::ref::vec_dot(wt, w + r * wr, xq + t * xrow, n_in);
    }
    if (grp.glu) llm::ref::swiglu(ys[0].data(), ys[1].data(), ys[0].data(), static_cast<int64_t>(ys[0].size()));
    for (int m = 0; m < grp.outputs(); ++m) {
      HostArg& out = a[static_cast<size_t>(grp.n_w + 1 + m)];
      out.bytes.resize(ys[static_cast<size_t>(m)].size() * 4);
      std::memcpy(out.bytes.data(), ys[static_cast<size_t>(m)].data(), out.bytes.size());
    }
    return Status();
  }

  std::vector<Shape> test_shapes() const override {
    std::vector<Shape> out;
    auto add = [&](int64_t n_in, int64_t n_out, GgmlType t, int64_t nt = 1) {
      out.push_back({{{"n_in", n_in}, {"n_out", n_out}, {"n_tokens", nt}, {"wtype", static_cast<int64_t>(t)}}});
    };
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}) {
      add(64, 37, t);     // two blocks: one-block units, 4-byte loads
      add(576, 1536, t);  // SmolLM2 up: 18 blocks, two-block units
      add(1024, 45, t);   // 32 blocks: eight-block units, 16-byte loads
    }
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K}) {
      add(512, 19, t);    // Q6_K: two-block units, 4-byte loads
      add(1536, 640, t);
    }
    add(2048, 33, GgmlType::Q6_K);    // eight-block units, 16-byte loads
    add(4096, 1024, GgmlType::Q4_0);  // Llama-3-8B k rows
    // Several tokens (batched decode): each weight unit dotted with every token.
    add(576, 200, GgmlType::Q4_0, 2);
    add(1024, 45, GgmlType::Q8_0, 5);
    add(576, 96, GgmlType::Q4_1, 16);
    add(512, 40, GgmlType::Q6_K, 16);
    add(14336, 40, GgmlType::Q4_0, 5);  // Llama-3-8B down rows: 5 tokens do not fit at once (groups)
    // Several matrices in one launch: q|k|v-like rows (CTAs of each matrix, the last
    // one short), gate|up with the SwiGLU fused in, one and several tokens.
    auto multi = [&](int64_t n_in, GgmlType t, int64_t nt, std::vector<int64_t> rows, bool glu) {
      Shape sh{{{"n_in", n_in}, {"n_out", rows[0]}, {"n_tokens", nt}, {"wtype", static_cast<int64_t>(t)},
                {"n_w", static_cast<int64_t>(rows.size())}}};
      for (size_t m = 1; m < rows.size(); ++m) sh.dims[fmt::format("n_out{}", m)] = rows[m];
      if (glu) sh.dims["glu"] = 1;
      out.push_back(sh);
    };
    multi(576, GgmlType::Q4_0, 1, {300, 70, 70}, false);
    multi(1024, GgmlType::Q8_0, 3, {45, 33}, false);
    multi(576, GgmlType::Q4_0, 1, {200, 200}, true);
    multi(1024, GgmlType::Q4_1, 4, {96, 96}, true);
    // The planar layout: every weight type, units of one block, several tokens, fused.
    auto planar = [&](Shape sh) {
      sh.dims["planar"] = 1;
      out.push_back(sh);
    };
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0})
      planar({{{"n_in", 1024}, {"n_out", 45}, {"n_tokens", 1}, {"wtype", static_cast<int64_t>(t)}}});
    planar({{{"n_in", 576}, {"n_out", 200}, {"n_tokens", 3}, {"wtype", static_cast<int64_t>(GgmlType::Q4_0)}}});
    planar({{{"n_in", 512}, {"n_out", 19}, {"n_tokens", 1}, {"wtype", static_cast<int64_t>(GgmlType::Q4_K)}}});
    planar({{{"n_in", 512}, {"n_out", 21}, {"n_tokens", 2}, {"wtype", static_cast<int64_t>(GgmlType::Q6_K)}}});
    planar({{{"n_in", 576}, {"n_out", 300}, {"n_tokens", 1}, {"wtype", static_cast<int64_t>(GgmlType::Q4_0)},
             {"n_w", 3}, {"n_out1", 70}, {"n_out2", 70}}});
    planar({{{"n_in", 1024}, {"n_out", 96}, {"n_tokens", 4}, {"wtype", static_cast<int64_t>(GgmlType::Q4_1)},
             {"n_w", 2}, {"n_out1", 96}, {"glu", 1}}});
    // (K-quant groups: tests/ops/matvec_gpu_fused_test.cpp on the GPU; the cpu's host compiler
    // takes tens of seconds per K-quant kernel.)
    return out;
  }
};

}  // namespace

const OpSpec& matvec_gpu_op() {
  static const MatvecGpuOp op;
  return op;
}

}  // namespace loom::kernels
