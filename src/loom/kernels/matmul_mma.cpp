// matmul_mma: y = x W^T for prompts (n_tokens rows of f32 activations) on the tensor cores. A CTA
// computes a tile of weight rows x tokens; per 32-wide k step its threads dequantize the weight
// tile (Q4_0, Q8_0, Q4_K, Q6_K) to f16 and convert the activation tile to f16 in shared memory,
// then each warp runs mma (m16n8k16, f32 accumulate) on its 32 x 32 sub-tile. mma is PTX-only:
// on the cpu target the op generates a scalar kernel with the same dequantization and f16
// rounding (one thread per output), so the cpu tests check the numerics, not the tiling.
#include <array>
#include <cmath>
#include <cstring>

#include <functional>

#include "loom/base/thread_pool.h"
#include "loom/gguf/planar.h"
#include "loom/gguf/quant.h"
#include "loom/kernels/mma_dequant.h"
#include "loom/kernels/mma_tile.h"
#include "loom/kernels/op_list.h"
#include "loom/kernels/op_util.h"

namespace loom::kernels {
namespace {

using ir::AddrSpace;
using ir::Mode;
using ir::Scalar;
using ir::Type;
using ir::Value;
using llm::GgmlType;
using mma::dequant16;
using mma::dequant16_split;
using mma::layout_of;
using mma::m_format;
using mma::MFormat;
using mma::MmaTile;
using mma::Unpack16;
using mma::WLayout;

// Activations as f16 (shape dim xtype = 1, the GGUF F16 type number): converted once per step by
// quantize_act instead of in every CTA that reads them, at half the bytes. Absent or 0: f32.
bool x_is_f16(const Shape& s) { return s.dims.count("xtype") && s.at("xtype") == 1; }

// What every generator reads from the shape: the weight format and layout, and the sizes
// (`const auto& [wt, f, n_in, n_out, nt, L] = Problem(s);`).
struct Problem {
  GgmlType wt;
  MFormat f{};
  int64_t n_in, n_out, nt;
  WLayout L;
  explicit Problem(const Shape& s)
      : wt(static_cast<GgmlType>(s.at("wtype"))), n_in(s.at("n_in")), n_out(s.at("n_out")), nt(s.at("n_tokens")) {
    m_format(wt, &f);
    L = layout_of(s, wt, n_in, n_out, f.block_elems, f.block_bytes);
  }
};

class MatmulMmaOp final : public OpSpec {
 public:
  std::string_view name() const override { return "matmul_mma"; }
  std::string_view description() const override {
    return "y = x W^T for prompts on tensor cores (mma m16n8k16): weights (Q4_0, Q8_0, Q2_K, Q3_K, Q4_K, Q6_K, IQ4_NL, IQ4_XS) dequantized to f16 "
           "tiles, f32 activations rounded to f16, f32 accumulation";
  }

  Status validate(const Shape& s) const override {
    LOOM_ASSIGN_OR_RETURN(GgmlType wt, shape_type(s, "wtype"));
    MFormat f{};
    if (!m_format(wt, &f))
      return invalid_argument("matmul_mma: weight type {} is not supported (Q4_0, Q8_0, Q2_K, Q3_K, Q4_K, Q6_K, IQ4_NL, IQ4_XS)",
                              llm::ggml_type_name(wt));
    LOOM_ASSIGN_OR_RETURN(int64_t n_in, s.get("n_in"));
    LOOM_ASSIGN_OR_RETURN(int64_t n_out, s.get("n_out"));
    LOOM_ASSIGN_OR_RETURN(int64_t nt, s.get("n_tokens"));
    if (n_in <= 0 || n_in % f.block_elems != 0)
      return invalid_argument("matmul_mma: n_in={} must be a positive multiple of {}", n_in, f.block_elems);
    if (n_out <= 0 || n_out > (1 << 24)) return invalid_argument("matmul_mma: n_out={} out of range", n_out);
    if (nt < 1 || nt > 65535) return invalid_argument("matmul_mma: n_tokens={} out of range 1..65535", nt);
    if (nt * n_in > (int64_t{1} << 31)) return invalid_argument("matmul_mma: activations too large");
    if (s.dims.count("xtype") && s.at("xtype") != 0 && s.at("xtype") != 1)
      return invalid_argument("matmul_mma: xtype={} (0: f32 activations, 1: f16)", s.at("xtype"));
    if (s.dims.count("planar") && s.at("planar") != 0 && s.at("planar") != 1)
      return invalid_argument("matmul_mma: planar={} (0: GGUF rows, 1: matvec_gpu's planar layout)", s.at("planar"));
    if (s.dims.count("wgmma") && s.at("wgmma") != 0 && s.at("wgmma") != 1)
      return invalid_argument("matmul_mma: wgmma={} (1: the GPU has Hopper's warpgroup MMA, sm_90a)", s.at("wgmma"));
    llm::PlanarGeometry pg;
    if (s.dims.count("planar") && s.at("planar") == 1 && !llm::planar_geometry(wt, &pg))
      return invalid_argument("matmul_mma: {} has no planar layout", llm::ggml_type_name(wt));
    return Status();
  }

  std::vector<ArgSpec> args(const Shape& s) const override {
    MFormat f{};
    m_format(static_cast<GgmlType>(s.at("wtype")), &f);
    const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens");
    return {{"w", ArgKind::kBuffer, ArgRole::kInput, n_out * (n_in / f.block_elems) * f.block_bytes, Scalar::kU8},
            {"x", ArgKind::kBuffer, ArgRole::kInput, nt * n_in * (x_is_f16(s) ? 2 : 4), x_is_f16(s) ? Scalar::kF16 : Scalar::kF32},
            {"y", ArgKind::kBuffer, ArgRole::kOutput, nt * n_out * 4, Scalar::kF32}};
  }

  Cost cost(const Shape& s) const override {
    auto a = args(s);
    return {static_cast<double>(a[0].bytes + a[1].bytes + a[2].bytes),
            2.0 * static_cast<double>(s.at("n_in")) * static_cast<double>(s.at("n_out")) * static_cast<double>(s.at("n_tokens"))};
  }

