// Latency of the decode step's small kernels on a CUDA device: each op call
// (all launches of one op) is checked against its reference (check_op), then replayed from a
// captured graph of 200 calls with programmatic dependent launch on, as the decode step runs
// them; microseconds per call are the median of 15 replays. Schedules side by side: the
// session-5 forms of rms_norm_q8 next to the vec form's warps and splits, the norm + quantize_act
// pair it replaces, attention_decode with and without the quantized output (out_q) next to
// quantize_act. JSON lines go to the file named by LOOM_SMALL_BENCH.
//   LOOM_SMALL_BENCH=/tmp/small.jsonl test_ops --gtest_filter='SmallKernelBench.*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/hrx/runtime.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/kernels/op_harness.h"
#include "loom/kernels/op_list.h"
#include "compiled_op.h"
#include "gpu_time_util.h"

namespace loom::kernels {
namespace {

struct Case {
  std::string label;
  std::string op;
  Shape shape;
  Schedule sch;  // empty: the op's default
};

// Median microseconds per call of `per_graph` calls replayed from one graph.
Result<double> time_calls(const OpSpec& op, const Shape& shape, const Schedule& sch, const hrx::Device& dev,
                          hrx::Stream& s) {
  LOOM_ASSIGN_OR_RETURN(CompiledOp c, compile_op(op, shape, sch, dev));
  const std::vector<ArgSpec> specs = op.args(shape);
  std::vector<HostArg> host(specs.size());
  std::mt19937_64 rng(5);
  op.fill_inputs(shape, rng, host);
  std::vector<hrx::Buffer> bufs;
  for (size_t i = 0; i < specs.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(hrx::Buffer b, hrx::Buffer::alloc(dev, static_cast<uint64_t>(std::max<int64_t>(specs[i].bytes, 4))));
    if (!host[i].bytes.empty()) LOOM_RETURN_IF_ERROR(s.copy_h2d(b, 0, host[i].bytes.data(), host[i].bytes.size()));
    bufs.push_back(std::move(b));
  }
  LOOM_RETURN_IF_ERROR(s.synchronize());
  const int per_graph = 200;
  LOOM_RETURN_IF_ERROR(s.begin_capture());
  for (int it = 0; it < per_graph; ++it)
    if (Status st = c.enqueue(s, [&](int ai) -> const hrx::Buffer& { return bufs[static_cast<size_t>(ai)]; }); !st.ok()) {
      (void)s.end_capture();
      return st;
    }
  LOOM_ASSIGN_OR_RETURN(hrx::Graph graph, s.end_capture());
  return time_graph(graph, s, dev, per_graph, 15);
}

Schedule sch_norm(int64_t warps, int64_t regs, int64_t vec, int64_t split) {
  return {{"warps", warps}, {"regs", regs}, {"vec", vec}, {"split", split}};
}

std::vector<Case> cases() {
  using elt::make_shape;
  std::vector<Case> out;
  auto norm = [](int64_t n, int64_t dtype) {
    return make_shape({{"n_rows", 1}, {"n", n}, {"has_weight", 1}, {"dtype", dtype}, {"add", 1}}, {{"eps_f32", 1e-5f}});
  };
  // Llama-3-8B row, Q8_0: the regs form (16 warps), then the vec form.
  out.push_back({"8B norm q8_0 regs w16", "rms_norm_q8", norm(4096, 8), sch_norm(16, 1, 0, 0)});
  for (int64_t w : {2, 4, 8, 16})
    out.push_back({fmt::format("8B norm q8_0 vec w{} split", w), "rms_norm_q8", norm(4096, 8), sch_norm(w, 0, 1, 1)});
  out.push_back({"8B norm q8_0 vec w16 one CTA", "rms_norm_q8", norm(4096, 8), sch_norm(16, 0, 1, 0)});
  // Q8_K (the Q4_K_M-like model): the vec form vs add_rms_norm + quantize_act.
  for (int64_t w : {2, 4, 8, 16})
    out.push_back({fmt::format("8B norm q8_K vec w{} split", w), "rms_norm_q8", norm(4096, 15), sch_norm(w, 0, 1, 1)});
  out.push_back({"8B add_rms_norm (unfused Q8_K path, part 1)", "add_rms_norm",
                 make_shape({{"n_rows", 1}, {"n", 4096}, {"has_weight", 1}}, {{"eps_f32", 1e-5f}}), {}});
  out.push_back({"8B quantize_act q8_K (unfused Q8_K path, part 2)", "quantize_act",
                 {{{"n_in", 4096}, {"n_tokens", 1}, {"dtype", 15}}}, {}});
  out.push_back({"8B quantize_act q8_0", "quantize_act", {{{"n_in", 4096}, {"n_tokens", 1}, {"dtype", 8}}}, {}});
  // SmolLM2 row (576).
  out.push_back({"SmolLM2 norm q8_0 regs w2", "rms_norm_q8", norm(576, 8), sch_norm(2, 1, 0, 0)});
  for (int64_t w : {1, 2, 4})
    out.push_back({fmt::format("SmolLM2 norm q8_0 vec w{} split", w), "rms_norm_q8", norm(576, 8), sch_norm(w, 0, 1, 1)});
  out.push_back({"SmolLM2 norm q8_0 vec w8 one CTA", "rms_norm_q8", norm(576, 8), sch_norm(8, 0, 1, 0)});
  out.push_back({"SmolLM2 quantize_act q8_0", "quantize_act", {{{"n_in", 576}, {"n_tokens", 1}, {"dtype", 8}}}, {}});
  // Decode attention, plain and with the quantized output (context up to 512 cells).
  auto att = [](int64_t H, int64_t HK, int64_t D, float scale, int64_t q) {
    Shape s = make_shape({{"n_tokens", 1}, {"n_head", H}, {"n_head_kv", HK}, {"head_dim", D}, {"n_seq", 1},
                          {"n_ctx", 512}, {"n_swa", 0}},
                         {{"scale_f32", scale}, {"softcap_f32", 0.0f}});
    if (q) s.dims["out_q"] = q;
    return s;
  };
  out.push_back({"8B attention_decode", "attention_decode", att(32, 8, 128, 0.0883883f, 0), {}});
  out.push_back({"8B attention_decode + q8_0", "attention_decode", att(32, 8, 128, 0.0883883f, 8), {}});
  out.push_back({"8B attention_decode + q8_K", "attention_decode", att(32, 8, 128, 0.0883883f, 15), {}});
  out.push_back({"SmolLM2 attention_decode", "attention_decode", att(9, 3, 64, 0.125f, 0), {}});
  out.push_back({"SmolLM2 attention_decode + q8_0", "attention_decode", att(9, 3, 64, 0.125f, 8), {}});
  return out;
}

TEST(SmallKernelBench, DecodeSmallKernels) {
  const char* path = std::getenv("LOOM_SMALL_BENCH");
  if (!path) GTEST_SKIP() << "a GPU benchmark: set LOOM_SMALL_BENCH=FILE (JSON lines) on a machine with a CUDA device";
  auto dev = hrx::Device::open("cuda");
  if (!dev.ok()) GTEST_SKIP() << "no usable CUDA device: " << dev.status().to_string();
  auto od = OpDevice::open("cuda");
  ASSERT_TRUE(od.ok()) << od.status().to_string();
  auto stream = hrx::Stream::create(*dev);
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  const bool pdl = stream->set_dependent_launch(true);
  std::ofstream out(path, std::ios::app);
  for (const Case& c : cases()) {
    const OpSpec* op = find_op(c.op);
    ASSERT_NE(op, nullptr) << c.op;
    const Schedule sch = c.sch.empty() ? op->default_schedule(c.shape, dev->target()) : c.sch;
    // Correctness first (out_q shapes: the f32 output against the reference; the blocks are
    // held to quantize_act's bits by attention_quant_test.cpp).
    if (!c.shape.dims.count("out_q")) {
      CheckResult r = check_op(*op, c.shape, sch, **od, 11);
      EXPECT_TRUE(r.passed) << c.label << ": " << r.message;
      if (!r.passed) continue;
    }
    auto us = time_calls(*op, c.shape, sch, *dev, *stream);
    ASSERT_TRUE(us.ok()) << c.label << ": " << us.status().to_string();
    std::printf("%-52s %-40s %7.2f us\n", c.label.c_str(), schedule_key(sch).c_str(), *us);
    out << nlohmann::json{{"what", c.label}, {"op", c.op}, {"shape", c.shape.key()}, {"schedule", schedule_key(sch)},
                          {"us_per_call", *us}, {"pdl", pdl}, {"device", dev->props().name}}
               .dump()
        << "\n";
  }
}

}  // namespace
}  // namespace loom::kernels
