// The fused decode lowering (rms_norm_q8 with the residual add, add_rms_norm, the attention
// writing the o projection's quantized activations) on the HRX cpu driver, whose kernels are
// bit-identical to the reference: with the fusions on (as the GPU has them by default) an
// engine's logits must equal the reference engine's bit for bit, and
// the profile must show the fused ops in place of the adds and the separate norm + quantize.
// The matvec_gpu groups are GPU-only in the lowering; tests/ops/matvec_gpu_fused_test.cpp checks
// their kernels on both targets.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loom/base/options.h"
#include "loom/engine/engine.h"
#include "loom/engine/model_path.h"
#include "loom/exec/hrx_backend.h"
#include "loom/kernels/op_spec.h"
#include "loom/model/model.h"
#include "loom/model/synth.h"

namespace loom {
namespace {

class FusedLowering : public testing::TestWithParam<std::string> {};

TEST_P(FusedLowering, CpuLogitsStayBitIdenticalWithTheFusedOps) {
  // $LOOM_SCHEDULE is read once per process: when another test of this binary (tests/ops/
  // schedule_override_test.cpp) has set overrides, the engine would build with them. ctest runs
  // each test in its own process.
  for (const char* op : {"matvec", "matmul", "quantize_act", "rms_norm", "rms_norm_q8", "add_rms_norm"}) {
    auto forced = kernels::schedule_override(op);
    if (!forced.ok() || !forced->empty())
      GTEST_SKIP() << "LOOM_SCHEDULE overrides are set in this process (run this test alone or under ctest)";
  }
  std::string path;
  if (GetParam() == "synth-q4_0") {
    path = testing::TempDir() + "/fused_lowering_smollm2_q4_0.gguf";
    if (!std::filesystem::exists(path)) {
      llm::SynthOptions o;
      o.shape = "smollm2-135m";
      o.quant = "q4_0";
      auto r = llm::write_synthetic_model(o, path);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
    }
  } else {
    path = (std::filesystem::path(llm::default_model_path()).parent_path() / GetParam()).string();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not fetched (tools/setup.sh fetches it): " << path;
  }
  auto model = llm::Model::load(path, false);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  // The test holds the cpu kernels to the reference's bits, so it asks for the exact prompt
  // matmuls: by default Q4_0 prompts sum whole blocks in integers (LOOM_CPU_MATMUL=auto).
  opt::ScopedFlag exact(opt::Opt::kCpuMatmul, "exact");
  ASSERT_TRUE(exact.status().ok()) << exact.status().message();

  exec::set_profiling(true);  // read when the backend is made
  exec::profile_reset();
  llm::EngineOptions ref_opt;
  ref_opt.n_ctx = 128;
  ref_opt.n_batch = 32;
  llm::EngineOptions hrx_opt = ref_opt;
  hrx_opt.make_backend = [] {
    exec::HrxBackendOptions o;
    o.device = "cpu";
    o.n_threads = 2;
    o.fuse = exec::FuseOptions{};  // the fusions the GPU gets by default
    return exec::make_hrx_backend(o);
  };
  auto ref = llm::Engine::create(**model, ref_opt);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  auto hrx = llm::Engine::create(**model, hrx_opt);
  ASSERT_TRUE(hrx.ok()) << hrx.status().to_string();

  // A prompt of 24 tokens (all logits), then 6 single-token steps.
  const int64_t V = (*model)->config().n_vocab;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 30; ++i) tokens.push_back(static_cast<int32_t>((i * 7919 + 13) % std::min<int64_t>(V, 20000)));
  ASSERT_TRUE((*ref)->decode(std::span(tokens).first(24), true).ok());
  auto st = (*hrx)->decode(std::span(tokens).first(24), true);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(std::memcmp((*ref)->all_logits().data(), (*hrx)->all_logits().data(), static_cast<size_t>(24 * V) * 4), 0)
      << "prompt logits differ from the reference";
  for (size_t t = 24; t < tokens.size(); ++t) {
    ASSERT_TRUE((*ref)->decode(std::span(tokens).subspan(t, 1)).ok());
    st = (*hrx)->decode(std::span(tokens).subspan(t, 1));
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_EQ(std::memcmp((*ref)->logits(), (*hrx)->logits(), static_cast<size_t>(V) * 4), 0)
        << "logits differ from the reference at position " << t;
  }

  // The decode steps ran the fused ops: rms_norm_q8 for the two norms of every layer (and the
  // output norm where the output matrix reads Q8_0/Q8_1), at most one separate add per step
  // (the last residual, when add_rms_norm may not take it).
  std::map<std::string, double> per_step;
  const double steps = static_cast<double>(exec::profile_steps("decode"));
  ASSERT_GT(steps, 0);
  for (const exec::OpProfile& o : exec::profile_snapshot())
    if (o.step == "decode") per_step[o.op] = static_cast<double>(o.launches) / steps;
  const double layers = static_cast<double>((*model)->config().n_layer);
  if (GetParam() != "synth-q4_0") {
    // A real file mixes weight types (a norm whose readers want different activation formats
    // keeps rms_norm + quantize_act): only that the fused ops ran.
    EXPECT_GT(per_step["rms_norm_q8"], 0);
    return;
  }
  EXPECT_GE(per_step["rms_norm_q8"], 2 * layers);
  EXPECT_LE(per_step["rms_norm_q8"], 2 * layers + 1);
  // The attention writes the o projection's blocks itself (out_q): quantize_act is left for
  // the swiglu output of each layer and the output norm unless rms_norm_q8 took it.
  EXPECT_EQ(per_step["quantize_act"], layers + 1 - (per_step["rms_norm_q8"] - 2 * layers))
      << "swiglu per layer, and the output norm unless rms_norm_q8 took it";
  EXPECT_LE(per_step["add"], 1.0);
  EXPECT_LE(per_step["rms_norm"], 1.0);
  exec::set_profiling(false);
}

INSTANTIATE_TEST_SUITE_P(Models, FusedLowering, testing::Values("synth-q4_0", "SmolLM2-135M-Instruct-Q4_1.gguf"),
                         [](const testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace loom
