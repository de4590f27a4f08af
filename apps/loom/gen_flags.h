// Flags shared by the generating commands (run, chat, bench): model, context, threads, sampling
// and stop conditions, plus the speed line they print to stderr.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "loom/base/thread_pool.h"
#include "loom/engine/engine.h"
#include "loom/engine/sampler.h"
#include "loom/engine/session.h"
#include "loom/exec/hrx_backend.h"
#include "option_flags.h"

namespace loom::cli {

struct GenFlags {
  std::string model;
  int64_t n_ctx = 4096;
  int n_threads = default_thread_count();
  std::string device;  // "" = exec::default_device(); "cpu-ref": reference ops; cpu/cuda[:N]: HRX kernels
  int64_t n_batch = 512;
  llm::SamplerParams sampling_params;
  int64_t seed = -1;
  std::vector<std::string> stop;
  bool ignore_eos = false;

  llm::EngineOptions engine() const {
    llm::EngineOptions o;
    o.n_ctx = n_ctx;
    o.n_threads = n_threads;
    o.n_batch = n_batch;
    o.make_backend = [device = device, threads = n_threads] { return exec::make_backend(device, threads); };
    return o;
  }
  llm::SamplerParams sampling() const {
    llm::SamplerParams p = sampling_params;
    p.seed = seed < 0 ? llm::SamplerParams::kRandomSeed : static_cast<uint64_t>(seed);
    return p;
  }
  llm::GenerateOptions generate_options() const {
    llm::GenerateOptions o;
    o.stop = stop;
    o.ignore_eos = ignore_eos;
    return o;
  }
};

inline void add_gen_flags(CLI::App& app, GenFlags& f, bool sampling = true) {
  bind_option(app.add_option("-m,--model", f.model, "GGUF model file (default: $LOOM_MODEL or SmolLM2-135M-Instruct)"),
              opt::Opt::kModel);
  app.add_option("-c,--ctx-size", f.n_ctx, "context length in tokens (capped at the model's; 0: the model's)")
      ->capture_default_str();
  bind_option(app.add_option("-t,--threads", f.n_threads, "CPU threads")->capture_default_str()->check(CLI::Range(1, 1024)),
              opt::Opt::kThreads);
  bind_option(app.add_option("--device", f.device, "cpu-ref (reference ops) | cpu | cuda[:N] (op-library kernels through HRX); default: $LOOM_DEVICE, else cuda:0 when present, else cpu-ref")
                  ->check([](const std::string& d) {
                    return d.empty() || d == "cpu" || d == "cpu-ref" || d == "cuda" || d.rfind("cuda:", 0) == 0
                               ? std::string()
                               : "expected cpu, cpu-ref, cuda or cuda:N";
                  }),
              opt::Opt::kDevice);
  app.add_option("-b,--batch-size", f.n_batch, "prompt tokens per step")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  if (!sampling) return;
  auto& s = f.sampling_params;
  const char* g = "Sampling";
  app.add_option("--temp", s.temp, "temperature (0: greedy)")->capture_default_str()->group(g);
  app.add_option("--top-k", s.top_k, "keep the k most likely tokens (0: off)")->capture_default_str()->group(g);
  app.add_option("--top-p", s.top_p, "keep the smallest set with this probability mass (1: off)")
      ->capture_default_str()->group(g);
  app.add_option("--min-p", s.min_p, "drop tokens less likely than min-p times the best (0: off)")
      ->capture_default_str()->group(g);
  app.add_option("--repeat-penalty", s.repeat_penalty, "penalize repeating recent tokens (1: off)")
      ->capture_default_str()->group(g);
  app.add_option("--repeat-last-n", s.repeat_last_n, "how many recent tokens the penalties consider")
      ->capture_default_str()->group(g);
  app.add_option("--frequency-penalty", s.frequency_penalty, "subtract count x this from repeated tokens' logits")
      ->capture_default_str()->group(g);
  app.add_option("--presence-penalty", s.presence_penalty, "subtract this from logits of tokens already present")
      ->capture_default_str()->group(g);
  app.add_option("-s,--seed", f.seed, "random seed (-1: random); same seed, same output")->capture_default_str()->group(g);
  app.add_option("--stop", f.stop, "stop before this text (repeatable)")->group(g);
  app.add_flag("--ignore-eos", f.ignore_eos, "keep generating after end-of-text tokens")->group(g);
}

inline void print_speed(const llm::GenerateResult& r) {
  std::fprintf(stderr, "loom: prompt %lld tokens (%lld reused) %.1f tok/s | generated %zu tokens %.1f tok/s | stop: %s\n",
               static_cast<long long>(r.n_prompt), static_cast<long long>(r.n_reused), r.prompt_tps(), r.tokens.size(),
               r.gen_tps(), r.stop_reason.c_str());
}

}  // namespace loom::cli
