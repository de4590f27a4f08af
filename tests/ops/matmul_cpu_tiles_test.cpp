// matmul's tiled cpp kernel (rows x tokens in registers, tok_tile > 1) must give exactly the
// bytes of llm::ref::matmul (llm::ref::vec_dot per output) for every weight type matmul accepts,
// at token counts that leave a partial last token tile (which moves back over the tile before
// it) or are below the tile, and row counts that leave single rows after the row tiles. So must
// the token-lane kernel's exact form (tok_lanes 1, prompts from 32 tokens); its summed form
// (tok_lanes 2) is within matmul's tolerance and gives a token the same bits whatever tokens
// follow it in the launch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "loom/base/options.h"
#include "loom/gguf/ggml_types.h"
#include "loom/hrx/runtime.h"
#include "loom/kernels/op_list.h"
#include "run_op_util.h"

namespace loom::kernels {
namespace {

using llm::GgmlType;

struct Fixture {
  hrx::Device dev;
  hrx::Stream stream;
};

// The cpu device and a stream on it.
void open_cpu(std::optional<Fixture>& fx) {
  auto dev = hrx::Device::open("cpu");
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  auto stream = hrx::Stream::create(*dev);
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  fx.emplace(Fixture{std::move(*dev), std::move(*stream)});
}

// Runs matmul at `s` under each schedule and compares its bytes with the reference's.
void expect_bit_identical(Fixture& fx, const OpSpec& op, const Shape& s, const std::vector<Schedule>& schedules,
                          std::mt19937_64& rng) {
  std::vector<HostArg> host(op.args(s).size());
  op.fill_inputs(s, rng, host);
  ASSERT_TRUE(op.reference(s, host).ok());
  const std::vector<uint8_t>& want = host[2].bytes;
  for (const Schedule& sch : schedules) {
    SCOPED_TRACE(fmt::format("{} {}", s.key(), schedule_key(sch)));
    auto got = run_op_bytes(fx.dev, fx.stream, op, s, sch,
                            {std::span<const uint8_t>(host[0].bytes), std::span<const uint8_t>(host[1].bytes)});
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ((*got)[0].size(), want.size());
    size_t first = 0;
    while (first < want.size() && (*got)[0][first] == want[first]) ++first;
    EXPECT_EQ(first, want.size()) << "first differing byte " << first << " of " << want.size();
  }
}

TEST(MatmulCpuTiles, BitIdenticalToReference) {
  std::optional<Fixture> opened;
  open_cpu(opened);
  if (HasFatalFailure()) return;
  Fixture& fx = *opened;
  const OpSpec* op = find_op("matmul");
  ASSERT_NE(op, nullptr);
  std::mt19937_64 rng(std::random_device{}());

  // The default schedule must be a tiled one (else this test would not reach the tiled kernel
  // in the engine's configuration).
  const Shape probe{{{"n_in", 512}, {"n_out", 19}, {"n_tokens", 7}, {"wtype", static_cast<int64_t>(GgmlType::Q4_1)}}};
  EXPECT_GT(op->default_schedule(probe, ir::TargetKind::kCpp).at("tok_tile"), 1);

  // Every weight type matmul accepts: 4 x 4 tiles over 19 rows in items of 8 (the last item: 3
  // single rows), 7 tokens (the second token tile starts at token 3).
  int types = 0;
  for (uint32_t id = 0; id < 40; ++id) {
    if (!llm::ggml_type_info(id)) continue;
    const Shape s{{{"n_in", 512}, {"n_out", 19}, {"n_tokens", 7}, {"wtype", static_cast<int64_t>(id)}}};
    if (!op->validate(s).ok()) continue;
    ++types;
    expect_bit_identical(fx, *op, s, {Schedule{{"rows_per_block", 8}, {"row_tile", 4}, {"tok_tile", 4}, {"tok_lanes", 0}}}, rng);
  }
  // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, the K-quants Q2_K..Q6_K, IQ4_NL, IQ4_XS, F16, BF16 at least.
  EXPECT_GE(types, 14);

  // The prompt formats of the engine's files under the other tile shapes: 2 x 2 (the last item: a
  // tile and a single row), one row x 8 tokens (8 > 7 tokens: one tile of all 7), and 2 tokens
  // under a 4 x 8 tile.
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const Shape s{{{"n_in", 512}, {"n_out", 19}, {"n_tokens", 7}, {"wtype", static_cast<int64_t>(t)}}};
    expect_bit_identical(fx, *op, s,
                         {Schedule{{"rows_per_block", 16}, {"row_tile", 2}, {"tok_tile", 2}, {"tok_lanes", 0}},
                          Schedule{{"rows_per_block", 4}, {"row_tile", 1}, {"tok_tile", 8}, {"tok_lanes", 0}}},
                         rng);
    const Shape two{{{"n_in", 512}, {"n_out", 19}, {"n_tokens", 2}, {"wtype", static_cast<int64_t>(t)}}};
    expect_bit_identical(fx, *op, two, {Schedule{{"rows_per_block", 4}, {"row_tile", 4}, {"tok_tile", 8}, {"tok_lanes", 0}}}, rng);
  }
}

TEST(MatmulCpuTokenLanes, ExactLanesBitIdenticalSummedLanesWithinToleranceAndPerToken) {
  std::optional<Fixture> opened;
  open_cpu(opened);
  if (HasFatalFailure()) return;
  Fixture& fx = *opened;
  const OpSpec* op = find_op("matmul");
  ASSERT_NE(op, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  auto shape = [](GgmlType t, int64_t nt, int64_t n_in = 512) {
    return Shape{{{"n_in", n_in}, {"n_out", 70}, {"n_tokens", nt}, {"wtype", static_cast<int64_t>(t)}}};
  };
  // The engine's configuration ($LOOM_CPU_MATMUL unset: auto): summed token lanes for Q4_0 prompts
  // of 32 tokens and more (in K-chunks where the scratch does not hold a row's blocks), exact
  // token lanes for the other formats (Q4_1, Q5_0, Q5_1, Q8_0) where the scratch holds a row's
  // blocks, the tiles otherwise.
  auto lanes = [&](const Shape& s) { return op->default_schedule(s, ir::TargetKind::kCpp).at("tok_lanes"); };
  EXPECT_EQ(lanes(shape(GgmlType::Q4_0, 32)), 2);
  EXPECT_EQ(lanes(shape(GgmlType::Q4_1, 32)), 1);
  EXPECT_EQ(lanes(shape(GgmlType::Q5_0, 128)), 1);
  EXPECT_EQ(lanes(shape(GgmlType::Q5_1, 512)), 1);
  EXPECT_EQ(lanes(shape(GgmlType::Q4_0, 31)), 0);
  EXPECT_EQ(lanes(shape(GgmlType::Q8_0, 128)), 1);
  EXPECT_EQ(lanes(shape(GgmlType::Q8_0, 128, 8192)), 0);
  EXPECT_EQ(lanes(shape(GgmlType::Q4_K, 128, 512)), 0);
  EXPECT_EQ(lanes(shape(GgmlType::Q4_0, 128, 8192)), 2);  // 256 blocks: K-chunks
  EXPECT_EQ(lanes(shape(GgmlType::Q4_1, 128, 8192)), 0);  // exact lanes in K-chunks: no faster than the tiles
  {
    // LOOM_CPU_MATMUL=exact keeps every format's bits (Q4_0 back to exact lanes); summed sums all.
    opt::ScopedFlag exact(opt::Opt::kCpuMatmul, "exact");
    ASSERT_TRUE(exact.status().ok());
    EXPECT_EQ(lanes(shape(GgmlType::Q4_0, 32)), 1);
  }
  {
    opt::ScopedFlag summed(opt::Opt::kCpuMatmul, "summed");
    EXPECT_EQ(lanes(shape(GgmlType::Q4_1, 32)), 2);
  }
  EXPECT_FALSE(op->generate(shape(GgmlType::Q4_K, 64), {{"rows_per_block", 64}, {"row_tile", 1}, {"tok_tile", 8}, {"tok_lanes", 1}},
                            ir::TargetKind::kCpp).ok());

  // Exact lanes: the reference's bytes, under the default and other tiles (70 rows: partial row
  // tiles and items; 37 tokens: the last token chunk moves back over the one before); 4096-element
  // rows (128 blocks) go in K-chunks through the accumulator scratch.
  // (Each schedule and shape is a kernel the host compiler builds: the other tiles on Q4_0, Q4_1
  // and Q8_0 only, the K-chunks under the default tile.)
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0}) {
    std::vector<Schedule> sch = {Schedule{{"rows_per_block", 64}, {"row_tile", 1}, {"tok_tile", 8}, {"tok_lanes", 1}}};
    if (t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q8_0) {  // Q8_0: clamped per row
      sch.push_back(Schedule{{"rows_per_block", 8}, {"row_tile", 2}, {"tok_tile", 16}, {"tok_lanes", 1}});
      sch.push_back(Schedule{{"rows_per_block", 16}, {"row_tile", 4}, {"tok_tile", 16}, {"tok_lanes", 1}});
    }
    expect_bit_identical(fx, *op, shape(t, 37), sch, rng);
    expect_bit_identical(fx, *op, shape(t, 37, 4096), {sch[0]}, rng);
  }

