// matvec (n_tokens = 1) and matmul (n_tokens > 1): y[t][r] = dot(W row r, x[t]) with W in its
// stored (quantized) layout and x already in the activation format ref::vec_dot_type(W) (the
// output of quantize_act). matvec_id is the same kernel over a mixture of experts' stacked
// matrices: for each token t and slot j, y[t, j][r] = dot(W[ids[t, j]] row r, x), x = xq[t] or
// (x_per_slot) xq[t, j]; only the chosen experts' rows are read. On the cpp target one thread walks whole rows (a tile of rows shares
// each activation block; matmul with tok_tile > 1: tiles of rows x tokens, matmul_cpu.h),
// bit-identical to llm::ref::matmul; on GPU targets a warp splits a row over its lanes and
// reduces with warp_reduce.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "loom/codegen/cpp/host_compiler.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/kernels/mat_dot.h"
#include "loom/kernels/matmul_cpu.h"
#include "loom/kernels/moe_groups.h"
#include "loom/kernels/op_list.h"
#include "loom/kernels/op_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::kernels {
namespace {

using ir::Mode;
using ir::Scalar;
using ir::Type;
using ir::Value;
using llm::GgmlType;

// silu(g) * u as the swiglu op computes it (ggml's exp: bit for bit llm::ref::swiglu).
Value* silu_times(Emit& b, Value* g, Value* u) {
  Value* e = elt::exp_ggml(b, b.sub(b.f32(0.0), g));
  return b.mul(b.div(g, b.add(b.f32(1.0), e)), u);
}

// The sum over a group of `lanes` lanes (a power of two dividing 32) as a butterfly: xor offsets
// below the group size stay inside it, and every lane of the group gets the sum.
Value* lane_group_sum(Emit& b, Value* part, int64_t lanes) {
  for (int64_t o = lanes / 2; o >= 1; o /= 2) part = b.add(part, b.shfl(Mode::kXor, part, b.i32(static_cast<int32_t>(o))));
  return part;
}

class MatOp final : public OpSpec {
 public:
  explicit MatOp(bool multi, bool id = false) : multi_(multi), id_(id) {}
  std::string_view name() const override { return id_ ? "matvec_id" : multi_ ? "matmul" : "matvec"; }
  std::string_view description() const override {
    if (id_) return "y[t, j] = W[ids[t, j]] x[t] (or x[t, j]): the mat-vecs of the experts each token chose";
    return multi_ ? "y = x W^T for n_tokens > 1 rows of quantized activations (weights in GGUF layout)"
                  : "y = W x for one token (weights in GGUF layout, x in the weight's activation format)";
  }

  Status validate(const Shape& s) const override {
    LOOM_ASSIGN_OR_RETURN(GgmlType wt, shape_type(s, "wtype"));
    if (!dot_supported(wt))
      return invalid_argument("{}: weight type {} is not supported", name(), llm::ggml_type_name(wt));
    LOOM_ASSIGN_OR_RETURN(int64_t n_in, s.get("n_in"));
    LOOM_ASSIGN_OR_RETURN(int64_t n_out, s.get("n_out"));
    LOOM_ASSIGN_OR_RETURN(int64_t nt, s.get("n_tokens"));
    DotFormat f = dot_format(wt);
    if (n_in <= 0 || n_in % f.block_elems != 0)
      return invalid_argument("{}: n_in={} must be a positive multiple of {}", name(), n_in, f.block_elems);
    if (n_out <= 0 || n_out > (1 << 24)) return invalid_argument("{}: n_out={} out of range", name(), n_out);
    if (id_) {
      LOOM_ASSIGN_OR_RETURN(int64_t ne, s.get("n_expert"));
      LOOM_ASSIGN_OR_RETURN(int64_t nu, s.get("n_used"));
      LOOM_ASSIGN_OR_RETURN(int64_t ps, s.get("x_per_slot"));
      if (ne < 1 || ne > 4096 || nu < 1 || nu > ne || (ps != 0 && ps != 1))
        return invalid_argument("{}: n_expert={} n_used={} x_per_slot={} (1 <= n_used <= n_expert <= 4096, 0|1)", name(),
                                ne, nu, ps);
      if (nt < 1 || nt * nu > 65535) return invalid_argument("{}: n_tokens={} x n_used={} above 65535", name(), nt, nu);
      if (s.dims.count("grouped") && s.at("grouped") != 0 && s.at("grouped") != 1)
        return invalid_argument("{}: grouped={} (0|1)", name(), s.at("grouped"));
      if (s.dims.count("glu") && s.at("glu") != 0 && (s.at("glu") != 1 || grouped(s) || ps))
        return invalid_argument("{}: glu={} (0|1; not grouped, one input per token)", name(), s.at("glu"));
      if (n_out * ne > (1 << 24)) return invalid_argument("{}: {} experts of {} rows", name(), ne, n_out);
      if (n_in / f.block_elems * f.x_bytes * nt * (ps ? nu : 1) > (int64_t{1} << 31))
        return invalid_argument("{}: activations too large", name());
      return Status();
    }
    if (multi_ ? (nt < 2 || nt > 65535) : nt != 1)
      return invalid_argument("{}: n_tokens={} ({})", name(), nt, multi_ ? "2..65535" : "matvec takes 1; use matmul");
    if (n_in / f.block_elems * f.x_bytes * nt > (int64_t{1} << 31))
      return invalid_argument("{}: activations too large", name());
    return Status();
  }

  // The shapes matmul's token-lane cpp kernel takes: its formats and 8 tokens or more.
  static bool token_lanes(const Shape& s) {
    if (!s.dims.count("wtype") || !s.dims.count("n_tokens")) return false;
    switch (static_cast<GgmlType>(s.at("wtype"))) {
      case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
        return s.at("n_tokens") >= 8;
      default: return false;
    }
  }

