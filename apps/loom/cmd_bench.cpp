// `loom bench`: prompt processing (pp) and generation (tg) speed of a model on this machine,
// median and spread over repetitions, after a validating warm-up run.
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "gen_flags.h"
#include "loom/llm/engine.h"
#include "loom/llm/model.h"
#include "loom/llm/model_path.h"
#include "loom/llm/ops_ref.h"

namespace loom::cli {
namespace {

struct BenchFlags {
  GenFlags gen;
  int64_t n_prompt = 128, n_gen = 64;
  int reps = 3;
  bool json = false;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  utsname u{};
  return uname(&u) == 0 ? std::string(u.machine) : "unknown CPU";
}

struct Stats {
  double median = 0, min = 0, max = 0;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Stats s;
  s.min = v.front();
  s.max = v.back();
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return s;
}

// One run: the prompt in one go, then n_gen greedy tokens one by one. Returns the tokens.
Result<std::vector<int32_t>> run_once(llm::Engine& e, const std::vector<int32_t>& prompt, int64_t n_gen,
                                      double* pp_s, double* tg_s) {
  e.truncate(0);
  double t0 = now_s();
  LOOM_RETURN_IF_ERROR(e.decode(prompt));
  *pp_s = now_s() - t0;
  std::vector<int32_t> out;
  t0 = now_s();
  for (int64_t i = 0; i < n_gen; ++i) {
    const float* l = e.logits();
    for (int64_t k = 0; k < e.n_vocab(); ++k)
      if (!std::isfinite(l[k])) return internal_error("non-finite logit at step {}", i);
    const int32_t next[1] = {static_cast<int32_t>(llm::ref::argmax(l, e.n_vocab()))};
    out.push_back(next[0]);
    LOOM_RETURN_IF_ERROR(e.decode(next));
  }
  *tg_s = now_s() - t0;
  return out;
}

Status bench(const BenchFlags& f) {
  if (f.n_prompt < 1 || f.n_gen < 1 || f.reps < 1) return invalid_argument("-p, -n and -r must be >= 1");
  LOOM_ASSIGN_OR_RETURN(std::string path, llm::resolve_model_path(f.gen.model));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Model> model, llm::Model::load(path, !f.json));
  llm::EngineOptions opts = f.gen.engine();
  opts.n_ctx = std::max<int64_t>(opts.n_ctx, f.n_prompt + f.n_gen + 1);
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Engine> engine, llm::Engine::create(*model, opts));
  if (f.n_prompt + f.n_gen + 1 > engine->n_ctx())
    return invalid_argument("-p {} + -n {} exceeds the model's context of {}", f.n_prompt, f.n_gen, engine->n_ctx());
  // A fixed pseudo-text prompt: speed does not depend on the token values.
  std::vector<int32_t> prompt(static_cast<size_t>(f.n_prompt));
  for (int64_t i = 0; i < f.n_prompt; ++i)
    prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 101) % engine->n_vocab());

  // Warm-up, which is also the validation: finite logits and identical tokens in every run.
  double pp, tg;
  LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> expected, run_once(*engine, prompt, f.n_gen, &pp, &tg));
  std::vector<double> pp_tps, tg_tps;
  for (int r = 0; r < f.reps; ++r) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> got, run_once(*engine, prompt, f.n_gen, &pp, &tg));
    if (got != expected) return internal_error("repetition {} generated different tokens: not deterministic", r);
    pp_tps.push_back(static_cast<double>(f.n_prompt) / pp);
    tg_tps.push_back(static_cast<double>(f.n_gen) / tg);
  }
  const Stats p = stats(pp_tps), g = stats(tg_tps);
  const std::string device = cpu_name();
  if (f.json) {
    nlohmann::json j;
    j["model"] = path;
    j["backend"] = "cpu-ref";
    j["device"] = device;
    j["threads"] = f.gen.n_threads;
    j["n_prompt"] = f.n_prompt;
    j["n_gen"] = f.n_gen;
    j["reps"] = f.reps;
    j["pp_tokens_per_second"] = {{"median", p.median}, {"min", p.min}, {"max", p.max}};
    j["tg_tokens_per_second"] = {{"median", g.median}, {"min", g.min}, {"max", g.max}};
    std::puts(j.dump(2).c_str());
  } else {
    std::printf("model   %s\ndevice  %s, %d threads, backend cpu-ref\n", path.c_str(), device.c_str(), f.gen.n_threads);
    std::printf("pp%-5lld %8.1f tok/s  (min %.1f, max %.1f over %d runs)\n", static_cast<long long>(f.n_prompt),
                p.median, p.min, p.max, f.reps);
    std::printf("tg%-5lld %8.1f tok/s  (min %.1f, max %.1f over %d runs)\n", static_cast<long long>(f.n_gen),
                g.median, g.min, g.max, f.reps);
  }
  return Status();
}

}  // namespace

LOOM_COMMAND(kBench, "bench", "measure prompt and generation speed (tokens/s) on the CPU", [](CLI::App& app) -> Action {
  auto f = std::make_shared<BenchFlags>();
  add_gen_flags(app, f->gen, /*sampling=*/false);
  app.add_option("-p,--n-prompt", f->n_prompt, "prompt tokens (pp)")->capture_default_str();
  app.add_option("-n,--n-gen", f->n_gen, "generated tokens (tg)")->capture_default_str();
  app.add_option("-r,--reps", f->reps, "timed repetitions after one warm-up")->capture_default_str();
  app.add_flag("--json", f->json, "print the results as JSON");
  return [f] {
    Status s = bench(*f);
    return s.ok() ? 0 : report(s);
  };
});

}  // namespace loom::cli