  // Weights and activations are rounded to f16 (relative error <= 2^-11 each) before products
  // summed in f32: the error grows like sqrt(n_in) * |w| |x| * 2^-11; a wrong block is off by
  // about the sum of its 32 products (~0.1 here).
  Tolerance tolerance(const Shape& s) const override {
    return {2e-4 * std::sqrt(static_cast<double>(s.at("n_in"))), 2e-3, false};
  }

  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind t) const override {
    if (t != ir::TargetKind::kPtx) return {{"threads", {32, 64, 128}}};
    std::vector<int64_t> kts;
    for (int64_t kt : {32, 64, 128})
      if (s.at("n_in") % kt == 0) kts.push_back(kt);
    return {{"warps_m", {1, 2, 4}}, {"warps_n", {1, 2, 4}}, {"k_tile", kts}, {"warp_m_tiles", {2, 4}},
            {"warp_n_tiles", {4, 8}}, {"pipeline", {0, 1, 2}}, {"ldsm", {0, 1}}, {"wgmma", {0, 1}},
            {"wg_m", {1, 2, 4}}, {"wg_n", {64, 128}}, {"wg_rs", {0, 1}}, {"stages", {2, 3, 4, 6, 8}}};
  }
  // k_tile: the k elements staged per barrier pair (per barrier when pipelined). pipeline = 0
  // ignores warp_n_tiles and ldsm (its warps hold 32 tokens). Wider tiles put more loads in flight per
  // thread before each barrier and pay the barriers and the load latency once per more mma.
  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override {
    if (t != ir::TargetKind::kPtx) return {{"threads", 64}};
    // The best of a sweep on the H200 (pp512 of the 8B Q4_0 model, f16 activations,
    // bench/results/2026-11-30-h200-mma-sweep.json): 2 x 4 warps (64 rows x 128 tokens),
    // k_tile 64: 6094 tok/s; 2 x 2 warps at k_tile 128 5437, at k_tile 32 3669.
    const int64_t nt = s.at("n_tokens"), n_in = s.at("n_in");
    int64_t kt = 64;
    while (n_in % kt) kt /= 2;
    // Pipelined for Q4_0 in the engine's planar layout at 8B-sized matrices: 128 x 128 CTA tiles
    // of 8 warps (32 x 64 each), one shared buffer, k_tile 64. The H200 sweep of the 8B Q4_0
    // model's pp512 (bench/results/2026-12-03-h200-prefill.json): 6969 tok/s against 6287 for the
    // unpipelined kernel; the Q4_K_M-like model and SmolLM2's small matrices ran faster unpipelined
    // (5132 vs 4993, 57706 vs 53927), so they keep it.
    const bool planar = s.dims.count("planar") && s.at("planar") == 1;
    const int64_t n_out = s.at("n_out");
    // Shape dim wgmma = 1 (the engine sets it on a Hopper GPU): 2 warpgroups x 128 tokens (64
    // below 128 tokens), k_tile 64. Q4_0 and Q4_K in the planar layout take the weights-in-
    // registers kernel with two cp.async stages: on an H100 at 512 tokens
    // (bench/results/2026-12-07-h100-wgmma-rs.json) 4096 -> 14336 Q4_0 in 310 us against 394 for
    // matmul_mmq, 369 for the shared-memory wgmma kernel, 321 with four stages of k 32 and 341
    // with 64-token tiles; Q4_K 366 against matmul_mmq's 483. Other formats: one shared buffer
    // (8B Q4_0 pp512 on an H100, bench/results/2026-12-07-h100-wgmma.json: 9370 tok/s, two
    // buffers at k_tile 32 8188). Deeper pipelines (stages 4-8 at k 64, in dynamic shared
    // memory) and CTAs of four warpgroups (wg_m = 4) are in the space but not measured on a GPU
    // yet, so the default stays the measured one.
    if (s.dims.count("wgmma") && s.at("wgmma") == 1) {
      const int64_t wt = s.at("wtype");
      const bool rs = planar && (wt == static_cast<int64_t>(GgmlType::Q4_0) || wt == static_cast<int64_t>(GgmlType::Q4_K)) &&
                      n_in % 64 == 0 && x_is_f16(s);
      return {{"warps_m", 2}, {"warps_n", 1}, {"k_tile", n_in % 64 ? 32 : 64}, {"warp_m_tiles", 2}, {"warp_n_tiles", 4},
              {"pipeline", 2}, {"ldsm", 0}, {"wgmma", 1}, {"wg_m", 2}, {"wg_n", nt >= 128 ? 128 : 64}, {"wg_rs", rs ? 1 : 0}, {"stages", 2}};
    }
    if (planar && s.at("wtype") == static_cast<int64_t>(GgmlType::Q4_0) && nt >= 64 && n_in >= 1024 && n_out >= 1024 &&
        n_in % 64 == 0)
      return {{"warps_m", 4}, {"warps_n", nt >= 128 ? 2 : 1}, {"k_tile", 64}, {"warp_m_tiles", 2},
              {"warp_n_tiles", 8}, {"pipeline", 2}, {"ldsm", 1}, {"wgmma", 0}, {"wg_m", 2}, {"wg_n", 128}, {"wg_rs", 0}, {"stages", 2}};
    return {{"warps_m", 2}, {"warps_n", nt >= 128 ? 4 : nt >= 64 ? 2 : 1}, {"k_tile", kt}, {"warp_m_tiles", 2},
            {"warp_n_tiles", 4}, {"pipeline", 0}, {"ldsm", 0}, {"wgmma", 0}, {"wg_m", 2}, {"wg_n", 128}, {"wg_rs", 0}, {"stages", 2}};
  }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind target) const override {
    LOOM_RETURN_IF_ERROR(validate(s));
    LOOM_RETURN_IF_ERROR(check_schedule(schedule_space(s, target), sch));
    if (target == ir::TargetKind::kPtx && sch.count("wgmma") && sch.at("wgmma") == 1)
      return sch.count("wg_rs") && sch.at("wg_rs") == 1 ? generate_wgmma_rs(s, sch) : generate_wgmma(s, sch);
    if (target == ir::TargetKind::kPtx && sch.count("pipeline") && sch.at("pipeline") >= 1) return generate_pipe(s, sch);
    if (target == ir::TargetKind::kPtx) return generate_mma(s, sch);
    return generate_scalar(s, sch, target);
  }

  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
    const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens");
    auto specs = args(s);
    a[0].bytes.resize(static_cast<size_t>(specs[0].bytes));
    random_rows(rng, wt, n_out, n_in, 0.1f, a[0].bytes.data());
    if (s.dims.count("planar") && s.at("planar") == 1) {  // as the engine repacks its weights
      std::vector<uint8_t> gguf = a[0].bytes;
      Status st = llm::to_planar(wt, n_out, n_in, gguf.data(), a[0].bytes.data());
      (void)st;
    }
    std::vector<float> x = random_floats(rng, static_cast<size_t>(nt * n_in), -1.0f, 1.0f);
    if (x_is_f16(s)) {
      a[1].bytes.resize(x.size() * 2);
      for (size_t i = 0; i < x.size(); ++i) {
        const uint16_t h = llm::fp32_to_fp16(x[i]);
        std::memcpy(a[1].bytes.data() + 2 * i, &h, 2);
      }
      return;
    }
    a[1].bytes.resize(x.size() * 4);
    std::memcpy(a[1].bytes.data(), x.data(), x.size() * 4);
  }

  // Dequantized weights (llm::dequantize) times the f32 activations, summed in double.
  Status reference(const Shape& s, std::span<HostArg> a) const override {
    const GgmlType wt = static_cast<GgmlType>(s.at("wtype"));
    const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens");
    auto specs = args(s);
    const int64_t wr = specs[0].bytes / n_out;
    a[2].bytes.resize(static_cast<size_t>(specs[2].bytes));
    std::vector<float> xf(static_cast<size_t>(nt * n_in));
    if (x_is_f16(s)) {
      LOOM_RETURN_IF_ERROR(llm::dequantize(GgmlType::F16, a[1].bytes.data(), xf.data(), nt * n_in));
    } else {
      std::memcpy(xf.data(), a[1].bytes.data(), xf.size() * 4);
    }
    const float* x = xf.data();
    float* y = reinterpret_cast<float*>(a[2].bytes.data());
    const uint8_t* wb = a[0].bytes.data();
    std::vector<uint8_t> gguf;
    if (s.dims.count("planar") && s.at("planar") == 1) {
      gguf.resize(a[0].bytes.size());
      LOOM_RETURN_IF_ERROR(llm::from_planar(wt, n_out, n_in, wb, gguf.data()));
      wb = gguf.data();
    }
    // Rows split over the reference threads ($LOOM_THREADS): an 8B model's matrices at 512
    // tokens are 10^10 products.
    ThreadPool pool(default_thread_count());
    std::vector<Status> st(static_cast<size_t>(pool.n_threads()));
    pool.parallel_for(n_out, [&](int64_t r0, int64_t r1, int ti) {
      std::vector<float> row(static_cast<size_t>(n_in));
      for (int64_t r = r0; r < r1; ++r) {
        if (Status e = llm::dequantize(wt, wb + r * wr, row.data(), n_in); !e.ok()) {
          st[static_cast<size_t>(ti)] = e;
          return;
        }
        for (int64_t t = 0; t < nt; ++t) {
          double acc = 0;
          for (int64_t k = 0; k < n_in; ++k) acc += static_cast<double>(row[static_cast<size_t>(k)]) * x[t * n_in + k];
          y[t * n_out + r] = static_cast<float>(acc);
        }
      }
    }, 16);
    for (const Status& e : st) LOOM_RETURN_IF_ERROR(e);
    return Status();
  }

  std::vector<Shape> test_shapes() const override {
    std::vector<Shape> out;
    auto add = [&](int64_t n_in, int64_t n_out, int64_t nt, GgmlType t) {
      out.push_back({{{"n_in", n_in}, {"n_out", n_out}, {"n_tokens", nt}, {"wtype", static_cast<int64_t>(t)}}});
    };
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0}) {
      add(64, 37, 5, t);
      add(576, 200, 70, t);
    }
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K}) {
      add(512, 19, 17, t);
      add(1024, 130, 64, t);
    }
    // The formats read from files only (GGUF rows, f16 activations as the engine gives them).
    for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_XS, GgmlType::IQ4_NL})
      out.push_back({{{"n_in", t == GgmlType::IQ4_NL ? 96 : 512}, {"n_out", 19}, {"n_tokens", 17},
                      {"wtype", static_cast<int64_t>(t)}, {"xtype", 1}}});
    // f16 activations (converted once per step by quantize_act).
    out.push_back({{{"n_in", 576}, {"n_out", 200}, {"n_tokens", 70}, {"wtype", 2}, {"xtype", 1}}});
    out.push_back({{{"n_in", 1024}, {"n_out", 130}, {"n_tokens", 64}, {"wtype", 12}, {"xtype", 1}}});
    // The pipelined kernel (the default for planar weights and 64 tokens or more), ragged sizes.
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K})
      out.push_back({{{"n_in", t == GgmlType::Q4_0 || t == GgmlType::Q8_0 ? 576 : 512}, {"n_out", 200}, {"n_tokens", 100},
                      {"wtype", static_cast<int64_t>(t)}, {"xtype", 1}, {"planar", 1}}});
    out.push_back({{{"n_in", 1024}, {"n_out", 1030}, {"n_tokens", 137}, {"wtype", 2}, {"xtype", 1}, {"planar", 1}}});
    // Hopper's warpgroup MMA as the engine asks for it (shape dim wgmma; on the cpu the scalar
    // kernel, on a GPU before sm_90 the PTX is refused): ragged rows and tokens, both token tiles.
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K})
      for (int64_t nt : {37, 130})
        out.push_back({{{"n_in", t == GgmlType::Q4_0 ? 576 : 512}, {"n_out", 200}, {"n_tokens", nt},
                        {"wtype", static_cast<int64_t>(t)}, {"xtype", 1}, {"planar", t == GgmlType::Q6_K ? 0 : 1}, {"wgmma", 1}}});
    // matvec_gpu's planar weight layout (the engine keeps one copy of the weights, planar).
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K})
      out.push_back({{{"n_in", t == GgmlType::Q4_0 || t == GgmlType::Q8_0 ? 576 : 512}, {"n_out", 37}, {"n_tokens", 17},
                      {"wtype", static_cast<int64_t>(t)}, {"xtype", 1}, {"planar", 1}}});
    return out;
  }

 private:
  // cpu (and any non-PTX target): one thread per (row, token), the same f16 roundings.
  Result<Generated> generate_scalar(const Shape& s, const Schedule& sch, ir::TargetKind target) const {
    const auto& [wt, f, n_in, n_out, nt, L] = Problem(s);
    const bool xh16 = x_is_f16(s);
    return mma::per_output_kernel(
        fmt::format("matmul_mma_scalar_{}", llm::ggml_type_name(wt)), target, xh16 ? Scalar::kF16 : Scalar::kF32, "x", n_out,
        nt, sch.at("threads"), [&](Emit& b, Value* w, Value* x, Value* r, Value* t) {
          Value* xrow = b.mul(t, b.i32(static_cast<int32_t>(n_in)));
          auto acc = b.for_loop(b.i32(0), b.i32(static_cast<int32_t>(n_in)), b.i32(16), {b.f32(0)},
                                [&](Value* k0, std::span<Value* const> it) {
                                  std::vector<Value*> wv = dequant16(b, wt, w, L, r, k0);
                                  Value* a = it[0];
                                  for (int i = 0; i < 16; ++i) {
                                    Value* wh = b.convert(b.convert(wv[static_cast<size_t>(i)], ty::f16), ty::f32);
                                    Value* xv = b.load(x, b.add(xrow, b.addc(k0, i)));
                                    Value* xh = b.convert(xh16 ? xv : b.convert(xv, ty::f16), ty::f32);
                                    a = b.fma(wh, xh, a);
                                  }
                                  return std::vector<Value*>{a};
                                });
          return acc[0];
        });
  }

  // PTX, Hopper's warpgroup MMA (sm_90a; wgmma = 1): wg_m warpgroups of 64 weight rows each x
  // wg_n tokens per CTA. Per k step of k_tile (32, or 64 where it fits) the weight tile is
  // dequantized to f16 and the activation tile copied, both into shared memory as 8 x 8 core
  // matrices (8 rows of 16 bytes), one of two buffers; each warpgroup then issues k_tile / 16
  // wgmma (64 x wg_n x 16, f32 accumulators in registers) on the current buffer and, while the
  // tensor cores run, dequantizes the next tile into the other. One barrier per k step.
  Result<Generated> generate_wgmma(const Shape& s, const Schedule& sch) const {
    const auto& [wt, f, n_in, n_out, nt, L] = Problem(s);
    const int64_t wgs = sch.count("wg_m") ? sch.at("wg_m") : 2, bn = sch.count("wg_n") ? sch.at("wg_n") : 128;
    const int64_t bm = 64 * wgs, threads = 128 * wgs;
    // pipeline = 2: one buffer; the next tile waits in registers (unpacked while the wgmma run)
    // until every warpgroup's wgmma are done with it (two barriers per k step), which leaves room
    // for k_tile 64 at 128 x 128.
    const int64_t nbuf = sch.count("pipeline") && sch.at("pipeline") == 2 ? 1 : 2;
    int64_t kt = sch.count("k_tile") ? sch.at("k_tile") : 32;
    while (kt > 32 && nbuf * (bm + bn) * kt * 2 > 48 * 1024) kt /= 2;
    if (kt < 32 || n_in % kt) return generate_mma(s, sch);
    const int64_t c16 = kt / 16, c8 = kt / 8;
    if (threads % (8 * c16) || threads % (8 * c8) || (c16 * bm) % threads || (c8 * bn) % threads) return generate_mma(s, sch);
    const int64_t buf = (bm + bn) * kt;         // halves per buffer: weight rows, then token rows
    const int64_t lbo = 128, sbo = c8 * 128;    // bytes: the next core matrix along k, along the rows
    // Half index of (tile row, k) in a buffer: core (row / 8, k / 8), 8 halves per core row.
    auto core_at = [&](Emit& b, Value* row, Value* k) {
      return b.add(b.mulc(b.add(b.mulc(b.div(row, b.i32(8)), c8), b.div(k, b.i32(8))), 64),
                   b.add(b.mulc(b.rem(row, b.i32(8)), 8), b.rem(k, b.i32(8))));
    };
    Generated g;
    const std::string kname = fmt::format("matmul_mma_{}", llm::ggml_type_name(wt));
    ir::Kernel* k = g.module.add_kernel(kname);
    k->max_threads = static_cast<int>(threads);
    // Two CTAs per SM (registers capped at 128 for 256 threads), so that one CTA's wgmma cover
    // the other's loads and barriers; one CTA of four warpgroups.
    k->min_blocks = threads > 256 ? 1 : 2;
    Emit b(*k);
    Value* w = b.param(Type::pointer(AddrSpace::kConstant, Scalar::kU8), "w");
    const bool xh16 = x_is_f16(s);
    Value* x = b.param(ty::gptr(xh16 ? Scalar::kF16 : Scalar::kF32), "x");
    Value* y = b.param(ty::gptr(Scalar::kF32), "y");
    Value* sm = b.alloc_shared(Scalar::kF16, nbuf * buf);
    // Warps 4g .. 4g + 3 (warpgroup g) own rows 64g .. 64g + 63: the mma tile geometry of 4 wgs
    // warps of 16 rows x bn tokens (C fragment j = accumulator lanes 4j .. 4j + 3).
    const MmaTile tile = mma::mma_tile(b, 4 * wgs, 1, 1, bn / 8);
    Value *tid = tile.tid, *m0 = tile.m0, *n0 = tile.n0;
    auto i32c = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };
    // Tile items: 8 consecutive threads take 8 consecutive rows of one chunk, so that their
    // 16-byte shared stores fill 8 distinct bank groups.
    Value* lw = b.add(b.rem(tid, b.i32(8)), b.mulc(b.div(tid, i32c(8 * c16)), 8));
    Value* hw = b.rem(b.div(tid, b.i32(8)), i32c(c16));
    Value* lx = b.add(b.rem(tid, b.i32(8)), b.mulc(b.div(tid, i32c(8 * c8)), 8));
    Value* qx = b.rem(b.div(tid, b.i32(8)), i32c(c8));
    const int64_t nwi = c16 * bm / threads, nxi = c8 * bn / threads;
    const int64_t wstep = threads / c16, xstep = threads / c8;  // rows between a thread's items
    const bool packed = (wt == GgmlType::Q4_0 || wt == GgmlType::Q4_K) && L.planar;
    // The items' places in a buffer (the same in every k step).
    std::vector<Value*> wat, xat;
    for (int64_t j = 0; j < nwi; ++j)
      for (int h = 0; h < 2; ++h) wat.push_back(core_at(b, b.addc(lw, j * wstep), b.addc(b.mulc(hw, 16), 8 * h)));
    for (int64_t j = 0; j < nxi; ++j) xat.push_back(core_at(b, b.addc(lx, bm + j * xstep), b.mulc(qx, 8)));
    // The loads of the tile at k offset kk, issued now; the returned function unpacks them (the
    // values to store, weights then activations) and store_vals writes those into a buffer.
    using Vals = std::vector<Value*>;
    auto stage = [&](Value* kk) -> std::function<Vals()> {
      std::vector<Unpack16> wv;
      for (int64_t j = 0; j < nwi; ++j) {
        Value* r = b.min(b.add(m0, b.addc(lw, j * wstep)), i32c(n_out - 1));
        wv.push_back(dequant16_split(b, wt, w, L, r, b.add(kk, b.mulc(hw, 16)), packed));
      }
      std::vector<Value*> xv;
      for (int64_t j = 0; j < nxi; ++j) {
        Value* t = b.min(b.add(n0, b.addc(lx, j * xstep)), i32c(nt - 1));
        Value* xi = b.add(b.mul(t, i32c(n_in)), b.add(kk, b.mulc(qx, 8)));
        if (xh16) {
          xv.push_back(b.load(x, xi, Type::vector(Scalar::kF16, 8), 16));
        } else {
          xv.push_back(b.load(x, xi, Type::vector(Scalar::kF32, 4), 16));
          xv.push_back(b.load(x, b.addc(xi, 4), Type::vector(Scalar::kF32, 4), 16));
        }
      }
      return [&, wv, xv]() {
        Vals vals;
        for (int64_t j = 0; j < nwi; ++j) {
          std::vector<Value*> v = wv[static_cast<size_t>(j)]();
          for (int h = 0; h < 2; ++h) {
            std::vector<Value*> lanes;
            for (int i = 0; i < 8; ++i) {
              Value* e = v[static_cast<size_t>(8 * h + i)];
              lanes.push_back(packed ? e : b.convert(e, ty::f16));
            }
            vals.push_back(b.build(lanes));
          }
        }
        for (int64_t j = 0; j < nxi; ++j) {
          if (xh16) {
            vals.push_back(xv[static_cast<size_t>(j)]);
            continue;
          }
          std::vector<Value*> lanes;
          for (int p = 0; p < 2; ++p)
            for (int i = 0; i < 4; ++i) lanes.push_back(b.convert(b.extract(xv[static_cast<size_t>(2 * j + p)], i), ty::f16));
          vals.push_back(b.build(lanes));
        }
        return vals;
      };
    };
    auto store_vals = [&](Value* base, const Vals& vals) {
      for (size_t i = 0; i < vals.size(); ++i)
        b.store(sm, b.add(base, i < wat.size() ? wat[i] : xat[i - wat.size()]), vals[i], 16);
    };
    store_vals(b.i32(0), stage(b.i32(0))());
    b.fence_async_shared();
    b.barrier();
    // This warpgroup's A tile and the B tile, as half offsets within a buffer.
    Value* a_off = b.mulc(b.div(tid, b.i32(128)), 8 * c8 * 64);
    const int64_t b_off = bm / 8 * c8 * 64;
    Value* init = b.const_float(Type::vector(Scalar::kF32, static_cast<int>(bn / 2)), 0.0);
    auto acc = b.for_loop(b.i32(0), i32c(n_in), i32c(kt), {init}, [&](Value* kk, std::span<Value* const> it) {
      Value* next = b.min(b.add(kk, i32c(kt)), i32c(n_in - kt));
      auto store_next = stage(next);
      Value* par = b.andc(b.div(kk, i32c(kt)), 1);
      Value* cur = nbuf == 1 ? b.i32(0) : b.mulc(par, buf);
      Value* nxt = nbuf == 1 ? b.i32(0) : b.mulc(b.sub(b.i32(1), par), buf);
      Value* a = it[0];
      b.wgmma_fence();
      for (int64_t ks = 0; ks < c16; ++ks)
        a = b.wgmma(sm, b.add(cur, b.addc(a_off, 128 * ks)), sm, b.addc(cur, b_off + 128 * ks), a, lbo, sbo);
      b.wgmma_commit();
      const Vals vals = store_next();  // unpacked while the tensor cores run
      if (nbuf == 1) {
        b.wgmma_wait(0);
        b.barrier();
      }
      store_vals(nxt, vals);
      b.fence_async_shared();
      if (nbuf == 2) b.wgmma_wait(0);
      b.barrier();
      return std::vector<Value*>{a};
    });
    mma::store_c(b, tile, mma::wgmma_c_fragments(b, acc[0]), y, n_out, nt);
    g.launches.push_back(mma::mma_launch(kname, tile, n_out, nt));
    return g;
  }

  // PTX, Hopper's warpgroup MMA with the weights in registers (wgmma = 1, wg_rs = 1; Q4_0 and Q4_K
  // in the planar layout, others take generate_wgmma): wg_m warpgroups of 64 weight rows x wg_n
  // tokens per CTA. The raw weight bytes (16-byte pieces of nibbles, and per row the Q4_0 scales
  // or the Q4_K super-block header) and the f16 activation tile stream into shared memory with
  // cp.async through `stages` buffers, so the loads of stages - 1 k steps are in flight while one
  // is multiplied; each thread unpacks its own A fragments (its two rows' nibbles into f16 pairs,
  // scaled) straight into registers, and wgmma_rs multiplies them with the activation tile (8 x 8
  // core matrices). Nothing is dequantized into shared memory, and one barrier per k step. The
  // grid runs the token tiles of a row tile side by side, so each weight tile streams from memory
  // once.
  Result<Generated> generate_wgmma_rs(const Shape& s, const Schedule& sch) const {
    const auto& [wt, f, n_in, n_out, nt, L] = Problem(s);
    const bool q4k = wt == GgmlType::Q4_K;
    const int64_t wgs = sch.count("wg_m") ? sch.at("wg_m") : 2, bn = sch.count("wg_n") ? sch.at("wg_n") : 128;
    const int64_t bm = 64 * wgs, threads = 128 * wgs;
    const int64_t stages = sch.count("stages") ? sch.at("stages") : 2;
    int64_t kt = sch.count("k_tile") ? sch.at("k_tile") : 64;
    // Per row and stage the header: Q4_0 the 2 kt / 32 bytes of scales, at least 4 (cp.async's
    // smallest copy: with one block per stage, the even-odd pair of scales that holds it); Q4_K
    // the 16-byte super-block header (a stage never spans two super-blocks).
    auto hdr_bytes = [&](int64_t k) { return q4k ? int64_t{16} : std::max<int64_t>(4, k / 16); };
    // Above 48 KiB the stages live in dynamic shared memory (up to 227 KiB per CTA on Hopper).
    auto stage_bytes = [&](int64_t k) { return bn * k * 2 + bm * k / 2 + bm * hdr_bytes(k); };
    while (kt > (q4k ? 64 : 32) && stages * stage_bytes(kt) > ir::kMaxSharedBytes) kt /= 2;
    if ((wt != GgmlType::Q4_0 && !q4k) || !L.planar || !x_is_f16(s) || n_in % kt || n_in % 64 || kt > 128 || (q4k && kt < 64) ||
        stages * stage_bytes(kt) > ir::kMaxSharedBytes || (n_out + bm - 1) / bm > 65535)
      return generate_wgmma(s, sch);
    const int64_t c16 = kt / 16, c8 = kt / 8, nq = kt / 32, hb = hdr_bytes(kt);
    const int64_t xsz = bn * kt, wsz = bm * kt / 2, dsz = bm * hb;  // per stage: halves, bytes, bytes
    const int64_t nxi = bn * c8, nwi = bm * nq;                      // 16-byte copies per stage
    if (nxi % threads || (nwi > threads ? nwi % threads : threads % nwi)) return generate_wgmma(s, sch);
    Generated g;
    const std::string kname = fmt::format("matmul_mma_{}", llm::ggml_type_name(wt));
    ir::Kernel* k = g.module.add_kernel(kname);
    k->max_threads = static_cast<int>(threads);
    // Two CTAs per SM where their registers (128 each at 256 threads) and shared memory (228 KiB
    // per SM, 1 KiB of it reserved per CTA) fit: one's wgmma run while the other unpacks or waits.
    // Four warpgroups: one CTA, whose warpgroups cover each other the same way.
    k->min_blocks = threads <= 256 && 2 * (stages * stage_bytes(kt) + 1024) <= 228 * 1024 ? 2 : 1;
    Emit b(*k);
    Value* w = b.param(Type::pointer(AddrSpace::kConstant, Scalar::kU8), "w");
    Value* x = b.param(ty::gptr(Scalar::kF16), "x");
    Value* y = b.param(ty::gptr(Scalar::kF32), "y");
    Value* sx = b.alloc_shared(Scalar::kF16, stages * xsz);
    Value* sw = b.alloc_shared(Scalar::kU8, stages * wsz);
    Value* sd = b.alloc_shared(Scalar::kU8, stages * dsz);
    MmaTile tile = mma::mma_tile(b, 4 * wgs, 1, 1, bn / 8);
    // Token tiles along grid x, row tiles along y (see above).
    tile.n0 = b.mul(b.block_id(Mode::kX), b.i32(static_cast<int32_t>(bn)));
    tile.m0 = b.mul(b.block_id(Mode::kY), b.i32(static_cast<int32_t>(bm)));
    Value *tid = tile.tid, *m0 = tile.m0, *n0 = tile.n0, *gq = tile.gq, *qq = tile.qq;
    auto i32c = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };
    // A weight row's nq 16-byte pieces sit in slots pc ^ (row / (8 / nq)) % nq of its 16 nq
    // bytes, so that the 8 rows of a fragment load fall in 8 different bank groups.
    auto wslot = [&](Value* row, Value* pc) {
      if (nq == 1) return b.mulc(row, 16);
      return b.add(b.mulc(row, 16 * nq), b.mulc(b.bit_xor(pc, b.rem(b.div(row, i32c(8 / nq)), i32c(nq))), 16));
    };
    // Copies: activation chunk c = (token group, k chunk, token in group) with 8 consecutive
    // threads on 8 tokens of one chunk; weight copy c = (row, piece), the row's pieces adjacent.
    std::vector<std::pair<Value*, Value*>> xcp;  // (shared half index, global token row clamped)
    std::vector<Value*> xk;                      // the chunk's k offset within the tile
    for (int64_t j = 0; j < nxi / threads; ++j) {
      Value* c = b.addc(tid, j * threads);
      Value* tok = b.add(b.mulc(b.div(c, i32c(8 * c8)), 8), b.rem(c, b.i32(8)));
      Value* kc = b.rem(b.div(c, b.i32(8)), i32c(c8));
      Value* at = b.add(b.mulc(b.add(b.mulc(b.div(tok, b.i32(8)), c8), kc), 64), b.mulc(b.rem(tok, b.i32(8)), 8));
      xcp.push_back({at, b.min(b.add(n0, tok), i32c(nt - 1))});
      xk.push_back(b.mulc(kc, 8));
    }
    const int64_t wper = std::max<int64_t>(1, nwi / threads);
    Value* wvalid = nwi < threads ? b.cmp(Mode::kLt, tid, i32c(nwi)) : nullptr;
    const int64_t nb = n_in / f.block_elems, nblk_all = n_out * nb;
    auto issue = [&](Value* slot, Value* kk) {
      for (size_t j = 0; j < xcp.size(); ++j) {
        Value* gi = b.add(b.mul(xcp[j].second, i32c(n_in)), b.add(kk, xk[j]));
        b.cp_async(sx, b.add(b.mulc(slot, xsz), xcp[j].first), x, gi, 16);
      }
      auto weights = [&] {
        for (int64_t j = 0; j < wper; ++j) {
          Value* c = b.addc(tid, j * threads);
          Value* row = b.div(c, i32c(nq));
          Value* pc = b.rem(c, i32c(nq));
          Value* r = b.convert(b.min(b.add(m0, row), i32c(n_out - 1)), ty::i64);
          // Q4_0: block kk / 32 + pc; Q4_K: super-block kk / 256, piece (kk % 256) / 32 + pc.
          Value *src, *hsrc;
          if (q4k) {
            Value* gb = b.add(b.mul(r, b.i64(nb)), b.convert(b.div(kk, b.i32(256)), ty::i64));
            Value* piece = b.convert(b.add(b.div(b.rem(kk, b.i32(256)), b.i32(32)), pc), ty::i64);
            src = b.mul(b.add(b.mul(piece, b.i64(nblk_all)), gb), b.i64(16));
            hsrc = b.add(b.i64(8 * 16 * nblk_all), b.mul(gb, b.i64(16)));
          } else {
            Value* gb = b.add(b.mul(r, b.i64(nb)), b.convert(b.add(b.div(kk, b.i32(32)), pc), ty::i64));
            src = b.mul(gb, b.i64(16));
            // hb bytes of scales from an even block (rows hold an even number of blocks).
            hsrc = b.add(b.i64(16 * nblk_all), b.mul(nq == 1 ? b.bit_and(gb, b.i64(-2)) : gb, b.i64(2)));
          }
          b.cp_async(sw, b.add(b.mulc(slot, wsz), wslot(row, pc)), w, src, 16);
          Value* first = b.cmp(Mode::kEq, pc, b.i32(0));  // one header copy per row
          b.if_then_else(first, {}, [&] {
            b.cp_async(sd, b.add(b.mulc(slot, dsz), b.mulc(row, hb)), w, hsrc, static_cast<int>(hb));
            return std::vector<Value*>{};
          });
        }
      };
      if (wvalid) {
        b.if_then_else(wvalid, {}, [&] {
          weights();
          return std::vector<Value*>{};
        });
      } else {
        weights();
      }
      b.cp_async_commit();
    };
    // This thread's fragment rows (of the CTA tile) and its bytes within a piece.
    Value* wrow = b.add(b.mulc(b.div(tid, b.i32(32)), 16), gq);
    Value* sh = b.convert(b.mulc(b.rem(qq, b.i32(2)), 16), ty::u32);
    Value* wq_lo = b.mulc(b.div(qq, b.i32(2)), 4);  // byte of the word with bytes 2q, 2q + 1
    const Type h2 = Type::vector(Scalar::kF16, 2);
    Value* bias = b.const_float(h2, q4k ? 1024.0 : 1032.0);
    for (int64_t p = 0; p < stages - 1; ++p) issue(i32c(p), i32c(std::min(p * kt, n_in - kt)));
    Value* init = b.const_float(Type::vector(Scalar::kF32, static_cast<int>(bn / 2)), 0.0);
    const int64_t lbo = 128, sbo = c8 * 128;
    auto acc = b.for_loop(b.i32(0), i32c(n_in / kt), b.i32(1), {init}, [&](Value* step, std::span<Value* const> it) {
      Value* slot = b.rem(step, i32c(stages));
      b.cp_async_wait(static_cast<int>(stages - 2));
      b.fence_async_shared();
      b.barrier();
      // The buffer of k step step + stages - 1 was last read in step - 1, which every thread
      // finished (its wgmma waited for) before the barrier.
      issue(b.rem(b.addc(step, stages - 1), i32c(stages)), b.mulc(b.min(b.addc(step, stages - 1), i32c(n_in / kt - 1)), kt));
      // A fragments. Per piece pc and row (wrow, wrow + 8): the words with bytes 2q, 2q + 1 and
      // 2q + 8, 2q + 9, shifted down to the low half. A nibble n OR 0x6400 is the half 1024 + n:
      // Q4_0 (block pc: low nibbles k step 2 pc, high 2 pc + 1): minus 1032 is n - 8, times d;
      // Q4_K (piece pc of pair pc / 2 holds values 16 (pc % 2) .. of its two sub-blocks: low
      // nibbles the first, k step 4 (pc / 2) + pc % 2, high the second, 2 more): minus 1024 is n,
      // times d sc minus dmin m of the sub-block.
      Value* wbase = b.mulc(slot, wsz);
      Value* dbase = b.mulc(slot, dsz);
      std::vector<Value*> frags(static_cast<size_t>(c16));
      // Scales per row half and sub-block of the stage (f16x2 of one value twice).
      std::array<std::vector<std::pair<Value*, Value*>>, 2> scl;
      for (int h = 0; h < 2; ++h) {
        Value* row = b.addc(wrow, 8 * h);
        if (q4k) {
          Value* hdr = b.load_at(sd, b.add(dbase, b.mulc(row, 16)), Type::vector(Scalar::kU32, 4), 16);
          for (int64_t pi = 0; pi < nq / 2; ++pi) {
            Value* pp = b.addc(b.div(b.rem(b.mulc(step, kt), b.i32(256)), b.i32(64)), pi);
            for (const auto& [ds, dm] : mma::q4k_pair_scales(b, hdr, pp)) {
              Value* dsh = b.convert(ds, ty::f16), *dmh = b.convert(dm, ty::f16);
              scl[h].push_back({b.build({dsh, dsh}), b.build({dmh, dmh})});
            }
          }
        } else {
          // One block per stage: its scale is the odd one of the pair for odd steps.
          Value* dodd = nq == 1 ? b.mulc(b.andc(step, 1), 2) : b.i32(0);
          for (int64_t pc = 0; pc < nq; ++pc) {
            Value* d = b.bitcast(b.load_at(sd, b.add(b.add(dbase, dodd), b.addc(b.mulc(row, hb), 2 * pc)), ty::u16, 2), ty::f16);
            scl[h].push_back({b.build({d, d}), nullptr});
          }
        }
      }
      for (int64_t pc = 0; pc < nq; ++pc) {
        std::array<std::array<Value*, 2>, 2> part_lo{}, part_hi{};  // [row half][word] for low / high nibbles
        for (int h = 0; h < 2; ++h) {
          Value* at = b.add(wbase, b.add(wslot(b.addc(wrow, 8 * h), i32c(pc)), wq_lo));
          const auto& sc_lo = scl[h][static_cast<size_t>(q4k ? 2 * (pc / 2) : pc)];
          const auto& sc_hi = scl[h][static_cast<size_t>(q4k ? 2 * (pc / 2) + 1 : pc)];
          for (int wd = 0; wd < 2; ++wd) {
            Value* word = b.load_at(sw, b.addc(at, 8 * wd), ty::u32, 4);
            Value* v = b.andc(b.shr(word, sh), 0xFFFF);
            Value* u = b.bit_or(v, b.shlc(v, 8));
            auto half2 = [&](Value* bits, const std::pair<Value*, Value*>& sc) {
              Value* hv = b.mul(b.sub(b.bitcast(b.bit_or(b.andc(bits, 0x000F000F), b.c(ty::u32, 0x64006400)), h2), bias), sc.first);
              return sc.second ? b.sub(hv, sc.second) : hv;
            };
            part_lo[h][wd] = half2(u, sc_lo);
            part_hi[h][wd] = half2(b.shrc(u, 4), sc_hi);
          }
        }
        for (int hi = 0; hi < 2; ++hi) {
          const auto& pr = hi ? part_hi : part_lo;
          std::vector<Value*> words;  // (g, 2q), (g + 8, 2q), (g, 2q + 8), (g + 8, 2q + 8)
          for (int wd = 0; wd < 2; ++wd)
            for (int h = 0; h < 2; ++h) words.push_back(b.bitcast(pr[h][wd], ty::u32));
          const int64_t ks = q4k ? 4 * (pc / 2) + 2 * hi + pc % 2 : 2 * pc + hi;
          frags[static_cast<size_t>(ks)] = b.build(words);
        }
      }
      Value* a = it[0];
      Value* xb = b.mulc(slot, xsz);
      b.wgmma_fence();
      for (int64_t ks = 0; ks < c16; ++ks) a = b.wgmma_rs(frags[static_cast<size_t>(ks)], sx, b.addc(xb, 128 * ks), a, lbo, sbo);
      b.wgmma_commit();
      b.wgmma_wait(0);
      return std::vector<Value*>{a};
    });
    mma::store_c(b, tile, mma::wgmma_c_fragments(b, acc[0]), y, n_out, nt);
    KernelLaunch l = mma::mma_launch(kname, tile, n_out, nt);
    l.grid = {static_cast<uint32_t>((nt + bn - 1) / bn), static_cast<uint32_t>((n_out + bm - 1) / bm), 1};
    g.launches.push_back(l);
    return g;
  }

  // PTX, pipelined: CTA tile of 16 warp_m_tiles warps_m weight rows x 8 warp_n_tiles warps_n
  // tokens through two shared-memory buffers. While the warps multiply the tile in one buffer,
  // the loads of the next tile are in flight; they are dequantized into the other buffer after
  // the mma work, so each k step costs one barrier and no exposed load latency. ldsm = 1 loads
  // the mma fragments with ldmatrix (one instruction per 16 x 16 A tile or pair of 8-token B
  // tiles instead of four or two 32-bit shared loads).
  Result<Generated> generate_pipe(const Shape& s, const Schedule& sch) const {
    const auto& [wt, f, n_in, n_out, nt, L] = Problem(s);
    const int64_t wm = sch.at("warps_m"), wn = sch.at("warps_n");
    const int64_t mtiles = sch.count("warp_m_tiles") ? sch.at("warp_m_tiles") : 2;
    const int64_t ntiles = sch.count("warp_n_tiles") ? sch.at("warp_n_tiles") : 4;
    const bool ldsm = sch.count("ldsm") && sch.at("ldsm") == 1;
    const int64_t bm = 16 * mtiles * wm, bn = 8 * ntiles * wn, threads = 32 * wm * wn;
    int64_t kt = sch.count("k_tile") ? sch.at("k_tile") : 32;
    if (n_in % kt) return invalid_argument("matmul_mma: k_tile={} does not divide n_in={}", kt, n_in);
    // pipeline = 2: one buffer; the next tile waits in registers until every warp has finished
    // with the current one (two barriers per k step), which leaves room for larger tiles.
    const int64_t nbuf = sch.at("pipeline") == 2 ? 1 : 2;
    // The buffers, (bm + bn) rows of k_tile + 8 halves each, within 48 KiB of static shared memory.
    while (kt > 16 && nbuf * (bm + bn) * (kt + 8) * 2 > 48 * 1024) kt /= 2;
    const int64_t stride = kt + 8, c16 = kt / 16, c8 = kt / 8;
    // Tiles that the threads cannot split evenly (their loads must be unrolled to be in flight
    // together) or that do not fit: the unpipelined kernel, so every schedule of the space builds.
    // So do tiles whose registers would not fit the 64 K of an SM for one CTA (about 1.5 per
    // accumulator plus 35, from ptxas at the 8B shapes: 64 accumulators take 127-130, 128 take
    // 214-242; a launch that asks for more fails with too many resources requested).
    const int64_t regs = 3 * mtiles * ntiles * 4 / 2 + 35;
    if ((c16 * bm) % threads || (c8 * bn) % threads || threads % c16 || threads % c8 ||
        nbuf * (bm + bn) * stride * 2 > 48 * 1024 || regs * threads > 65536)
      return generate_mma(s, sch);
    const int64_t buf = (bm + bn) * stride;  // halves per buffer: weights [bm][stride], then activations [bn][stride]
    Generated g;
    const std::string kname = fmt::format("matmul_mma_{}", llm::ggml_type_name(wt));
    ir::Kernel* k = g.module.add_kernel(kname);
    Emit b(*k);
    Value* w = b.param(Type::pointer(AddrSpace::kConstant, Scalar::kU8), "w");
    const bool xh16 = x_is_f16(s);
    Value* x = b.param(ty::gptr(xh16 ? Scalar::kF16 : Scalar::kF32), "x");
    Value* y = b.param(ty::gptr(Scalar::kF32), "y");
    Value* sm = b.alloc_shared(Scalar::kF16, nbuf * buf);
    const MmaTile tile = mma::mma_tile(b, wm, wn, mtiles, ntiles);
    Value *tid = tile.tid, *lane = tile.lane, *gq = tile.gq, *qq = tile.qq;
    Value *m0 = tile.m0, *n0 = tile.n0, *wm0 = tile.wm0, *wn0 = tile.wn0;
    const Type f16x2 = Type::vector(Scalar::kF16, 2);
    auto i32c = [&](int64_t v) { return b.i32(static_cast<int32_t>(v)); };
    // This thread's tile items: weight item j is (row lw + j threads / c16, chunk hw), activation
    // item j is (token lx + j threads / c8, chunk qx).
    Value* lw = b.div(tid, i32c(c16));
    Value* hw = b.rem(tid, i32c(c16));
    Value* lx = b.div(tid, i32c(c8));
    Value* qx = b.rem(tid, i32c(c8));
    const int64_t nwi = c16 * bm / threads, nxi = c8 * bn / threads;
    const bool packed = (wt == GgmlType::Q4_0 || wt == GgmlType::Q4_K) && L.planar;
    // Loads of the tile at k offset kk; the returned function writes it into the buffer at `base`.
    auto stage = [&](Value* kk) -> std::function<void(Value*)> {
      std::vector<Unpack16> wv;
      for (int64_t j = 0; j < nwi; ++j) {
        Value* r = b.min(b.add(m0, b.addc(lw, j * threads / c16)), i32c(n_out - 1));
        wv.push_back(dequant16_split(b, wt, w, L, r, b.add(kk, b.mulc(hw, 16)), packed));
      }
      std::vector<Value*> xv;
      for (int64_t j = 0; j < nxi; ++j) {
        Value* t = b.min(b.add(n0, b.addc(lx, j * threads / c8)), i32c(nt - 1));
        Value* xi = b.add(b.mul(t, i32c(n_in)), b.add(kk, b.mulc(qx, 8)));
        if (xh16) {
          xv.push_back(b.load(x, xi, Type::vector(Scalar::kF16, 8), 16));
        } else {
          xv.push_back(b.load(x, xi, Type::vector(Scalar::kF32, 4), 16));
          xv.push_back(b.load(x, b.addc(xi, 4), Type::vector(Scalar::kF32, 4), 16));
        }
      }
      return [&, wv, xv](Value* base) {
        Value* pw = b.offset(sm, b.add(base, b.add(b.mulc(lw, stride), b.mulc(hw, 16))));
        for (int64_t j = 0; j < nwi; ++j) {
          std::vector<Value*> v = wv[static_cast<size_t>(j)]();
          for (int h = 0; h < 2; ++h) {
            std::vector<Value*> lanes;
            for (int i = 0; i < 8; ++i) {
              Value* e = v[static_cast<size_t>(8 * h + i)];
              lanes.push_back(packed ? e : b.convert(e, ty::f16));
            }
            b.store(pw, i32c(j * threads / c16 * stride + 8 * h), b.build(lanes), 16);
          }
        }
        Value* px = b.offset(sm, b.add(base, b.add(i32c(bm * stride), b.add(b.mulc(lx, stride), b.mulc(qx, 8)))));
        for (int64_t j = 0; j < nxi; ++j) {
          Value* val;
          if (xh16) {
            val = xv[static_cast<size_t>(j)];
          } else {
            std::vector<Value*> lanes;
            for (int p = 0; p < 2; ++p)
              for (int i = 0; i < 4; ++i) lanes.push_back(b.convert(b.extract(xv[static_cast<size_t>(2 * j + p)], i), ty::f16));
            val = b.build(lanes);
          }
          b.store(px, i32c(j * threads / c8 * stride), val, 16);
        }
      };
    };
    stage(b.i32(0))(b.i32(0));
    b.barrier();
    std::vector<Value*> init(static_cast<size_t>(mtiles * ntiles), b.const_float(Type::vector(Scalar::kF32, 4), 0.0));
    // Per-lane fragment addresses within a buffer (ldmatrix: lane l names row l % 8 of matrix l / 8).
    Value* l8 = b.rem(lane, b.i32(8));
    Value* a_row = b.add(wm0, b.add(l8, b.mulc(b.rem(b.div(lane, b.i32(8)), b.i32(2)), 8)));
    Value* a_off = b.add(b.mulc(a_row, stride), b.mulc(b.div(lane, b.i32(16)), 8));
    Value* b_tok = b.add(wn0, b.add(l8, b.mulc(b.div(lane, b.i32(16)), 8)));
    Value* b_off = b.add(i32c(bm * stride), b.add(b.mulc(b_tok, stride), b.mulc(b.rem(b.div(lane, b.i32(8)), b.i32(2)), 8)));
    // lds: lane holds row g (+8) at k 2q (+8) of A, token g at k 2q (+8) of B.
    Value* a_off2 = b.add(b.mulc(b.add(wm0, gq), stride), b.mulc(qq, 2));
    Value* b_off2 = b.add(i32c(bm * stride), b.add(b.mulc(b.add(wn0, gq), stride), b.mulc(qq, 2)));
    auto acc = b.for_loop(b.i32(0), i32c(n_in), i32c(kt), init, [&](Value* kk, std::span<Value* const> it) {
      Value* next = b.min(b.add(kk, i32c(kt)), i32c(n_in - kt));
      auto store_next = stage(next);
      Value* par = b.andc(b.div(kk, i32c(kt)), 1);
      Value* cur = nbuf == 1 ? b.i32(0) : b.mulc(par, buf);
      Value* nxt = nbuf == 1 ? b.i32(0) : b.mulc(b.sub(b.i32(1), par), buf);
      std::vector<Value*> a(it.begin(), it.end());
      Value* pa = b.offset(sm, b.add(cur, ldsm ? a_off : a_off2));
      Value* pb = b.offset(sm, b.add(cur, ldsm ? b_off : b_off2));
      for (int64_t ks = 0; ks < c16; ++ks) {
        std::vector<Value*> af(static_cast<size_t>(mtiles)), bf(static_cast<size_t>(ntiles));
        for (int64_t mt = 0; mt < mtiles; ++mt) {
          if (ldsm) {
            af[static_cast<size_t>(mt)] = b.ldmatrix(pa, i32c(16 * mt * stride + 16 * ks));
            continue;
          }
          std::vector<Value*> l8v;
          for (int p = 0; p < 4; ++p) {  // (row g, k), (row g+8, k), (row g, k+8), (row g+8, k+8)
            Value* pr = b.load(pa, i32c((16 * mt + 8 * (p % 2)) * stride + 16 * ks + 8 * (p / 2)), f16x2, 4);
            l8v.push_back(b.extract(pr, 0));
            l8v.push_back(b.extract(pr, 1));
          }
          af[static_cast<size_t>(mt)] = b.build(l8v);
        }
        for (int64_t n8 = 0; n8 < ntiles; ++n8) {
          if (ldsm) {
            if (n8 % 2) continue;
            Value* pair = b.ldmatrix(pb, i32c(8 * n8 * stride + 16 * ks));
            for (int h = 0; h < 2; ++h)
              bf[static_cast<size_t>(n8 + h)] = b.build({b.extract(pair, 4 * h), b.extract(pair, 4 * h + 1),
                                                          b.extract(pair, 4 * h + 2), b.extract(pair, 4 * h + 3)});
            continue;
          }
          std::vector<Value*> l4;
          for (int p = 0; p < 2; ++p) {  // (k, token g), (k + 8, token g)
            Value* pr = b.load(pb, i32c(8 * n8 * stride + 16 * ks + 8 * p), f16x2, 4);
            l4.push_back(b.extract(pr, 0));
            l4.push_back(b.extract(pr, 1));
          }
          bf[static_cast<size_t>(n8)] = b.build(l4);
        }
        for (int64_t mt = 0; mt < mtiles; ++mt)
          for (int64_t n8 = 0; n8 < ntiles; ++n8) {
            const size_t i = static_cast<size_t>(mt * ntiles + n8);
            a[i] = b.mma(af[static_cast<size_t>(mt)], bf[static_cast<size_t>(n8)], a[i]);
          }
      }
      if (nbuf == 1) b.barrier();
      store_next(nxt);
      b.barrier();
      return a;
    });
    mma::store_c(b, tile, acc, y, n_out, nt);
    g.launches.push_back(mma::mma_launch(kname, tile, n_out, nt));
    return g;
  }

  // PTX: CTA tile of 16 warp_m_tiles warps_m weight rows x 32 warps_n tokens; per k step of
  // k_tile, the weight tile (f16, [rows][k_tile + 8 pad]) and activation tile (f16, [tokens]
  // [k_tile + 8 pad]) go through shared memory; each warp owns warp_m_tiles x 4 mma tiles
  // (16 warp_m_tiles rows x 32 tokens).
  Result<Generated> generate_mma(const Shape& s, const Schedule& sch) const {
    const auto& [wt, f, n_in, n_out, nt, L] = Problem(s);
    const int64_t wm = sch.at("warps_m"), wn = sch.at("warps_n");
    const int64_t mtiles = sch.count("warp_m_tiles") ? sch.at("warp_m_tiles") : 2;  // 16-row mma tiles per warp
    const int64_t bm = 16 * mtiles * wm, bn = 32 * wn, threads = 32 * wm * wn;
    int64_t kt = sch.count("k_tile") ? sch.at("k_tile") : 32;  // schedules stored before the knob: 32
    if (n_in % kt) return invalid_argument("matmul_mma: k_tile={} does not divide n_in={}", kt, n_in);
    // Halves per tile row: k_tile + 8 (rows start 16-byte aligned; consecutive rows shift by 4
    // banks, so the 8 rows x 4 lanes of a fragment load hit 32 different banks). Large CTA tiles
    // take a narrower k_tile where both tiles would not fit the 48 KiB of static shared memory.
    while (kt > 32 && (bm + bn) * (kt + 8) * 2 > 48 * 1024) kt /= 2;
    const int64_t stride = kt + 8;
    Generated g;
    const std::string kname = fmt::format("matmul_mma_{}", llm::ggml_type_name(wt));
    ir::Kernel* k = g.module.add_kernel(kname);
    Emit b(*k);
    Value* w = b.param(Type::pointer(AddrSpace::kConstant, Scalar::kU8), "w");
    const bool xh16 = x_is_f16(s);
    Value* x = b.param(ty::gptr(xh16 ? Scalar::kF16 : Scalar::kF32), "x");
    Value* y = b.param(ty::gptr(Scalar::kF32), "y");
    Value* ws = b.alloc_shared(Scalar::kF16, bm * stride);
    Value* xs = b.alloc_shared(Scalar::kF16, bn * stride);
    const MmaTile tile = mma::mma_tile(b, wm, wn, mtiles, 4);  // warps of 16 mtiles rows x 32 tokens
    Value *tid = tile.tid, *gq = tile.gq, *qq = tile.qq, *m0 = tile.m0, *n0 = tile.n0, *wm0 = tile.wm0, *wn0 = tile.wn0;
    Value* nthreads = b.i32(static_cast<int32_t>(threads));
    const Type f16x2 = Type::vector(Scalar::kF16, 2);
    std::vector<Value*> init(static_cast<size_t>(4 * mtiles), b.const_float(Type::vector(Scalar::kF32, 4), 0.0));
    const int64_t c16 = kt / 16, c8 = kt / 8;  // 16-element weight chunks, 8-element activation chunks per row
    // The threads' share of `count` tile items: unrolled when it divides evenly, so that every
    // item's global loads are in flight before the first one is needed (a loop would wait for
    // each item's loads in turn).
    auto each_item = [&](int64_t count, const std::function<void(Value*)>& body) {
      if (count % threads == 0) {
        for (int64_t j = 0; j < count / threads; ++j) body(b.addc(tid, static_cast<int32_t>(j * threads)));
        return;
      }
      b.for_loop(tid, b.i32(static_cast<int32_t>(count)), nthreads, {}, [&](Value* item, std::span<Value* const>) {
        body(item);
        return std::vector<Value*>{};
      });
    };
    auto acc = b.for_loop(b.i32(0), b.i32(static_cast<int32_t>(n_in)), b.i32(static_cast<int32_t>(kt)), init,
                          [&](Value* kk, std::span<Value* const> it) {
      // Weight tile: item = (row, 16-element chunk of the k_tile).
      each_item(c16 * bm, [&](Value* item) {
        Value* lr = b.div(item, b.i32(static_cast<int32_t>(c16)));
        Value* hf = b.rem(item, b.i32(static_cast<int32_t>(c16)));
        Value* r = b.min(b.add(m0, lr), b.i32(static_cast<int32_t>(n_out - 1)));
        std::vector<Value*> v = dequant16(b, wt, w, L, r, b.add(kk, b.mulc(hf, 16)));
        for (int h = 0; h < 2; ++h) {
          std::vector<Value*> lanes;
          for (int i = 0; i < 8; ++i) lanes.push_back(b.convert(v[static_cast<size_t>(8 * h + i)], ty::f16));
          b.store(ws, b.add(b.mulc(lr, stride), b.addc(b.mulc(hf, 16), 8 * h)), b.build(lanes), 16);
        }
      });
      // Activation tile: item = (token, 8-element chunk of the k_tile).
      each_item(c8 * bn, [&](Value* item) {
        Value* lt = b.div(item, b.i32(static_cast<int32_t>(c8)));
        Value* qt = b.rem(item, b.i32(static_cast<int32_t>(c8)));
        Value* t = b.min(b.add(n0, lt), b.i32(static_cast<int32_t>(nt - 1)));
        Value* xi = b.add(b.mul(t, b.i32(static_cast<int32_t>(n_in))), b.add(kk, b.mulc(qt, 8)));
        if (xh16) {  // 8 halves, one 16-byte load, stored as they are
          b.store(xs, b.add(b.mulc(lt, stride), b.mulc(qt, 8)), b.load(x, xi, Type::vector(Scalar::kF16, 8), 16), 16);
          return;
        }
        Value* xv = b.load(x, xi, Type::vector(Scalar::kF32, 4), 16);
        Value* xv2 = b.load(x, b.addc(xi, 4), Type::vector(Scalar::kF32, 4), 16);
        std::vector<Value*> lanes;
        for (int i = 0; i < 4; ++i) lanes.push_back(b.convert(b.extract(xv, i), ty::f16));
        for (int i = 0; i < 4; ++i) lanes.push_back(b.convert(b.extract(xv2, i), ty::f16));
        b.store(xs, b.add(b.mulc(lt, stride), b.mulc(qt, 8)), b.build(lanes), 16);
      });
      b.barrier();
      std::vector<Value*> a(it.begin(), it.end());
      for (int ks = 0; ks < static_cast<int>(c16); ++ks) {
        Value* kc = b.addc(b.mulc(qq, 2), 16 * ks);  // this lane's first k column
        std::vector<Value*> af(static_cast<size_t>(mtiles));
        for (int mt = 0; mt < mtiles; ++mt) {
          Value* rA = b.add(wm0, b.addc(gq, 16 * mt));
          std::vector<Value*> l8;
          for (int p = 0; p < 4; ++p) {  // pairs: (row g, k), (row g+8, k), (row g, k+8), (row g+8, k+8)
            Value* idx = b.add(b.mulc(b.addc(rA, 8 * (p % 2)), stride), b.addc(kc, 8 * (p / 2)));
            Value* pr = b.load(ws, idx, f16x2, 4);
            l8.push_back(b.extract(pr, 0));
            l8.push_back(b.extract(pr, 1));
          }
          af[mt] = b.build(l8);
        }
        for (int nt8 = 0; nt8 < 4; ++nt8) {
          Value* tB = b.add(wn0, b.addc(gq, 8 * nt8));
          std::vector<Value*> l4;
          for (int p = 0; p < 2; ++p) {  // (k, token g), (k + 8, token g)
            Value* pr = b.load(xs, b.add(b.mulc(tB, stride), b.addc(kc, 8 * p)), f16x2, 4);
            l4.push_back(b.extract(pr, 0));
            l4.push_back(b.extract(pr, 1));
          }
          Value* bf = b.build(l4);
          for (int mt = 0; mt < mtiles; ++mt)
            a[static_cast<size_t>(mt * 4 + nt8)] = b.mma(af[static_cast<size_t>(mt)], bf, a[static_cast<size_t>(mt * 4 + nt8)]);
        }
      }
      b.barrier();
      return a;
    });
    mma::store_c(b, tile, acc, y, n_out, nt);
    g.launches.push_back(mma::mma_launch(kname, tile, n_out, nt));
    return g;
  }
};

}  // namespace

const OpSpec& matmul_mma_op() {
  static const MatmulMmaOp op;
  return op;
}

}  // namespace loom::kernels
