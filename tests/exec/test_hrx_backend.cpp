// The engine on HRX kernels against the engine on the reference ops: same tokens in, logits at
// every position close, on real models (real text; KL divergence and top-1 as llama-perplexity
// measures them) and on synthetic ones (cosine similarity, top-1), on every HRX device present
// (cuda skipped with its reason when there is none).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "loom/base/options.h"
#include "loom/engine/engine.h"
#include "loom/engine/model_path.h"
#include "loom/exec/hrx_backend.h"
#include "loom/hrx/runtime.h"
#include "loom/model/model.h"
#include "loom/model/synth.h"
#include "loom/text/tokenizer.h"

namespace loom {
namespace {

struct Case {
  std::string name;   // model file under the model cache, or "synth:<shape>:<quant>"
  std::string device;
};

std::string model_file(const std::string& name) {
  if (name.rfind("synth:", 0) == 0) {
    // synth:<shape>:<quant>[:<arch>] (the arch only where it is not the shape's own).
    std::string rest = name.substr(6), arch;
    if (std::count(rest.begin(), rest.end(), ':') == 2) {
      arch = rest.substr(rest.rfind(':') + 1);
      rest = rest.substr(0, rest.rfind(':'));
    }
    const std::string shape = (arch.empty() ? "" : arch + "-") + rest.substr(0, rest.find(':'));
    const std::string quant = rest.substr(rest.find(':') + 1);
    // LOOM_SYNTH_DIR: where tools/gpu/run.sh keeps the synthetic models its bench step uses too
    // (same names, same seed), so the GPU machine writes the 8B files once.
    const char* dir = std::getenv("LOOM_SYNTH_DIR");
    const std::string path = dir ? std::string(dir) + "/synth-" + shape + "-" + quant + ".gguf"
                                 : ::testing::TempDir() + "/exec_" + shape + "_" + quant + ".gguf";
    if (!std::filesystem::exists(path)) {
      llm::SynthOptions o;
      o.arch = arch;
      o.shape = arch.empty() ? shape : shape.substr(arch.size() + 1);
      o.quant = quant;
      auto r = llm::write_synthetic_model(o, path);
      if (!r.ok()) return "";
    }
    return path;
  }
  return std::filesystem::path(llm::default_model_path()).parent_path() / name;
}

double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

// Index of the largest value and the gap to the runner-up.
std::pair<int64_t, double> top1(const float* x, int64_t n) {
  int64_t best = 0, second = -1;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) {
      second = best;
      best = i;
    } else if (second < 0 || x[i] > x[second]) {
      second = i;
    }
  }
  return {best, second < 0 ? 1e9 : static_cast<double>(x[best]) - x[second]};
}

class HrxEngine : public ::testing::TestWithParam<Case> {};