  // matvec_id: the (token, slot) pairs, activation rows, experts.
  int64_t pairs(const Shape& s) const { return id_ ? s.at("n_tokens") * s.at("n_used") : s.at("n_tokens"); }
  int64_t x_rows(const Shape& s) const { return id_ && s.at("x_per_slot") ? pairs(s) : s.at("n_tokens"); }
  int64_t experts(const Shape& s) const { return id_ ? s.at("n_expert") : 1; }
  // matvec_id grouped (prompts): the pairs listed per expert first, then each expert's rows
  // read once for all the pairs that chose it.
  bool grouped(const Shape& s) const { return id_ && s.dims.count("grouped") && s.at("grouped") != 0; }
  // matvec_id glu (decode): gate (w) and up (w1) of the same experts in one launch,
  // y = silu(gate) * up as the swiglu op computes it.
  bool glu(const Shape& s) const { return id_ && s.dims.count("glu") && s.at("glu") != 0; }

  std::vector<ArgSpec> args(const Shape& s) const override {
    DotFormat f = dot_format(static_cast<GgmlType>(s.at("wtype")));
    int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens");
    int64_t nb = n_in / f.block_elems;
    if (id_) {
      std::vector<ArgSpec> a = {{"w", ArgKind::kBuffer, ArgRole::kInput, experts(s) * n_out * nb * f.w_bytes, Scalar::kU8},
              {"xq", ArgKind::kBuffer, ArgRole::kInput, x_rows(s) * nb * f.x_bytes, Scalar::kU8},
              {"ids", ArgKind::kBuffer, ArgRole::kInput, pairs(s) * 4, Scalar::kI32},
              {"y", ArgKind::kBuffer, ArgRole::kOutput, pairs(s) * n_out * 4, Scalar::kF32},
              // grouped: per expert its pair count, then per expert a list of up to all pairs.
              {"groups", ArgKind::kBuffer, ArgRole::kScratch, grouped(s) ? moe_groups_words(experts(s), pairs(s)) * 4 : 4,
               Scalar::kI32}};
      // glu: the up experts (w holds the gate experts).
      if (glu(s)) a.push_back({"w1", ArgKind::kBuffer, ArgRole::kInput, experts(s) * n_out * nb * f.w_bytes, Scalar::kU8});
      return a;
    }
    return {{"w", ArgKind::kBuffer, ArgRole::kInput, n_out * nb * f.w_bytes, Scalar::kU8},
            {"xq", ArgKind::kBuffer, ArgRole::kInput, nt * nb * f.x_bytes, Scalar::kU8},
            {"y", ArgKind::kBuffer, ArgRole::kOutput, nt * n_out * 4, Scalar::kF32}};
  }

  // matvec_id counts the weights of the chosen experts (at most n_used per token, never more
  // than all of them): what a kernel that reads only those must move.
  Cost cost(const Shape& s) const override {
    auto a = args(s);
    double flops = 2.0 * static_cast<double>(s.at("n_in")) * static_cast<double>(s.at("n_out")) *
                   static_cast<double>(pairs(s));
    double w = static_cast<double>(a[0].bytes) * (glu(s) ? 2 : 1);
    if (id_) w *= static_cast<double>(std::min(pairs(s), experts(s))) / static_cast<double>(experts(s));
    if (glu(s)) flops *= 2;
    double rest = 0;
    for (size_t i = 1; i < a.size(); ++i)
      if (a[i].role != ArgRole::kScratch && a[i].name != "w1") rest += static_cast<double>(a[i].bytes);
    return {w + rest, flops};
  }

