// matvec_gpu over several weight matrices in one launch (the fused decode step: q|k|v and
// gate|up): each matrix's rows must get exactly the bits of its own launch with the same lanes
// per row, and the gate|up launch with the SwiGLU fused in exactly llm::ref::swiglu of those
// rows. Runs on the cpu (CI) and on cuda when there is a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "loom/gguf/ggml_types.h"
#include "loom/hrx/runtime.h"
#include "loom/kernels/op_harness.h"
#include "loom/kernels/op_list.h"
#include "loom/ref/ops_ref.h"
#include "run_op_util.h"

namespace loom::kernels {
namespace {

using llm::GgmlType;

Shape one_shape(int64_t n_in, int64_t n_out, GgmlType t, int64_t nt, bool planar = false) {
  Shape s{{{"n_in", n_in}, {"n_out", n_out}, {"n_tokens", nt}, {"wtype", static_cast<int64_t>(t)}}};
  if (planar) s.dims["planar"] = 1;  // each matrix in the planar layout (gguf/planar.h)
  return s;
}

Shape group_shape(int64_t n_in, const std::vector<int64_t>& rows, GgmlType t, int64_t nt, bool glu,
                  bool planar = false) {
  Shape s = one_shape(n_in, rows[0], t, nt, planar);
  s.dims["n_w"] = static_cast<int64_t>(rows.size());
  for (size_t m = 1; m < rows.size(); ++m) s.dims[fmt::format("n_out{}", m)] = rows[m];
  if (glu) s.dims["glu"] = 1;
  return s;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

size_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return i;
  return std::min(a.size(), b.size());
}

class MatvecGpuFused : public testing::TestWithParam<std::string> {};

TEST_P(MatvecGpuFused, EachMatrixGetsTheBitsOfItsOwnLaunch) {
  auto dev = hrx::Device::open(GetParam());
  if (!dev.ok()) GTEST_SKIP() << "device " << GetParam() << " not available: " << dev.status().to_string();
  auto stream = hrx::Stream::create(*dev);
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  const OpSpec* op = find_op("matvec_gpu");
  ASSERT_NE(op, nullptr);
  const ir::TargetKind target = dev->target();
  const bool cpu = target == ir::TargetKind::kCpp;
  struct Case {
    int64_t n_in;
    std::vector<int64_t> rows;
    GgmlType t;
    int64_t nt;
    bool glu;
    bool planar = false;
  };
  // q|k|v-like (the last CTA of each matrix short), a pair of several tokens, gate|up with the
  // SwiGLU; on the GPU also the Llama-3-8B shapes and the K-quants (the cpu's host compiler takes
  // tens of seconds per K-quant kernel).
  std::vector<Case> cases = {{576, {300, 70, 70}, GgmlType::Q4_0, 1, false},
                             {1024, {45, 33}, GgmlType::Q8_0, 3, false},
                             {576, {200, 200}, GgmlType::Q4_0, 1, true},
                             {1024, {64, 64}, GgmlType::Q8_0, 5, true},
                             {576, {300, 70, 70}, GgmlType::Q4_0, 1, false, true},
                             {576, {200, 200}, GgmlType::Q4_0, 2, true, true}};
  if (!cpu) {
    cases.push_back({4096, {4096, 1024, 1024}, GgmlType::Q4_0, 1, false});
    cases.push_back({4096, {14336, 14336}, GgmlType::Q4_0, 1, true});
    cases.push_back({4096, {4096, 1024}, GgmlType::Q4_K, 1, false});
    cases.push_back({4096, {14336, 14336}, GgmlType::Q4_K, 1, true});
    cases.push_back({576, {96, 96}, GgmlType::Q4_1, 16, true});
    cases.push_back({512, {40, 19, 19}, GgmlType::Q6_K, 4, false});
    // The planar layout at the 8B shapes (what the engine launches on cuda).
    cases.push_back({4096, {4096, 1024, 1024}, GgmlType::Q4_0, 1, false, true});
    cases.push_back({4096, {14336, 14336}, GgmlType::Q4_0, 1, true, true});
    cases.push_back({4096, {4096, 1024, 1024}, GgmlType::Q4_K, 1, false, true});
    cases.push_back({4096, {14336, 14336}, GgmlType::Q4_K, 4, true, true});
    cases.push_back({512, {40, 19, 19}, GgmlType::Q6_K, 4, false, true});
  }
  std::mt19937_64 rng(20261130);
  for (const Case& c : cases) {
    const Shape fused = group_shape(c.n_in, c.rows, c.t, c.nt, c.glu, c.planar);
    SCOPED_TRACE(fused.key());
    ASSERT_TRUE(op->validate(fused).ok()) << op->validate(fused).to_string();
    std::vector<HostArg> host(op->args(fused).size());
    op->fill_inputs(fused, rng, host);
    const size_t n_w = c.rows.size();
    std::vector<std::span<const uint8_t>> inputs;
    for (size_t m = 0; m <= n_w; ++m) inputs.emplace_back(host[m].bytes);  // weights, then xq

    // The fused launch against the op's reference (vec_dot per row; glu: ref::swiglu).
    std::vector<HostArg> want = host;
    ASSERT_TRUE(op->reference(fused, want).ok());
    const Schedule sch = op->default_schedule(fused, target);
    auto got = run_op(*dev, *stream, *op, fused, sch, inputs);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), c.glu ? size_t{1} : n_w);
    const Tolerance tol = op->tolerance(fused);
    for (size_t o = 0; o < got->size(); ++o) {
      const float* ref = reinterpret_cast<const float*>(want[n_w + 1 + o].bytes.data());
      const std::vector<float>& y = (*got)[o];
      ASSERT_EQ(y.size() * 4, want[n_w + 1 + o].bytes.size());
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_LE(std::fabs(y[i] - ref[i]), tol.atol + tol.rtol * std::fabs(ref[i]))
            << "output " << o << " [" << i << "] = " << y[i] << ", reference " << ref[i];
    }

    // Each matrix alone, with the fused launch's lanes per row (which fixes a row's order of
    // operations): the same bits.
    std::vector<std::vector<float>> alone;
    for (size_t m = 0; m < n_w; ++m) {
      const Shape s1 = one_shape(c.n_in, c.rows[m], c.t, c.nt, c.planar);
      Schedule s1s = op->default_schedule(s1, target);
      s1s["lanes_per_row"] = sch.at("lanes_per_row");
      auto y = run_op(*dev, *stream, *op, s1, s1s, {inputs[m], inputs[n_w]});
      ASSERT_TRUE(y.ok()) << y.status().to_string();
      alone.push_back(std::move((*y)[0]));
    }
    if (c.glu) {
      std::vector<float> act(alone[0].size());
      llm::ref::swiglu(alone[0].data(), alone[1].data(), act.data(), static_cast<int64_t>(act.size()));
      ASSERT_EQ(act.size() % 8, 0u) << "ref::swiglu's libm tail would not be ggml's exp";
      EXPECT_TRUE(same_bits((*got)[0], act)) << "silu(gate) * up differs at " << first_difference((*got)[0], act);
    } else {
      for (size_t m = 0; m < n_w; ++m)
        EXPECT_TRUE(same_bits((*got)[m], alone[m])) << "matrix " << m << " differs at " << first_difference((*got)[m], alone[m]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, MatvecGpuFused, testing::Values("cpu", "cuda"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace loom::kernels
