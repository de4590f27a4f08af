// matmul's tiled cpp kernel (rows x tokens in registers, tok_tile > 1) must give exactly the
// bytes of llm::ref::matmul (llm::ref::vec_dot per output) for every weight type matmul accepts,
// at token counts that leave a partial last token tile (which moves back over the tile before
// it) or are below the tile, and row counts that leave single rows after the row tiles.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include <fmt/format.h>

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
  auto dev = hrx::Device::open("cpu");
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  auto stream = hrx::Stream::create(*dev);
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  Fixture fx{std::move(*dev), std::move(*stream)};
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
    expect_bit_identical(fx, *op, s, {Schedule{{"rows_per_block", 8}, {"row_tile", 4}, {"tok_tile", 4}}}, rng);
  }
  // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, the K-quants Q2_K..Q6_K, IQ4_NL, IQ4_XS, F16, BF16 at least.
  EXPECT_GE(types, 14);

  // The prompt formats of the engine's files under the other tile shapes: 2 x 2 (the last item: a
  // tile and a single row), one row x 8 tokens (8 > 7 tokens: one tile of all 7), and 2 tokens
  // under a 4 x 8 tile.
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const Shape s{{{"n_in", 512}, {"n_out", 19}, {"n_tokens", 7}, {"wtype", static_cast<int64_t>(t)}}};
    expect_bit_identical(fx, *op, s,
                         {Schedule{{"rows_per_block", 16}, {"row_tile", 2}, {"tok_tile", 2}},
                          Schedule{{"rows_per_block", 4}, {"row_tile", 1}, {"tok_tile", 8}}},
                         rng);
    const Shape two{{{"n_in", 512}, {"n_out", 19}, {"n_tokens", 2}, {"wtype", static_cast<int64_t>(t)}}};
    expect_bit_identical(fx, *op, two, {Schedule{{"rows_per_block", 4}, {"row_tile", 4}, {"tok_tile", 8}}}, rng);
  }
}

}  // namespace
}  // namespace loom::kernels