  // Summed lanes: within matmul's tolerance, and a token's outputs do not depend on the tokens
  // after it (the first 21 of 37 alone give the same bytes).
  const std::vector<Schedule> summed = {
      {{"rows_per_block", 64}, {"row_tile", 2}, {"tok_tile", 16}, {"tok_lanes", 2}},
      {{"rows_per_block", 8}, {"row_tile", 4}, {"tok_tile", 8}, {"tok_lanes", 2}}};
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0})
  for (int64_t n_in : {512, 8192}) {
    // 8192: K-chunks, on Q4_0 only.
    if (n_in == 8192 && t != GgmlType::Q4_0) continue;
    const Shape big = shape(t, 37, n_in), small = shape(t, 21, n_in);
    std::vector<HostArg> host(op->args(big).size());
    op->fill_inputs(big, rng, host);
    ASSERT_TRUE(op->reference(big, host).ok());
    std::vector<float> want(host[2].bytes.size() / 4);
    std::memcpy(want.data(), host[2].bytes.data(), host[2].bytes.size());
    const Tolerance tol = op->tolerance(big);
    const size_t small_x = static_cast<size_t>(op->args(small)[1].bytes);
    for (const Schedule& sch : summed) {
      SCOPED_TRACE(fmt::format("{} {}", big.key(), schedule_key(sch)));
      auto got = run_op(fx.dev, fx.stream, *op, big, sch,
                        {std::span<const uint8_t>(host[0].bytes), std::span<const uint8_t>(host[1].bytes)});
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      const std::vector<float>& y = (*got)[0];
      ASSERT_EQ(y.size(), want.size());
      int bad = 0;
      for (size_t i = 0; i < y.size(); ++i)
        if (!(std::fabs(y[i] - want[i]) <= tol.atol + tol.rtol * std::fabs(want[i])) && bad++ < 3)
          ADD_FAILURE() << "y[" << i << "] = " << y[i] << ", reference " << want[i];
      EXPECT_EQ(bad, 0);
      auto part = run_op(fx.dev, fx.stream, *op, small, sch,
                         {std::span<const uint8_t>(host[0].bytes), std::span<const uint8_t>(host[1].bytes).first(small_x)});
      ASSERT_TRUE(part.ok()) << part.status().to_string();
      EXPECT_EQ(std::memcmp((*part)[0].data(), y.data(), (*part)[0].size() * 4), 0)
          << "the first 21 tokens' outputs depend on the tokens after them";
    }
  }
}

}  // namespace
}  // namespace loom::kernels