  // The cpp kernels are bit-identical to the reference; GPU kernels sum a row's blocks in
  // another order (per lane, then across the warp): float rounding of ~n_in/32 terms of
  // magnitude <= 1, far below what a wrong block (errors of order 0.1) produces.
  Tolerance tolerance(const Shape& s) const override {
    double n = static_cast<double>(s.at("n_in"));
    return {2e-6 * std::sqrt(n), 1e-5, false};
  }

  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind t) const override {
    if (t == ir::TargetKind::kCpp) {
      // matmul: tok_tile tokens share each weight block (1: one token per work item).
      // tok_lanes 1: a vector lane per token, the reference's lanes (bit-identical); 2: the same with
      // whole-block sums (not bit-identical; the shapes token_lanes takes; matmul_cpu.h).
      if (multi_ && !id_) {
        // tok_lanes 3: Intel AMX tiles (16 rows x 16 tokens; the other knobs unused), where the
        // CPU has them and the kernel takes the shape.
        std::vector<int64_t> lanes = {0};
        if (token_lanes(s)) lanes.insert(lanes.end(), {1, 2});
        if (matmul_amx_takes(s)) lanes.push_back(3);
        return {{"rows_per_block", {1, 2, 4, 8, 16, 32, 64}}, {"row_tile", {1, 2, 4}}, {"tok_tile", {1, 2, 4, 8, 16}},
                {"tok_lanes", lanes, {2, 3}}};
      }
      // prefetch: each row first asks for the weight bytes this far ahead of it (0: none).
      return {{"rows_per_block", {1, 2, 4, 8, 16}}, {"row_tile", {1, 2, 4}}, {"prefetch", {0, 1024, 2048, 4096, 8192}}};
    }
    // matmul: tok_tile tokens per CTA share each weight block (read once from memory for them).
    if (multi_ && !id_) return {{"rows_per_block", {1, 2, 4, 8}}, {"lanes_per_row", {8, 16, 32}}, {"tok_tile", {1, 4, 8, 16}}};
    return {{"rows_per_block", {1, 2, 4, 8}}, {"lanes_per_row", {8, 16, 32}}};
  }
  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    // One row at a time: in the engine every weight streams from DRAM once per token, and rows
    // read one after another are one sequential stream for the hardware prefetchers. Tiles of
    // rows sharing each activation block win only on cache-resident weights (e.g. Q4_1 576x1536,
    // 2 threads: tile 4 50 us, tile 1 57 us) and lose when streaming (Q8_0 576x98304: tile 4
    // 10.2 ms, tile 1 5.9 ms); see docs/kernels.md.
    if (t == ir::TargetKind::kCpp) {
      if (multi_ && !id_) {
        // matmul: tiles of rows x tokens that unpack each weight block once per tile (128 tokens,
        // 2 threads). 4 x 4 with 16 vector registers (AVX2): SmolLM2's Q4_1/Q8_0 shapes 1.9-2.1x
        // the one-token kernel (4 x 8 and 8-row items within 2%, 2 x 4 and 4 x 2 6-8% slower),
        // Q4_K 2048->640 2.1x. With AVX-512's 32, 4 x 8 (2048->1536: Q4_0 4%, Q4_1 11%, Q5_0 15%,
        // Q8_0/Q4_K 3% faster than 4 x 4). Smaller tiles where a pair's accumulators are larger:
        // Q6_K 2 x 4 (2048->640: 4 x 4 no faster than one token, 2 x 4 1.6x; 2 x 4 is also best
        // with 32 registers), F16 2 x 2 (1536->640: 2 x 2 1.6x, 4 x 4 1.0x); IQ4_XS untiled (its
        // tiles are 1.2-1.6x slower than one token).
        // From 32 tokens on, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 in token lanes. Exact lanes: 64 rows x 8
        // tokens per work item (the activation transpose amortized over 64 rows), one row at a
        // time (its eight lane accumulators in registers): SmolLM2-shape Q4_0 pp128 on 2 EPYC
        // threads 289 -> 456 tok/s (docs/performance.md); Q8_0 (the sign trick, loom_dot4_s7)
        // 576 -> 1536 x 128 tokens 2.2 ms against the tiles' 2.5, 2048 -> 2048 9.8-10.3 against
        // 11.3-13.5. Rows whose blocks the scratch does not hold at once stay in tiles (in
        // K-chunks the exact lanes measured no faster: Q4_0 and Q8_0 8192 -> 2048).
        // Summed lanes (cpu_matmul_summed: Q4_0 by default) take 16 tokens per item where the
        // scratch holds them (576 -> 1536 and 2048 -> 2048 1.1-1.3x over 8), and long rows in
        // K-chunks of 32-row items (8192 -> 2048 x 128 tokens: 33 ms, 64-row items 65-75 ms,
        // tiles 51 ms; 2 EPYC threads).
        const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
        const int64_t nb = s.at("n_in") / 32;
        // AMX tiles where the CPU has them (docs/kernels.md, "Prompt matmul on AMX").
        if (cpu_matmul_amx() && matmul_amx_takes(s))
          return {{"rows_per_block", 16}, {"row_tile", 1}, {"tok_tile", 16}, {"tok_lanes", 3}};
        if (token_lanes(s) && s.at("n_tokens") >= 32) {
          if (cpu_matmul_summed(wt)) {
            const int64_t per = token_lane_scratch_per_block(wt, false);
            if (nb * 2 * per <= kTokenLaneScratch)
              return {{"rows_per_block", 64}, {"row_tile", 1}, {"tok_tile", 16}, {"tok_lanes", 2}};
            return {{"rows_per_block", nb * per <= kTokenLaneScratch ? 64 : 32}, {"row_tile", 1}, {"tok_tile", 8},
                    {"tok_lanes", 2}};
          }
          if (nb * token_lane_scratch_per_block(wt, true) <= kTokenLaneScratch)
            return {{"rows_per_block", 64}, {"row_tile", 1}, {"tok_tile", 8}, {"tok_lanes", 1}};
        }
        switch (static_cast<GgmlType>(s.at("wtype"))) {
          case GgmlType::Q6_K: return {{"rows_per_block", 4}, {"row_tile", 2}, {"tok_tile", 4}, {"tok_lanes", 0}};
          case GgmlType::F16: return {{"rows_per_block", 4}, {"row_tile", 2}, {"tok_tile", 2}, {"tok_lanes", 0}};
          case GgmlType::IQ4_XS: return {{"rows_per_block", 4}, {"row_tile", 1}, {"tok_tile", 1}, {"tok_lanes", 0}};
          default:
            return {{"rows_per_block", 4},
                    {"row_tile", 4},
                    {"tok_tile", codegen::cpu_vector_registers() >= 32 ? 8 : 4},
                    {"tok_lanes", 0}};
        }
      }
      // The hardware prefetchers alone keep too few weight lines in flight for a row-at-a-time
      // stream from DRAM: asking for the bytes 4 KiB ahead takes SmolLM2's decode mat-vecs from
      // ~5 to ~17 GB/s on 2 threads (docs/kernels.md).
      return {{"rows_per_block", 4}, {"row_tile", 1}, {"prefetch", 4096}};
    }
    if (id_) {
      // Expert rows are short (Qwen3-30B-A3B: 8 Q4_K blocks per gate/up row, 3 per down row):
      // the fewest lanes that still give every lane a block, so fewer lanes sit idle.
      const int64_t nb = s.at("n_in") / dot_format(static_cast<GgmlType>(s.at("wtype"))).block_elems;
      return {{"rows_per_block", 4}, {"lanes_per_row", nb >= 32 ? 32 : nb >= 16 ? 16 : 8}};
    }
    // matmul on GPUs (the weights matmul_mmq / matmul_mma do not take, e.g. an f32 MoE router):
    // from 16 tokens on, 16 tokens per CTA, so a weight block read from memory serves 16 of
    // them, and 8 lanes per row (H200, Qwen3-30B-A3B-shape pp512 with its 2048 x 128 f32 routers:
    // 6,915 tok/s; 8 tokens x 32 lanes 5,266, 16 x 32 5,486, 16 x 16 6,341).
    if (multi_) {
      if (s.at("n_tokens") >= 16) return {{"rows_per_block", 4}, {"lanes_per_row", 8}, {"tok_tile", 16}};
      return {{"rows_per_block", 4}, {"lanes_per_row", 32}, {"tok_tile", 1}};
    }
    // matvec: a warp per row where 4 rows per CTA would leave SMs idle (an f32 MoE router of
    // 128 rows: 128 CTAs instead of 32).
    return {{"rows_per_block", s.at("n_out") < 4 * 132 ? 1 : 4}, {"lanes_per_row", 32}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind target) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(check_schedule(schedule_space(s, target), sch));
    if (grouped(s)) return generate_grouped(s, sch, target);
    if (target == ir::TargetKind::kCpp && multi_ && !id_ && sch.at("tok_lanes") == 3)
      return generate_matmul_cpu_amx(s, sch, name());
    if (target == ir::TargetKind::kCpp && multi_ && !id_ && sch.at("tok_lanes") != 0) {
      if (!token_lanes(s))
        return invalid_argument("matmul: tok_lanes={} takes Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0 and n_tokens >= 8",
                                sch.at("tok_lanes"));
      return generate_matmul_cpu_tokens(s, sch, name());
    }
    if (target == ir::TargetKind::kCpp && multi_ && !id_ && sch.at("tok_tile") > 1)
      return generate_matmul_cpu_tiles(s, sch, name());
    const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
    const DotFormat f = dot_format(wt);
    const int64_t n_in = s.at("n_in"), n_out = s.at("n_out");
    const int64_t nb = n_in / f.block_elems;
    const int64_t w_row = nb * f.w_bytes, x_row = nb * f.x_bytes;
    const int64_t rpb = sch.at("rows_per_block");
    const std::string kname = fmt::format("{}_{}{}", name(), llm::ggml_type_name(wt), glu(s) ? "_glu" : "");
    Generated g;
    ir::Kernel* k = g.module.add_kernel(kname);
    Emit b(*k);
    b.cpu = target == ir::TargetKind::kCpp;
    Value* w = b.param(ty::gptr(Scalar::kU8), "w");
    Value* xq = b.param(ty::gptr(Scalar::kU8), "xq");
    Value* ids = id_ ? b.param(ty::gptr(Scalar::kI32), "ids") : nullptr;
    Value* y = b.param(ty::gptr(Scalar::kF32), "y");
    Value* w1 = glu(s) ? b.param(ty::gptr(Scalar::kU8), "w1") : nullptr;
    // One grid row per token (per token and slot for matvec_id).
    Value* tok = b.block_id(Mode::kY);
    Value* xtok = tok;
    if (id_) {
      // The chosen expert's matrix: ids outside [0, n_expert) read expert 0 rather than memory
      // past the tensor.
      const int32_t ne = static_cast<int32_t>(s.at("n_expert"));
      Value* e = clamp_expert(b, b.load(ids, tok), ne);
      w = b.offset(w, b.mul(b.convert(e, ty::s(Scalar::kI64)), b.i64(n_out * w_row)));
      if (w1) w1 = b.offset(w1, b.mul(b.convert(e, ty::s(Scalar::kI64)), b.i64(n_out * w_row)));
      if (!s.at("x_per_slot")) xtok = b.div(tok, b.i32(static_cast<int32_t>(s.at("n_used"))));
    }
    Value* xrow = b.offset(xq, b.mul(xtok, b.i32(static_cast<int32_t>(x_row))));
    Value* yrow = b.offset(y, b.mul(tok, b.i32(static_cast<int32_t>(n_out))));
    auto wrow_of = [&](Value* r, Value* base = nullptr) {
      return b.offset(base ? base : w, b.mul(b.convert(r, ty::s(Scalar::kI64)), b.i64(w_row)));
    };
    // glu: each row's dot with w and with w1; their silu(g) * u is the output.
    const int64_t mats = w1 ? 2 : 1;
    KernelLaunch l;
    l.kernel = kname;
    l.args = w1 ? std::vector<int>{0, 1, 2, 3, 5} : id_ ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0, 1, 2};
    if (target == ir::TargetKind::kCpp) {
      // One thread per block of rows; rows in tiles of row_tile that share each activation step.
      const int64_t tile = std::min(sch.at("row_tile"), rpb);
      // Q4_0/Q5_0 with several rows per work item: the activation blocks' scales and offset lane
      // sums once per item instead of once per row (the decode loop's 24 instructions per block
      // become 19; docs/kernels.md).
      const int64_t xt_bytes = !id_ && rpb > 1 ? x_table_bytes(f, nb) : 0;
      Value* xt = xt_bytes ? b.alloc_shared(Scalar::kU8, xt_bytes) : nullptr;
      Value* r0 = b.mul(b.block_id(Mode::kX), b.i32(static_cast<int32_t>(rpb)));
      Value* rend = b.min(b.add(r0, b.i32(static_cast<int32_t>(rpb))), b.i32(static_cast<int32_t>(n_out)));
      // Full tiles, then single rows (n_out need not be a multiple of the tile).
      Value* full_end = b.sub(rend, b.rem(b.sub(rend, r0), b.i32(static_cast<int32_t>(tile))));
      auto emit_rows = [&](Value* r, int64_t count) {
        std::vector<Value*> wr;
        std::vector<Value*> init;
        for (int64_t m = 0; m < mats; ++m)
          for (int64_t t = 0; t < count; ++t) {
            wr.push_back(wrow_of(b.add(r, b.i32(static_cast<int32_t>(t))), m ? w1 : w));
            for (Value* v : dot_init(b, f)) init.push_back(v);
          }
        const size_t per = init.size() / static_cast<size_t>(count * mats);
        if (const int64_t ahead = knob(sch, "prefetch", 0); ahead > 0)
          for (Value* row : wr)
            b.for_loop(b.i32(0), b.i32(static_cast<int32_t>(w_row)), b.i32(64), {}, [&](Value* o, std::span<Value* const>) {
              b.prefetch(row, b.addc(o, ahead));
              return std::vector<Value*>{};
            });
        auto acc = b.for_loop(b.i32(0), b.i32(static_cast<int32_t>(nb)), b.i32(1), init,
                              [&](Value* blk, std::span<Value* const> it) {
                                DotX x = xt ? dot_prep_x_table(b, f, xrow, blk, nb, xt)
                                            : dot_prep_x(b, f, xrow, b.mul(blk, b.i32(f.x_bytes)));
                                Value* woff = b.mul(blk, b.i32(f.w_bytes));
                                std::vector<Value*> next;
                                for (int64_t t = 0; t < count * mats; ++t) {
                                  auto part = dot_step(b, f, wr[static_cast<size_t>(t)], woff, x,
                                                       it.subspan(static_cast<size_t>(t) * per, per));
                                  next.insert(next.end(), part.begin(), part.end());
                                }
                                return next;
                              });
        for (int64_t t = 0; t < count; ++t) {
          Value* v = dot_finish(b, f, std::span<Value* const>(acc).subspan(static_cast<size_t>(t) * per, per));
          if (w1)
            v = silu_times(b, v, dot_finish(b, f, std::span<Value* const>(acc).subspan(static_cast<size_t>(count + t) * per, per)));
          b.store(yrow, b.add(r, b.i32(static_cast<int32_t>(t))), v);
        }
      };
      if (xt) fill_x_table(b, f, xrow, nb, xt);
      b.for_loop(r0, full_end, b.i32(static_cast<int32_t>(tile)), {}, [&](Value* r, std::span<Value* const>) {
        emit_rows(r, tile);
        return std::vector<Value*>{};
      });
      if (tile > 1)
        b.for_loop(full_end, rend, b.i32(1), {}, [&](Value* r, std::span<Value* const>) {
          emit_rows(r, 1);
          return std::vector<Value*>{};
        });
      l.grid = {static_cast<uint32_t>((n_out + rpb - 1) / rpb), static_cast<uint32_t>(pairs(s)), 1};
      l.block = {1, 1, 1};
    } else {
      // A group of lanes_per_row lanes per row (groups never straddle a warp); lane i of a
      // group takes blocks i, i + lanes, ...; a shuffle butterfly sums within the group.
      const int64_t lanes = sch.at("lanes_per_row");
      Value* tx = b.thread_id(Mode::kX);  // 0 .. 32*rpb-1 (warps of 32)
      Value* lane = b.rem(tx, b.i32(static_cast<int32_t>(lanes)));
      Value* r = b.add(b.mul(b.block_id(Mode::kX), b.i32(static_cast<int32_t>(rpb * 32 / lanes))),
                       b.div(tx, b.i32(static_cast<int32_t>(lanes))));
      Value* valid = b.cmp(Mode::kLt, r, b.i32(static_cast<int32_t>(n_out)));
      Value* rc = b.select(valid, r, b.i32(0));  // out-of-range rows compute row 0, store nothing
      Value* wr = wrow_of(rc);
      // matmul, tok_tile > 1: the CTA's tokens t0 .. t0 + tile - 1 (past the end: the last one
      // again, not stored), each with its own accumulators through the one block loop.
      const int64_t tt = multi_ && !id_ && sch.count("tok_tile") ? std::min(sch.at("tok_tile"), s.at("n_tokens")) : 1;
      if (tt > 1) {
        const int32_t nt = static_cast<int32_t>(s.at("n_tokens"));
        Value* t0 = b.mul(b.block_id(Mode::kY), b.i32(static_cast<int32_t>(tt)));
        std::vector<Value*> xrows, init;
        for (int64_t t = 0; t < tt; ++t) {
          Value* tk = b.min(b.addc(t0, t), b.i32(nt - 1));
          xrows.push_back(b.offset(xq, b.mul(tk, b.i32(static_cast<int32_t>(x_row)))));
          for (Value* v : dot_init(b, f)) init.push_back(v);
        }
        const size_t per = init.size() / static_cast<size_t>(tt);
        auto acc = b.for_loop(lane, b.i32(static_cast<int32_t>(nb)), b.i32(static_cast<int32_t>(lanes)), init,
                              [&](Value* blk, std::span<Value* const> it) {
                                Value* woff = b.mul(blk, b.i32(f.w_bytes));
                                std::vector<Value*> next;
                                for (int64_t t = 0; t < tt; ++t) {
                                  DotX x = dot_prep_x(b, f, xrows[static_cast<size_t>(t)], b.mul(blk, b.i32(f.x_bytes)));
                                  auto part = dot_step(b, f, wr, woff, x, it.subspan(static_cast<size_t>(t) * per, per));
                                  next.insert(next.end(), part.begin(), part.end());
                                }
                                return next;
                              });
        for (int64_t t = 0; t < tt; ++t) {
          Value* part = dot_finish(b, f, std::span<Value* const>(acc).subspan(static_cast<size_t>(t) * per, per));
          part = lane_group_sum(b, part, lanes);
          Value* tk = b.addc(t0, t);
          Value* store = b.bit_and(b.bit_and(valid, b.cmp(Mode::kEq, lane, b.i32(0))), b.cmp(Mode::kLt, tk, b.i32(nt)));
          b.when(store, [&] { b.store(b.offset(y, b.mul(tk, b.i32(static_cast<int32_t>(n_out)))), r, part); });
        }
        const int64_t rows_per_cta = rpb * 32 / lanes;
        l.grid = {static_cast<uint32_t>((n_out + rows_per_cta - 1) / rows_per_cta), static_cast<uint32_t>((nt + tt - 1) / tt), 1};
        l.block = {static_cast<uint32_t>(rpb * 32), 1, 1};
        g.launches.push_back(l);
        return g;
      }
      Value* wr1 = w1 ? wrow_of(rc, w1) : nullptr;
      std::vector<Value*> init = dot_init(b, f);
      const size_t per = init.size();
      if (w1)
        for (Value* v : dot_init(b, f)) init.push_back(v);
      auto acc = b.for_loop(lane, b.i32(static_cast<int32_t>(nb)), b.i32(static_cast<int32_t>(lanes)), init,
                            [&](Value* blk, std::span<Value* const> it) {
                              DotX x = dot_prep_x(b, f, xrow, b.mul(blk, b.i32(f.x_bytes)));
                              Value* woff = b.mul(blk, b.i32(f.w_bytes));
                              std::vector<Value*> next = dot_step(b, f, wr, woff, x, it.subspan(0, per));
                              if (wr1) {
                                auto up = dot_step(b, f, wr1, woff, x, it.subspan(per, per));
                                next.insert(next.end(), up.begin(), up.end());
                              }
                              return next;
                            });
      auto reduce = [&](Value* part) { return lane_group_sum(b, part, lanes); };
      Value* part = reduce(dot_finish(b, f, std::span<Value* const>(acc).subspan(0, per)));
      if (wr1) part = silu_times(b, part, reduce(dot_finish(b, f, std::span<Value* const>(acc).subspan(per, per))));
      Value* store = b.bit_and(valid, b.cmp(Mode::kEq, lane, b.i32(0)));
      b.if_then_else(store, {}, [&] {
        b.store(yrow, r, part);
        return std::vector<Value*>{};
      });
      const int64_t rows_per_cta = rpb * 32 / lanes;
      l.grid = {static_cast<uint32_t>((n_out + rows_per_cta - 1) / rows_per_cta), static_cast<uint32_t>(pairs(s)), 1};
      l.block = {static_cast<uint32_t>(rpb * 32), 1, 1};
    }
    g.launches.push_back(l);
    return g;
  }

  // matvec_id, grouped. Kernel 1 (one block): for each expert, the pairs (t * n_used + j) that
  // chose it, in ascending order, and their count. Kernel 2: a grid row per expert; each row of
  // the expert's matrix is multiplied with every listed pair's activations (the row stays in
  // cache), so every chosen expert's weights stream from memory once per step. Each element is
  // the same dot product as the ungrouped kernel computes.
  Result<Generated> generate_grouped(const Shape& s, const Schedule& sch, ir::TargetKind target) const {
    const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
    const DotFormat f = dot_format(wt);
    const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), ne = s.at("n_expert"), nu = s.at("n_used");
    const int64_t np = pairs(s), ps = s.at("x_per_slot");
    const int64_t nb = n_in / f.block_elems;
    const int64_t w_row = nb * f.w_bytes, x_row = nb * f.x_bytes;
    const int64_t rpb = sch.at("rows_per_block");
    const bool cpu = target == ir::TargetKind::kCpp;
    const std::string gname = fmt::format("{}_group", name()), kname = fmt::format("{}_{}_grouped", name(), llm::ggml_type_name(wt));
    Generated g;
    add_moe_groups_kernel(g, gname, ne, np, cpu, 2, 4);
    ir::Kernel* k = g.module.add_kernel(kname);
    Emit b(*k);
    b.cpu = cpu;
    Value* w = b.param(ty::gptr(Scalar::kU8), "w");
    Value* xq = b.param(ty::gptr(Scalar::kU8), "xq");
    Value* groups = b.param(ty::gptr(Scalar::kI32), "groups");
    Value* y = b.param(ty::gptr(Scalar::kF32), "y");
    Value* e = b.block_id(Mode::kY);
    Value* cnt = b.load(groups, e);
    Value* list = b.offset(groups, b.add(b.i32(static_cast<int32_t>(ne)), b.mul(e, b.i32(static_cast<int32_t>(np)))));
    Value* we = b.offset(w, b.mul(b.convert(e, ty::s(Scalar::kI64)), b.i64(n_out * w_row)));
    auto wrow_of = [&](Value* r) { return b.offset(we, b.mul(b.convert(r, ty::s(Scalar::kI64)), b.i64(w_row))); };
    auto xrow_of = [&](Value* pair) {
      Value* xt = ps ? pair : b.div(pair, b.i32(static_cast<int32_t>(nu)));
      return b.offset(xq, b.mul(xt, b.i32(static_cast<int32_t>(x_row))));
    };
    auto yrow_of = [&](Value* pair) { return b.offset(y, b.mul(pair, b.i32(static_cast<int32_t>(n_out)))); };
    KernelLaunch l;
    l.kernel = kname;
    l.args = {0, 1, 4, 3};
    if (cpu) {
      Value* r0 = b.mul(b.block_id(Mode::kX), b.i32(static_cast<int32_t>(rpb)));
      Value* rend = b.min(b.add(r0, b.i32(static_cast<int32_t>(rpb))), b.i32(static_cast<int32_t>(n_out)));
      b.for_loop(r0, rend, b.i32(1), {}, [&](Value* r, std::span<Value* const>) {
        Value* wr = wrow_of(r);
        b.for_loop(b.i32(0), cnt, b.i32(1), {}, [&](Value* i, std::span<Value* const>) {
          Value* pair = b.load(list, i);
          Value* xrow = xrow_of(pair);
          auto acc = b.for_loop(b.i32(0), b.i32(static_cast<int32_t>(nb)), b.i32(1), dot_init(b, f),
                                [&](Value* blk, std::span<Value* const> it) {
                                  DotX x = dot_prep_x(b, f, xrow, b.mul(blk, b.i32(f.x_bytes)));
                                  return dot_step(b, f, wr, b.mul(blk, b.i32(f.w_bytes)), x, it);
                                });
          b.store(yrow_of(pair), r, dot_finish(b, f, acc));
          return std::vector<Value*>{};
        });
        return std::vector<Value*>{};
      });
      l.grid = {static_cast<uint32_t>((n_out + rpb - 1) / rpb), static_cast<uint32_t>(ne), 1};
      l.block = {1, 1, 1};
    } else {
      const int64_t lanes = sch.at("lanes_per_row");
      Value* tx = b.thread_id(Mode::kX);
      Value* lane = b.rem(tx, b.i32(static_cast<int32_t>(lanes)));
      Value* r = b.add(b.mul(b.block_id(Mode::kX), b.i32(static_cast<int32_t>(rpb * 32 / lanes))),
                       b.div(tx, b.i32(static_cast<int32_t>(lanes))));
      Value* valid = b.cmp(Mode::kLt, r, b.i32(static_cast<int32_t>(n_out)));
      Value* wr = wrow_of(b.select(valid, r, b.i32(0)));
      Value* store = b.bit_and(valid, b.cmp(Mode::kEq, lane, b.i32(0)));
      // The trip count is the expert's (the same for every lane of the block).
      b.for_loop(b.i32(0), cnt, b.i32(1), {}, [&](Value* i, std::span<Value* const>) {
        Value* pair = b.load(list, i);
        Value* xrow = xrow_of(pair);
        auto acc = b.for_loop(lane, b.i32(static_cast<int32_t>(nb)), b.i32(static_cast<int32_t>(lanes)), dot_init(b, f),
                              [&](Value* blk, std::span<Value* const> it) {
                                DotX x = dot_prep_x(b, f, xrow, b.mul(blk, b.i32(f.x_bytes)));
                                return dot_step(b, f, wr, b.mul(blk, b.i32(f.w_bytes)), x, it);
                              });
        Value* part = lane_group_sum(b, dot_finish(b, f, acc), lanes);
        b.when(store, [&] { b.store(yrow_of(pair), r, part); });
        return std::vector<Value*>{};
      });
      const int64_t rows_per_cta = rpb * 32 / lanes;
      l.grid = {static_cast<uint32_t>((n_out + rows_per_cta - 1) / rows_per_cta), static_cast<uint32_t>(ne), 1};
      l.block = {static_cast<uint32_t>(rpb * 32), 1, 1};
    }
    g.launches.push_back(l);
    return g;
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
    const DotFormat f = dot_format(wt);
    const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens");
    auto specs = args(s);
    a[0].bytes.resize(static_cast<size_t>(specs[0].bytes));
    random_rows(rng, wt, experts(s) * n_out, n_in, 0.1f, a[0].bytes.data());
    a[1].bytes.resize(static_cast<size_t>(specs[1].bytes));
    if (id_) {
      // Each token's n_used distinct experts, in a random order (the router's form).
      const int64_t ne = s.at("n_expert"), nu = s.at("n_used");
      a[2].bytes.resize(static_cast<size_t>(specs[2].bytes));
      a[4].bytes.assign(static_cast<size_t>(specs[4].bytes), 0);  // scratch
      if (glu(s)) {
        a[5].bytes.resize(static_cast<size_t>(specs[5].bytes));
        random_rows(rng, wt, experts(s) * n_out, n_in, 0.1f, a[5].bytes.data());
      }
      int32_t* ids = reinterpret_cast<int32_t*>(a[2].bytes.data());
      std::vector<int32_t> perm(static_cast<size_t>(ne));
      for (int64_t t = 0; t < nt; ++t) {
        for (int64_t e = 0; e < ne; ++e) perm[static_cast<size_t>(e)] = static_cast<int32_t>(e);
        std::shuffle(perm.begin(), perm.end(), rng);
        std::copy(perm.begin(), perm.begin() + nu, ids + t * nu);
      }
    }
    const int64_t nx = x_rows(s);
    const int64_t xr = specs[1].bytes / nx;
    for (int64_t t = 0; t < nx; ++t) {
      std::vector<float> x = random_floats(rng, static_cast<size_t>(n_in), -1.0f, 1.0f);
      llm::ref::quantize_activation(f.xtype, x.data(), a[1].bytes.data() + t * xr, n_in);
    }
  }

  Status reference(const Shape& s, std::span<HostArg> a) const override {
    const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
    const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens");
    auto specs = args(s);
    const int64_t wr = specs[0].bytes / (experts(s) * n_out), xr = specs[1].bytes / x_rows(s);
    if (id_) {
      const int64_t ne = s.at("n_expert"), nu = s.at("n_used"), ps = s.at("x_per_slot");
      const int32_t* ids = reinterpret_cast<const int32_t*>(a[2].bytes.data());
      a[3].bytes.resize(static_cast<size_t>(specs[3].bytes));
      float* y = reinterpret_cast<float*>(a[3].bytes.data());
      for (int64_t pr = 0; pr < nt * nu; ++pr) {
        const int64_t e = ids[pr] >= 0 && ids[pr] < ne ? ids[pr] : 0;
        const uint8_t* x = a[1].bytes.data() + (ps ? pr : pr / nu) * xr;
        for (int64_t r = 0; r < n_out; ++r) {
          float v = llm::ref::vec_dot(wt, a[0].bytes.data() + (e * n_out + r) * wr, x, n_in);
          if (glu(s)) {
            const float u = llm::ref::vec_dot(wt, a[5].bytes.data() + (e * n_out + r) * wr, x, n_in);
            llm::ref::swiglu(&v, &u, &v, 1);
          }
          y[pr * n_out + r] = v;
        }
      }
      return Status();
    }
    a[2].bytes.resize(static_cast<size_t>(specs[2].bytes));
    float* y = reinterpret_cast<float*>(a[2].bytes.data());
    for (int64_t t = 0; t < nt; ++t)
      for (int64_t r = 0; r < n_out; ++r)
        y[t * n_out + r] = llm::ref::vec_dot(wt, a[0].bytes.data() + r * wr, a[1].bytes.data() + t * xr, n_in);
    return Status();
  }

  std::vector<Shape> test_shapes() const override {
    std::vector<Shape> out;
    if (id_) {
      // The formats of a Q4_K_M-like mixture of experts (Q4_K gate/up, Q6_K or Q4_K down, the
      // q8_0 test files; f32 for the generic path), small and at Qwen3-30B-A3B's rows (2048 ->
      // 768 -> 2048, 4 of its 128 experts): decode (1 token), batches, the per-slot down input.
      auto id_shape = [](GgmlType t, int64_t n_in, int64_t n_out, int64_t ne, int64_t nu, int64_t nt, int64_t ps) {
        return Shape{{{"n_in", n_in}, {"n_out", n_out}, {"n_tokens", nt}, {"wtype", static_cast<int64_t>(t)},
                      {"n_expert", ne}, {"n_used", nu}, {"x_per_slot", ps}}};
      };
      out.push_back(id_shape(GgmlType::Q4_K, 256, 40, 8, 2, 1, 0));
      out.push_back(id_shape(GgmlType::Q6_K, 512, 24, 8, 3, 5, 1));
      out.push_back(id_shape(GgmlType::Q8_0, 256, 40, 8, 2, 3, 0));
      out.push_back(id_shape(GgmlType::F32, 64, 16, 4, 2, 3, 1));
      out.push_back(id_shape(GgmlType::Q4_K, 2048, 768, 4, 2, 1, 0));   // gate / up, decode
      out.push_back(id_shape(GgmlType::Q6_K, 768, 2048, 4, 2, 3, 1));   // down, 3 tokens
      // gate and up with their SwiGLU in one launch (decode).
      for (Shape sh : {id_shape(GgmlType::Q4_K, 512, 40, 8, 2, 1, 0), id_shape(GgmlType::Q8_0, 256, 40, 8, 2, 3, 0)}) {
        sh.dims["glu"] = 1;
        out.push_back(sh);
      }
      // Grouped (prompts): per expert its pairs, then its rows once for all of them.
      for (Shape sh : {id_shape(GgmlType::Q4_K, 256, 40, 8, 2, 7, 0), id_shape(GgmlType::Q6_K, 512, 24, 8, 3, 6, 1),
                       id_shape(GgmlType::Q8_0, 2048, 64, 16, 8, 9, 0)}) {
        sh.dims["grouped"] = 1;
        out.push_back(sh);
      }
      return out;
    }
    const int64_t nt = multi_ ? 5 : 1;
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                       GgmlType::Q8_0}) {
      const int64_t wt = static_cast<int64_t>(t);
      out.push_back({{{"n_in", 64}, {"n_out", 37}, {"n_tokens", nt}, {"wtype", wt}}});
      out.push_back({{{"n_in", 576}, {"n_out", 1536}, {"n_tokens", nt}, {"wtype", wt}}});  // SmolLM2 up
    }
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
      const int64_t wt = static_cast<int64_t>(t);
      out.push_back({{{"n_in", 512}, {"n_out", 19}, {"n_tokens", nt}, {"wtype", wt}}});
      out.push_back({{{"n_in", 1536}, {"n_out", 640}, {"n_tokens", nt}, {"wtype", wt}}});
    }
    // The formats read from files only: one shape each (a ragged one for mat-vecs, a small one
    // for batches), which keeps their cpu kernels' compile time out of CI's budget.
    for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_XS, GgmlType::IQ4_NL}) {
      const int64_t wt = static_cast<int64_t>(t), k = t == GgmlType::IQ4_NL ? 576 : 1536;
      if (multi_) out.push_back({{{"n_in", k / 3}, {"n_out", 19}, {"n_tokens", nt}, {"wtype", wt}}});
      else out.push_back({{{"n_in", k}, {"n_out", 640}, {"n_tokens", nt}, {"wtype", wt}}});
    }
    // A mixture of experts' f32 router over a prompt (Qwen3-30B-A3B: 2048 -> 128): on GPUs
    // tokens in tiles of 8 (the last one partial).
    if (multi_) out.push_back({{{"n_in", 2048}, {"n_out", 128}, {"n_tokens", 37}, {"wtype", static_cast<int64_t>(GgmlType::F32)}}});
    if (!multi_) {
      out.push_back({{{"n_in", 1536}, {"n_out", 576}, {"n_tokens", 1}, {"wtype", 3}}});   // SmolLM2 down
      out.push_back({{{"n_in", 4096}, {"n_out", 1024}, {"n_tokens", 1}, {"wtype", 2}}});  // Llama-3-8B k rows
    }
    return out;
  }

 private:
  bool multi_;
  bool id_;
};

}  // namespace

const OpSpec& matvec_op() {
  static const MatOp op(false);
  return op;
}
const OpSpec& matmul_op() {
  static const MatOp op(true);
  return op;
}
const OpSpec& matvec_id_op() {
  static const MatOp op(true, /*id=*/true);
  return op;
}

}  // namespace loom::kernels
