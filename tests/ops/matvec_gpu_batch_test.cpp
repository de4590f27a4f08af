// matvec_gpu for several tokens (batched decode): token t of a launch of n tokens must
// get exactly the bits of its one-token launch, for every n and for schedules that differ only in
// how the work is placed (warps, rows per thread, passes, prefetch), so that a request's greedy
// tokens do not depend on what else is in the batch. Runs on the cpu (CI) and on cuda when there
// is a CUDA device; the cooperative quantize_act layout is checked against its reference on the
// cpu here too (the op tests draw it only at random there).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "loom/gguf/ggml_types.h"
#include "loom/hrx/runtime.h"
#include "loom/kernels/op_harness.h"
#include "loom/kernels/op_list.h"
#include "run_op_util.h"

namespace loom::kernels {
namespace {

using llm::GgmlType;

// Runs the mat-vec for `shape`/`sch` with weights w and xq_bytes of activation rows; returns y.
Result<std::vector<float>> run_op(const hrx::Device& dev, hrx::Stream& s, const OpSpec& op, const Shape& shape,
                                  const Schedule& sch, const std::vector<uint8_t>& w, const uint8_t* xq,
                                  size_t xq_bytes) {
  LOOM_ASSIGN_OR_RETURN(auto out, run_op(dev, s, op, shape, sch, {std::span<const uint8_t>(w), {xq, xq_bytes}}));
  if (out.size() != 1) return internal_error("expected one output for {}", shape.key());
  return std::move(out[0]);
}

Shape mv_shape(int64_t n_in, int64_t n_out, GgmlType t, int64_t nt, bool planar = false) {
  Shape s{{{"n_in", n_in}, {"n_out", n_out}, {"n_tokens", nt}, {"wtype", static_cast<int64_t>(t)}}};
  if (planar) s.dims["planar"] = 1;  // the planar weight layout (gguf/planar.h)
  return s;
}

class MatvecGpuBatch : public testing::TestWithParam<std::string> {};

TEST_P(MatvecGpuBatch, TokenResultsDoNotDependOnTheBatch) {
  auto dev = hrx::Device::open(GetParam());
  if (!dev.ok()) GTEST_SKIP() << "device " << GetParam() << " not available: " << dev.status().to_string();
  auto stream = hrx::Stream::create(*dev);
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  const OpSpec* op = find_op("matvec_gpu");
  ASSERT_NE(op, nullptr);
  const ir::TargetKind target = dev->target();
  constexpr int64_t kTokens = 16;
  struct Case {
    int64_t n_in, n_out;
    GgmlType t;
    bool planar = false;
  };
  // One shape per activation format and unit layout, and one whose 16 staged rows do not fit in
  // shared memory at once (the kernel stages them in groups). The cpu compiles each kernel with
  // the host compiler (seconds each, K-quants tens of seconds): there Q4_1 and the K-quants,
  // whose batched kernels the op tests also run, and batches of 2 are left to the GPU run.
  const bool cpu = target == ir::TargetKind::kCpp;
  const Case cases[] = {{576, 200, GgmlType::Q4_0}, {1024, 45, GgmlType::Q8_0}, {576, 96, GgmlType::Q4_1},
                        {512, 40, GgmlType::Q4_K},  {512, 40, GgmlType::Q6_K},  {14336, 24, GgmlType::Q4_0},
                        {576, 200, GgmlType::Q4_0, true}, {512, 40, GgmlType::Q6_K, true},
                        {14336, 24, GgmlType::Q4_0, true}, {512, 40, GgmlType::Q4_K, true}};
  std::mt19937_64 rng(20261130);
  for (const Case& c : cases) {
    if (cpu && (c.t == GgmlType::Q4_1 || c.t == GgmlType::Q4_K || c.t == GgmlType::Q6_K)) continue;
    const Shape s16 = mv_shape(c.n_in, c.n_out, c.t, kTokens, c.planar);
    SCOPED_TRACE(s16.key());
    std::vector<HostArg> host(3);
    op->fill_inputs(s16, rng, host);
    const std::vector<uint8_t>& w = host[0].bytes;
    const size_t xrow = host[1].bytes.size() / kTokens;
    std::vector<HostArg> want = host;
    ASSERT_TRUE(op->reference(s16, want).ok());
    const float* ref = reinterpret_cast<const float*>(want[2].bytes.data());
    const Tolerance tol = op->tolerance(s16);

    // One token at a time, default schedule: the bits every batch must reproduce.
    const Schedule base = op->default_schedule(mv_shape(c.n_in, c.n_out, c.t, 1, c.planar), target);
    std::vector<float> alone(static_cast<size_t>(kTokens * c.n_out));
    for (int64_t t = 0; t < kTokens; ++t) {
      auto y = run_op(*dev, *stream, *op, mv_shape(c.n_in, c.n_out, c.t, 1, c.planar), base, w, host[1].bytes.data() + t * xrow, xrow);
      ASSERT_TRUE(y.ok()) << y.status().to_string();
      std::memcpy(alone.data() + t * c.n_out, y->data(), static_cast<size_t>(c.n_out) * 4);
    }
    for (int64_t i = 0; i < kTokens * c.n_out; ++i) {
      const double g = alone[static_cast<size_t>(i)], r = ref[i];
      ASSERT_TRUE(std::fabs(g - r) <= tol.atol + tol.rtol * std::fabs(r)) << "y[" << i << "] = " << g << ", reference " << r;
    }

    // Batches of 2, 5 (the last one short) and 16 tokens, with the default schedule of each
    // batch size and with one that places the work differently (same lanes per row).
    for (int64_t n : {int64_t{2}, int64_t{5}, kTokens}) {
      if (cpu && n == 2) continue;
      Schedule other = op->default_schedule(mv_shape(c.n_in, c.n_out, c.t, n, c.planar), target);
      ASSERT_EQ(other.at("lanes_per_row"), base.at("lanes_per_row")) << "the default's lanes per row depend on n_tokens";
      std::vector<Schedule> schedules = {other};
      if (n == kTokens) {
        other["warps"] = other["warps"] == 8 ? 2 : 8;
        other["rows_per_thread"] = other["rows_per_thread"] == 1 ? 2 : 1;
        other["passes"] = 2;
        other["prefetch"] = 1 - other["prefetch"];
        schedules.push_back(other);
      }
      for (const Schedule& sch : schedules) {
        for (int64_t t0 = 0; t0 < kTokens; t0 += n) {
          const int64_t cnt = std::min(n, kTokens - t0);
          auto y = run_op(*dev, *stream, *op, mv_shape(c.n_in, c.n_out, c.t, cnt, c.planar), sch, w,
                          host[1].bytes.data() + t0 * xrow, static_cast<size_t>(cnt) * xrow);
          ASSERT_TRUE(y.ok()) << y.status().to_string();
          for (int64_t t = 0; t < cnt; ++t)
            for (int64_t r = 0; r < c.n_out; ++r) {
              const float got = (*y)[static_cast<size_t>(t * c.n_out + r)];
              const float exp = alone[static_cast<size_t>((t0 + t) * c.n_out + r)];
              ASSERT_EQ(std::memcmp(&got, &exp, 4), 0)
                  << fmt::format("token {} row {} in a launch of {} tokens ({}): {} vs {} alone", t0 + t, r, cnt,
                                 schedule_key(sch), got, exp);
            }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, MatvecGpuBatch, testing::Values("cpu", "cuda"));

// The cooperative quantize_act (four elements per thread, the GPU default) on the cpu, every
// test shape, against llm::ref byte for byte (check_op's tolerance for the op is exact).
TEST(QuantizeActCoop, BitExactOnCpu) {
  auto dev = OpDevice::open("cpu", 2);
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  const OpSpec* op = find_op("quantize_act");
  ASSERT_NE(op, nullptr);
  int checked = 0;
  for (const Shape& s : op->test_shapes()) {
    const auto t = static_cast<GgmlType>(s.at("dtype"));
    if (t != GgmlType::Q8_0 && t != GgmlType::Q8_1 && t != GgmlType::Q8_K) continue;
    for (int64_t threads : {32, 128}) {
      CheckResult r = check_op(*op, s, {{"threads", threads}, {"coop", 1}}, **dev, 977 + static_cast<uint64_t>(threads));
      EXPECT_TRUE(r.passed) << r.message;
      ++checked;
    }
  }
  EXPECT_GE(checked, 12);
}

}  // namespace
}  // namespace loom::kernels