TEST_P(HrxEngine, LogitsMatchReferenceAtEveryPosition) {
  const Case& c = GetParam();
  if (c.device.rfind("cuda", 0) == 0) {
    Status cuda = hrx::Device::cuda_status();
    if (!cuda.ok()) GTEST_SKIP() << "no CUDA device: " << cuda.message();
    if (!hrx::Device::open(c.device).ok()) GTEST_SKIP() << "no CUDA device " << c.device;
  }
  // The Llama-3-8B shape: its CPU reference over 64 tokens needs minutes on a
  // 2-core machine, so it runs where the GPU is (whose host has the cores).
  if ((c.name.rfind("synth:llama3-8b", 0) == 0 || c.name.rfind("synth:qwen3-30b-a3b", 0) == 0) && c.device == "cpu")
    GTEST_SKIP() << "the 8B- and 30B-A3B-shape models run against the reference on cuda only (their CPU reference is "
                    "too slow for CI)";
  const std::string path = model_file(c.name);
  ASSERT_FALSE(path.empty()) << "could not write " << c.name;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not fetched (tools/setup.sh fetches it): " << path;
  auto model = llm::Model::load(path, false);
  ASSERT_TRUE(model.ok()) << model.status().message();

  // On the cpu driver the test holds every kernel to the reference's bits (below), so it asks for
  // the exact prompt matmuls of every format: by default Q4_0 prompts sum whole blocks in integers
  // (LOOM_CPU_MATMUL=auto), which the op tests check against the reference's tolerance and
  // test_perplexity.py against llama.cpp's own repacked path.
  std::optional<opt::ScopedFlag> exact;
  if (c.device == "cpu") {
    exact.emplace(opt::Opt::kCpuMatmul, "exact");
    ASSERT_TRUE(exact->status().ok()) << exact->status().message();
  }
  llm::EngineOptions ref_opt;
  ref_opt.n_ctx = 256;
  ref_opt.n_batch = 64;
  // The reference runs on every core the machine has (its logits do not depend on the count).
  ref_opt.n_threads = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  llm::EngineOptions hrx_opt = ref_opt;
  hrx_opt.make_backend = [dev = c.device] { return exec::make_backend(dev, 2); };
  auto ref = llm::Engine::create(**model, ref_opt);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  auto hrx = llm::Engine::create(**model, hrx_opt);
  ASSERT_TRUE(hrx.ok()) << hrx.status().message();

  // Runs `tokens` through both engines from an empty cache: the first n_batched in one call with
  // every position's logits (the prompt path), the rest one at a time (the decode path). Keeps the
  // logits of positions from `first` on.
  const int64_t V = (*model)->config().n_vocab;
  std::vector<std::vector<float>> want, got;
  auto run = [&](const std::vector<int32_t>& tokens, size_t n_batched, size_t first) {
    (*ref)->truncate(0);
    (*hrx)->truncate(0);
    const auto prompt = std::span(tokens).first(n_batched);
    ASSERT_TRUE((*ref)->decode(prompt, true).ok());
    auto st = (*hrx)->decode(prompt, true);
    ASSERT_TRUE(st.ok()) << st.message();
    for (size_t t = first; t < n_batched; ++t) {
      want.emplace_back((*ref)->all_logits().begin() + t * V, (*ref)->all_logits().begin() + (t + 1) * V);
      got.emplace_back((*hrx)->all_logits().begin() + t * V, (*hrx)->all_logits().begin() + (t + 1) * V);
    }
    for (size_t t = n_batched; t < tokens.size(); ++t) {
      ASSERT_TRUE((*ref)->decode(std::span(tokens).subspan(t, 1)).ok());
      st = (*hrx)->decode(std::span(tokens).subspan(t, 1));
      ASSERT_TRUE(st.ok()) << st.message();
      if (t >= first) {
        want.emplace_back((*ref)->logits(), (*ref)->logits() + V);
        got.emplace_back((*hrx)->logits(), (*hrx)->logits() + V);
      }
    }
  };

  const bool real = c.name.rfind("synth:", 0) != 0;
  if (real) {
    // Real weights read real text, as llama-perplexity does (tests/data/perplexity.txt, chunks of
    // 128 tokens, each from an empty cache with BOS first; the second half of each chunk scored,
    // so every scored position has at least 64 tokens of context): two chunks, each with its
    // first 96 tokens read as a prompt (in n_batch pieces) and the last 32 decoded one by one.
    // A synthetic token soup is no input for a trained model: it drives the logits to ranges
    // (Gemma 3: |diff| up to 20) where float order alone moves them far more than on text.
    std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/tests/data/perplexity.txt", std::ios::binary);
    ASSERT_TRUE(in) << "tests/data/perplexity.txt missing";
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto tok = llm::Tokenizer::from_gguf((*model)->gguf());
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    auto ids = tok->encode(text, /*add_special=*/true, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    ASSERT_GE(ids->size(), 256u);
    for (size_t chunk = 0; chunk < 2; ++chunk) {
      std::vector<int32_t> tokens(ids->begin() + chunk * 128, ids->begin() + (chunk + 1) * 128);
      if (tok->add_bos() && tok->bos_id() >= 0) tokens[0] = tok->bos_id();
      // Position 127's logits predict nothing in the chunk: scored are 64..126.
      tokens.pop_back();
      run(tokens, 96, 64);
      if (HasFatalFailure()) return;
    }
  } else {
    // 64 tokens: a prompt of 40 read in one batch (all logits), then 24 one at a time.
    std::vector<int32_t> tokens;
    for (int i = 0; i < 64; ++i) tokens.push_back(static_cast<int32_t>((i * 7919 + 13) % std::min<int64_t>(V, 20000)));
    run(tokens, 40, 0);
    if (HasFatalFailure()) return;
  }

  double max_diff = 0.0;
  for (size_t t = 0; t < want.size(); ++t)
    for (int64_t i = 0; i < V; ++i) max_diff = std::max(max_diff, static_cast<double>(std::fabs(want[t][i] - got[t][i])));

  if (real) {
    // Real weights on real text are judged as llama-perplexity judges one backend against
    // another: the KL divergence of the next-token distribution from the reference's, and how
    // often both put the same token on top. The bar is the peer's own noise: llama.cpp's CUDA
    // backend against its CPU backend on the same model files and text (H200,
    // bench/results/2026-12-04-h200-quality.json): mean KLD 0.0144 on SmolLM2-135M-Instruct Q4_1,
    // 0.0076 on gemma-3-270m Q4_K_M, the same top token at 90.9% and 94.0% of positions.
    const double max_mean_kld = c.name.find("gemma") != std::string::npos ? 0.0076 : 0.0144;
    double kld_sum = 0, kld_max = 0;
    int same_top = 0;
    std::vector<double> lw(static_cast<size_t>(V)), lg(static_cast<size_t>(V));
    auto log_softmax = [V](const std::vector<float>& x, std::vector<double>& out) {
      const double mx = *std::max_element(x.begin(), x.end());
      double sum = 0;
      for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
      const double lse = mx + std::log(sum);
      for (int64_t i = 0; i < V; ++i) out[i] = x[i] - lse;
    };
    for (size_t t = 0; t < want.size(); ++t) {
      log_softmax(want[t], lw);
      log_softmax(got[t], lg);
      double kld = 0;
      for (int64_t i = 0; i < V; ++i) kld += std::exp(lw[i]) * (lw[i] - lg[i]);
      kld_sum += kld;
      kld_max = std::max(kld_max, kld);
      same_top += top1(want[t].data(), V).first == top1(got[t].data(), V).first ? 1 : 0;
      if (std::getenv("LOOM_TEST_VERBOSE")) std::printf("position %zu KLD %.6f\n", t, kld);
    }
    const double mean_kld = kld_sum / static_cast<double>(want.size());
    const double same = static_cast<double>(same_top) / static_cast<double>(want.size());
    EXPECT_LE(mean_kld, max_mean_kld) << "mean KL divergence from the reference over " << want.size() << " positions";
    // One position far off is a bug even when the mean hides it (Loom's cuda path at its worst
    // over that text's 504 positions: 0.068 on Gemma 3).
    EXPECT_LE(kld_max, 0.25) << "worst position's KL divergence from the reference";
    EXPECT_GE(same, 0.9) << "same top token as the reference at " << same_top << " of " << want.size() << " positions";
    RecordProperty("mean_kld", std::to_string(mean_kld));
    std::printf("%s on %s: mean KLD %.6f (bar %.4f), max %.4f, same top %d/%zu, max |diff| %.3g\n", c.name.c_str(),
                c.device.c_str(), mean_kld, max_mean_kld, kld_max, same_top, want.size(), max_diff);
  } else {
    // The bar for the synthetic SmolLM2- and 8B-shape Q4_0 models on every device: cosine > 0.999 at
    // every position and the same top-1 wherever the reference's top two are more than 0.05
    // apart. On the cpu driver every model is held to bit-identity below. Elsewhere the GPU
    // kernels' other float orders (above all attention's probabilities, which the reference rounds
    // to fp16 and the online softmax cannot) start at ~1e-4 relative in layer 0; the random
    // weights of the Q4_K-like synthetic model amplify that layer by layer (H200, LOOM_DUMP_VALUES:
    // rel 1e-3 after layer 0, 1e-2 after layer 1), so it keeps a looser floor. A wrong kernel is
    // far below either.
    // A mixture of experts also picks experts by its router's top-k: where two experts' router
    // logits nearly tie, the other float order picks the other one at that position (H200,
    // tiny-swa qwen3moe: one of 64 positions at cosine 0.938, every other above 0.9994, with and
    // without fusion), as llama.cpp's CUDA and CPU backends do. Up to 2 such positions, each above
    // 0.9, pass; a wrong expert kernel is wrong at most positions.
    const bool strict = c.name == "synth:smollm2-135m:q4_0" || c.name == "synth:llama3-8b:q4_0";
    const bool moe = c.name.find("qwen3moe") != std::string::npos || c.name.find("a3b") != std::string::npos;
    const double floor = strict ? 0.999 : 0.995;
    const int max_flips = strict ? 0 : 3, max_reroutes = moe ? 2 : 0;
    double worst = 1.0;
    int flips = 0, below = 0;
    for (size_t t = 0; t < want.size(); ++t) {
      const double cs = cosine(want[t].data(), got[t].data(), V);
      worst = std::min(worst, cs);
      below += cs <= floor ? 1 : 0;
      EXPECT_GT(cs, moe ? 0.9 : floor) << "position " << t;
      if (std::getenv("LOOM_TEST_VERBOSE")) std::printf("position %zu cosine %.6f\n", t, cs);
      auto [wi, gap] = top1(want[t].data(), V);
      auto [gi, unused] = top1(got[t].data(), V);
      if (gap > 0.05 && wi != gi) {
        ++flips;
        std::printf("position %zu: top-1 %lld (reference %lld, its top-2 gap %.3f)\n", t, static_cast<long long>(gi),
                    static_cast<long long>(wi), gap);
      }
    }
    EXPECT_LE(flips, max_flips) << "top-1 differs from the reference at " << flips << " of " << want.size() << " positions";
    EXPECT_LE(below, max_reroutes) << below << " of " << want.size() << " positions at or below cosine " << floor;
    RecordProperty("worst_cosine", std::to_string(worst));
    std::printf("%s on %s: worst cosine %.6f, max |diff| %.3g over %zu positions\n", c.name.c_str(), c.device.c_str(),
                worst, max_diff, want.size());
  }
  // On the cpu driver with LOOM_CPU_MATMUL=exact every kernel does the reference's arithmetic
  // (docs/engine.md), so the logits are the reference's bit for bit, and with them llama.cpp's
  // greedy tokens.
  if (c.device == "cpu") {
    EXPECT_EQ(max_diff, 0.0) << "the cpu kernels are no longer bit-identical to the reference";
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* dev : {"cpu", "cuda"})
    for (const char* m : {"SmolLM2-135M-Instruct-Q4_1.gguf", "gemma-3-270m-Q4_K_M.gguf", "synth:smollm2-135m:q4_0",
                          "synth:smollm2-135m:q4_k", "synth:smollm2-135m:bf16", "synth:llama3-8b:q4_0", "synth:llama3-8b:q4_k",
                          // Mixtures of experts: the router, the expert mat-vecs (grouped for the
                          // 40-token prompt), the weighted sum.
                          "synth:tiny-swa:q4_k:qwen3moe", "synth:qwen3-30b-a3b:q4_k"})
      out.push_back({m, dev});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, HrxEngine, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string n = info.param.device + "_" + info.param.name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

}  // namespace
}  // namespace loom
