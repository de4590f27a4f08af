// attention_decode with out_q (the attention writes the o projection's Q8_0/Q8_1/Q8_K
// blocks itself, one quantize_act launch less per layer): the blocks must be exactly
// llm::ref::quantize_activation of the f32 output of the same launch, and that output exactly the
// plain op's with the same schedule. Runs on the cpu (CI) and on cuda when there is a device.
#include <gtest/gtest.h>

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

// The inputs of a full argument list (run_op_bytes takes the input buffers only).
std::vector<std::span<const uint8_t>> inputs_of(const OpSpec& op, const Shape& shape, const std::vector<HostArg>& host) {
  std::vector<std::span<const uint8_t>> in;
  const std::vector<ArgSpec> specs = op.args(shape);
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].role == ArgRole::kInput) in.emplace_back(host[i].bytes.data(), host[i].bytes.size());
  return in;
}

class AttentionQuant : public testing::TestWithParam<std::string> {};

TEST_P(AttentionQuant, BlocksAreQuantizeActOfTheSameOutput) {
  auto dev = hrx::Device::open(GetParam());
  if (!dev.ok()) GTEST_SKIP() << "device " << GetParam() << " not available: " << dev.status().to_string();
  auto stream = hrx::Stream::create(*dev);
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  const OpSpec* op = find_op("attention_decode");
  ASSERT_NE(op, nullptr);
  const ir::TargetKind target = dev->target();
  std::mt19937_64 rng(std::random_device{}());
  int checked = 0;
  for (const Shape& base : op->test_shapes()) {
    for (int64_t q : {8, 9, 15}) {
      Shape s = base;
      s.dims["out_q"] = q;
      if (!op->validate(s).ok()) continue;  // rows that are not whole blocks (Q8_K needs 256)
      // The default schedule and two random ones (splits 1 included: the GPU combines anyway).
      std::vector<Schedule> scheds = {op->default_schedule(s, target)};
      for (int i = 0; i < 2; ++i) scheds.push_back(random_schedule(op->schedule_space(s, target), rng));
      for (const Schedule& sch : scheds) {
        SCOPED_TRACE(fmt::format("{} {} {}", GetParam(), s.key(), schedule_key(sch)));
        std::vector<HostArg> host(op->args(s).size());
        op->fill_inputs(s, rng, host);
        auto fused = run_op_bytes(*dev, *stream, *op, s, sch, inputs_of(*op, s, host));
        ASSERT_TRUE(fused.ok()) << fused.status().to_string();
        ASSERT_EQ(fused->size(), 2u);  // out, xq
        const std::vector<uint8_t>& out = (*fused)[0];
        const std::vector<uint8_t>& xq = (*fused)[1];
        // The plain op (no xq argument: the inputs are the same, in the same order).
        Shape plain = s;
        plain.dims.erase("out_q");
        std::vector<HostArg> plain_host;
        const std::vector<ArgSpec> fs = op->args(s);
        for (size_t i = 0; i < fs.size(); ++i)
          if (fs[i].name != "xq") plain_host.push_back(host[i]);
        auto ref_run = run_op_bytes(*dev, *stream, *op, plain, sch, inputs_of(*op, plain, plain_host));
        ASSERT_TRUE(ref_run.ok()) << ref_run.status().to_string();
        ASSERT_EQ(ref_run->size(), 1u);
        EXPECT_EQ(0, std::memcmp(out.data(), (*ref_run)[0].data(), out.size())) << "out differs from the plain op's";
        const int64_t T = s.at("n_tokens"), n = s.at("n_head") * s.at("head_dim");
        const auto type = static_cast<llm::GgmlType>(q);
        const size_t rb = llm::ref::quantized_row_bytes(type, n);
        ASSERT_EQ(xq.size(), rb * static_cast<size_t>(T));
        std::vector<uint8_t> want(xq.size());
        for (int64_t t = 0; t < T; ++t)
          llm::ref::quantize_activation(type, reinterpret_cast<const float*>(out.data()) + t * n, want.data() + t * rb, n);
        size_t first = 0;
        while (first < xq.size() && xq[first] == want[first]) ++first;
        EXPECT_EQ(first, xq.size()) << "first differing byte " << first << " of " << xq.size();
        ++checked;
      }
    }
  }
  // Q8_0 and Q8_1 on all five shapes, Q8_K on the three whose rows are whole 256-blocks; 3 schedules.
  EXPECT_EQ(checked, 13 * 3);
}

// Named by device (.../cpu, .../cuda), so that tools/gpu/run.sh ops ('*cuda*') runs the cuda case.
INSTANTIATE_TEST_SUITE_P(Devices, AttentionQuant, testing::Values("cpu", "cuda"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace loom::kernels
