// Flags shared by the generating commands (run, chat, bench): model, context, threads, sampling
// and stop conditions, plus the speed line they print to stderr.
#pragma once

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "loom/base/thread_pool.h"
#include "loom/engine/engine.h"
#include "loom/engine/sampler.h"
#include "loom/engine/session.h"
#include "device_flags.h"
#include "loom/exec/hrx_backend.h"
#include "option_flags.h"

namespace loom::cli {

struct GenFlags {
  std::string model;
  int64_t n_ctx = 4096;
  int n_threads = default_thread_count();
  DeviceFlags placement;  // --device and -ngl as given
  std::string device;     // what they resolve to (resolve_device()); "" = exec::default_device()
  int64_t n_batch = 512;
  std::string cache_type_k = "f16", cache_type_v = "f16";
  llm::SamplerParams sampling_params;
  int64_t seed = -1;
  std::vector<std::string> stop;
  bool ignore_eos = false;

  // Call once, before the command runs: fills `device` from --device / -ngl.
  void resolve_device() { device = placement.resolve(); }

  llm::EngineOptions engine() const {
    llm::EngineOptions o;
    o.n_ctx = n_ctx;
    o.n_threads = n_threads;
    o.n_batch = n_batch;
    o.make_backend = [device = device, threads = n_threads, kv = kv_types()] { return exec::make_backend(device, threads, kv); };
    return o;
  }
  // --cache-type-k/v as types (the flags' check admits f16 and q8_0 only).
  llm::KvCacheTypes kv_types() const {
    return {*llm::ggml_type_from_name(cache_type_k), *llm::ggml_type_from_name(cache_type_v)};
  }
  // n_ctx_tokens: the context the engine got, which --repeat-last-n -1 stands for (0: not known
  // yet, as when the values are only validated).
  llm::SamplerParams sampling(int64_t n_ctx_tokens = 0) const {
    llm::SamplerParams p = sampling_params;
    if (p.repeat_last_n == -1)
      p.repeat_last_n = static_cast<int>(std::min<int64_t>(INT_MAX, n_ctx_tokens > 0 ? n_ctx_tokens : 1 << 20));
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

// CLI11 checks that say what the flag wants (CLI11 puts the flag's name in front): a real number
// in [lo, hi] with either end open (HUGE_VAL: no bound; NaN and infinities are refused), and
// an integer >= lo.
inline CLI::Validator real_in(double lo, bool lo_open, double hi = HUGE_VAL, bool hi_open = false) {
  std::string want;
  if (hi == HUGE_VAL && lo == -HUGE_VAL) want = "a finite number";
  else if (hi == HUGE_VAL) want = fmt::format("{} {}", lo_open ? ">" : ">=", lo);
  else want = fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || !std::isfinite(v)) return "'" + text + "' is not a finite number";
        if (v < lo || v > hi || (lo_open && v == lo) || (hi_open && v == hi))
          return fmt::format("{} is out of range: it must be {}", text, want);
        return std::string();
      },
      "");
}
inline CLI::Validator int_at_least(int64_t lo, std::string meaning = "") {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (end == text.c_str() || *end != '\0' || errno == ERANGE) return "'" + text + "' is not an integer";
        if (v < lo) return fmt::format("{} is out of range: it must be >= {}{}", text, lo, meaning);
        return std::string();
      },
      "");
}

// --cache-type-k / --cache-type-v (llama.cpp's names): the KV cache's row types.
inline void add_cache_type_flags(CLI::App& app, std::string& k, std::string& v) {
  const CLI::IsMember types({"f16", "q8_0"});
  app.add_option("--cache-type-k", k, "KV cache type of K: f16 | q8_0 (q8_0: --device cpu-ref only)")
      ->capture_default_str()->check(types);
  app.add_option("--cache-type-v", v, "KV cache type of V: f16 | q8_0 (q8_0: --device cpu-ref only)")
      ->capture_default_str()->check(types);
}

inline void add_gen_flags(CLI::App& app, GenFlags& f, bool sampling = true) {
  bind_option(app.add_option("-m,--model", f.model, "GGUF file or a known model name (smollm2, gemma3: see loom pull); default: $LOOM_MODEL or SmolLM2-135M-Instruct"),
              opt::Opt::kModel);
  app.add_option("-c,--ctx-size", f.n_ctx, "context length in tokens (capped at the model's; 0: the model's)")
      ->capture_default_str()->check(int_at_least(0, " (0: the model's)"));
  bind_option(app.add_option("-t,--threads", f.n_threads, "CPU threads")->capture_default_str()->check(CLI::Range(1, 1024)),
              opt::Opt::kThreads);
  add_device_flags(app, f.placement);
  app.add_option("-b,--batch-size", f.n_batch, "prompt tokens per step")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  add_cache_type_flags(app, f.cache_type_k, f.cache_type_v);
  if (!sampling) return;
  auto& s = f.sampling_params;
  const char* g = "Sampling";
  app.add_option("--temp", s.temp, "temperature (0: greedy)")->capture_default_str()->group(g)
      ->check(real_in(0, false));
  app.add_option("--top-k", s.top_k, "keep the k most likely tokens (0: off)")->capture_default_str()->group(g)
      ->check(int_at_least(0, " (0: off)"));
  app.add_option("--top-p", s.top_p, "keep the smallest set with this probability mass (1: off)")
      ->capture_default_str()->group(g)->check(real_in(0, true, 1, false));
  app.add_option("--min-p", s.min_p, "drop tokens less likely than min-p times the best (0: off)")
      ->capture_default_str()->group(g)->check(real_in(0, false, 1, false));
  app.add_option("--repeat-penalty", s.repeat_penalty, "penalize repeating recent tokens (1: off)")
      ->capture_default_str()->group(g)->check(real_in(0, true));
  app.add_option("--repeat-last-n", s.repeat_last_n, "how many recent tokens the penalties consider (0: off, -1: the whole context)")
      ->capture_default_str()->group(g)->check(int_at_least(-1, " (-1: the whole context)"));
  app.add_option("--frequency-penalty", s.frequency_penalty, "subtract count x this from repeated tokens' logits")
      ->capture_default_str()->group(g)->check(real_in(-HUGE_VAL, false));
  app.add_option("--presence-penalty", s.presence_penalty, "subtract this from logits of tokens already present")
      ->capture_default_str()->group(g)->check(real_in(-HUGE_VAL, false));
  app.add_option("-s,--seed", f.seed, "random seed (-1: random); same seed, same output")->capture_default_str()->group(g)
      ->check(int_at_least(-1, " (-1: random)"));
  app.add_option("--stop", f.stop, "stop before this text (repeatable)")->group(g);
  app.add_flag("--ignore-eos", f.ignore_eos, "keep generating after end-of-text tokens")->group(g);
}

inline void print_speed(const llm::GenerateResult& r) {
  std::fprintf(stderr, "loom: prompt %lld tokens (%lld reused) %.1f tok/s | generated %zu tokens %.1f tok/s | stop: %s\n",
               static_cast<long long>(r.n_prompt), static_cast<long long>(r.n_reused), r.prompt_tps(), r.tokens.size(),
               r.gen_tps(), r.stop_reason.c_str());
}

}  // namespace loom::cli
