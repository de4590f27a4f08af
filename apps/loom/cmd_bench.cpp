// `loom bench`: prompt processing (pp) and generation (tg) speed of a model on a device, median
// and spread over repetitions after a validating warm-up, with the bytes and FLOPs each token
// costs and the fraction of the device's measured limit that the speed reaches. As llama-bench
// counts them, ppN is one N-token prompt and tgN is N tokens generated from an empty context
// (--depth D: after a D-token prompt, test "tgN@dD"), so the two tools' figures compare.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "gen_flags.h"
#include "loom/base/stats.h"
#include "loom/base/version.h"
#include "loom/engine/engine.h"
#include "loom/engine/model_path.h"
#include "loom/exec/hrx_backend.h"
#include "loom/evolve/peak.h"
#include "loom/gguf/ggml_types.h"
#include "loom/model/model.h"
#include "loom/ref/ops_ref.h"
#include "loom/store/store.h"

namespace loom::cli {
namespace {

struct BenchFlags {
  GenFlags gen;
  int64_t n_prompt = 512, n_gen = 128;
  int64_t depth = 0;  // cells in the cache before tg's first token (0: one start token at position 0)
  int reps = 5;
  bool json = false;
  bool profile = false;  // per-op breakdown (eager launches with device events)
  std::string out;  // append the JSON objects to this file too
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One run: the prompt in one go, then n_gen greedy tokens one by one. Returns the tokens.
// check_finite: every logit of every step must be finite (the warm-up's validation; the timed
// runs time generation alone, as llama-bench does, and must reproduce the warm-up's tokens).
Result<std::vector<int32_t>> run_once(llm::Engine& e, const std::vector<int32_t>& prompt, int64_t n_gen,
                                      double* pp_s, double* tg_s, bool check_finite) {
  e.truncate(0);
  double t0 = now_s();
  LOOM_RETURN_IF_ERROR(e.decode(prompt));
  *pp_s = now_s() - t0;
  std::vector<int32_t> out;
  t0 = now_s();
  for (int64_t i = 0; i < n_gen; ++i) {
    const float* l = e.logits();
    if (check_finite)
      for (int64_t k = 0; k < e.n_vocab(); ++k)
        if (!std::isfinite(l[k])) return internal_error("non-finite logit at step {}", i);
    const int32_t next[1] = {static_cast<int32_t>(llm::ref::argmax(l, e.n_vocab()))};
    out.push_back(next[0]);
    LOOM_RETURN_IF_ERROR(e.decode(next));
  }
  *tg_s = now_s() - t0;
  return out;
}

// What one token costs by definition: every weight a one-token step reads (matmul weights whole,
// of a mixture of experts the n_used chosen experts, norm weights, one embedding row), the KV
// cache it attends over, and 2 FLOPs per weight multiply-add plus the attention's. A prompt reads
// every weight once (prompt_weight_bytes: all experts, which a long prompt's tokens pick).
struct TokenCost {
  double weight_bytes = 0, prompt_weight_bytes = 0, kv_bytes_per_cell = 0, flops = 0, attn_flops_per_cell = 0;
};
TokenCost token_cost(const llm::Model& model) {
  const llm::Program p = model.build_program(1, 1);
  std::set<int32_t> seen;
  TokenCost c;
  for (const llm::Launch& l : p.launches) {
    if (l.op == llm::OpCode::kAttention) {
      const llm::ref::AttentionParams& a = l.attn;
      c.kv_bytes_per_cell += 2.0 * a.n_head_kv * (a.head_dim_k + a.head_dim_v);  // f16 K and V
      c.attn_flops_per_cell += 2.0 * a.n_head * (a.head_dim_k + a.head_dim_v);
    }
    if (l.weight < 0 || !seen.insert(l.weight).second) continue;
    const llm::ref::WeightView& w = model.weight(l.weight).view;
    if (l.op == llm::OpCode::kGetRows) {
      c.weight_bytes += static_cast<double>(w.row_stride);
      c.prompt_weight_bytes += static_cast<double>(w.row_stride);
    } else if (l.op == llm::OpCode::kMatMulId) {
      const llm::Weight& e = model.weight(l.weight);
      const double used = static_cast<double>(p.values[static_cast<size_t>(l.in1)].cols);
      const double rows = static_cast<double>(e.expert_rows()) * used;
      c.weight_bytes += static_cast<double>(w.row_stride) * rows;
      c.prompt_weight_bytes += static_cast<double>(w.row_stride) * static_cast<double>(w.n_out);
      c.flops += 2.0 * static_cast<double>(w.n_in) * rows;
    } else {
      c.prompt_weight_bytes += static_cast<double>(w.row_stride) * static_cast<double>(w.n_out);
      c.weight_bytes += static_cast<double>(w.row_stride) * static_cast<double>(w.n_out);
      if (l.op == llm::OpCode::kMatMul) c.flops += 2.0 * static_cast<double>(w.n_in) * static_cast<double>(w.n_out);
    }
  }
  return c;
}

// "llama3-8b" for Loom's synthetic models (general.name "loom-synth SHAPE QUANT"), else the
// model's own name.
std::string shape_name(const llm::Model& m) {
  const std::string& n = m.config().name;
  if (n.rfind("loom-synth ", 0) == 0) {
    const std::string rest = n.substr(11);
    return rest.substr(0, rest.find(' '));
  }
  return n.empty() ? m.config().arch_name : n;
}

// general.file_type as llama.cpp names it; else the weight type holding the most bytes.
std::string quant_name(const llm::Model& m) {
  static const std::pair<int, const char*> kTypes[] = {
      {0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},    {8, "Q5_0"},
      {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"}, {13, "Q3_K_L"}, {14, "Q4_K_S"},
      {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"}, {18, "Q6_K"},   {32, "BF16"}};
  if (const llm::GgufValue* v = m.gguf().find("general.file_type")) {
    if (auto ft = v->as_u64(); ft.ok())
      for (const auto& [id, name] : kTypes)
        if (static_cast<uint64_t>(id) == *ft) return name;
  }
  std::map<std::string, double> bytes;
  for (const llm::Weight& w : m.weights())
    bytes[std::string(llm::ggml_type_name(w.view.type))] += static_cast<double>(w.view.row_stride) * w.view.n_out;
  auto best = std::max_element(bytes.begin(), bytes.end(), [](auto& a, auto& b) { return a.second < b.second; });
  return best == bytes.end() ? "unknown" : best->first;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// One line per step on stderr, whether or not it is a terminal, so that a piped or logged run
// shows where it is (stdout keeps only the results).
template <typename... Args>
void step_line(fmt::format_string<Args...> format, Args&&... args) {
  const std::string line = "loom bench: " + fmt::format(format, std::forward<Args>(args)...) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

Status bench(const BenchFlags& f, const std::string& command) {
  if (f.n_prompt < 1 || f.n_gen < 1 || f.reps < 1) return invalid_argument("-p, -n and -r must be >= 1");
  if (f.depth < 0) return invalid_argument("--depth must be >= 0");
  // Profiling is read when a backend is made: set before the engine exists.
  if (f.profile) exec::set_profiling(true);
  LOOM_ASSIGN_OR_RETURN(std::string path, llm::resolve_model_path(f.gen.model));
  double t_step = now_s();
  step_line("loading {}", path);
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Model> model, llm::Model::load(path, !f.json));
  step_line("model loaded: {:.0f} MiB in {:.1f} s", static_cast<double>(model->weight_bytes()) / (1 << 20),
            now_s() - t_step);
  llm::EngineOptions opts = f.gen.engine();
  // tg starts from a prompt of `depth` tokens (at least one: the token the first step reads).
  const int64_t tg_prompt_len = std::max<int64_t>(1, f.depth);
  const int64_t need = std::max(f.n_prompt, tg_prompt_len + f.n_gen + 1);
  opts.n_ctx = std::max<int64_t>(opts.n_ctx, need);
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Engine> engine, llm::Engine::create(*model, opts));
  if (need > engine->n_ctx())
    return invalid_argument("-p {} / --depth {} + -n {} exceeds the model's context of {}", f.n_prompt, f.depth,
                            f.n_gen, engine->n_ctx());
  const std::string device = f.gen.device.empty() ? exec::default_device() : f.gen.device;
  step_line("engine ready on {} ({}); measuring the device's bandwidth", device, engine->backend_name());
  t_step = now_s();
  LOOM_ASSIGN_OR_RETURN(evolve::DeviceLimits lim, evolve::measure_limits(device, f.gen.n_threads));
  step_line("bandwidth {:.1f} GB/s ({:.1f} s)", lim.bandwidth_gbs, now_s() - t_step);
  // A fixed pseudo-text prompt: speed does not depend on the token values.
  std::vector<int32_t> prompt(static_cast<size_t>(f.n_prompt));
  for (int64_t i = 0; i < f.n_prompt; ++i)
    prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 101) % engine->n_vocab());

  const std::vector<int32_t> tg_prompt(prompt.begin(), prompt.begin() + std::min(tg_prompt_len, f.n_prompt));
  std::vector<int32_t> tg_start = tg_prompt;
  for (int64_t i = static_cast<int64_t>(tg_start.size()); i < tg_prompt_len; ++i)  // depth > n_prompt
    tg_start.push_back(static_cast<int32_t>((i * 7919 + 101) % engine->n_vocab()));
  // One repetition: the pp prompt alone, then tg after its own start (one run that serves both
  // when the depth is the pp prompt).
  const bool one_run = tg_prompt_len == f.n_prompt;
  auto repetition = [&](double* pp, double* tg, bool check) -> Result<std::vector<int32_t>> {
    double unused = 0;
    if (one_run) return run_once(*engine, prompt, f.n_gen, pp, tg, check);
    LOOM_RETURN_IF_ERROR(run_once(*engine, prompt, 0, pp, &unused, check).status());
    return run_once(*engine, tg_start, f.n_gen, &unused, tg, check);
  };
  // Warm-up, which is also the validation: finite logits, and identical tokens in every run.
  double pp, tg;
  const std::string tg_name = f.depth > 0 ? fmt::format("tg{}@d{}", f.n_gen, f.depth) : fmt::format("tg{}", f.n_gen);
  step_line("warm-up and validation: pp{} + {}", f.n_prompt, tg_name);
  t_step = now_s();
  LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> expected, repetition(&pp, &tg, true));
  step_line("warm-up done in {:.1f} s (finite logits)", now_s() - t_step);
  std::vector<double> pp_tps, tg_tps;
  exec::profile_reset();  // the warm-up compiled the kernels: profile only the timed runs
  for (int r = 0; r < f.reps; ++r) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> got, repetition(&pp, &tg, false));
    if (got != expected) return internal_error("repetition {} generated different tokens: not deterministic", r);
    pp_tps.push_back(static_cast<double>(f.n_prompt) / pp);
    tg_tps.push_back(static_cast<double>(f.n_gen) / tg);
    step_line("repetition {}/{}: pp{} {:.1f} tok/s, {} {:.1f} tok/s (same tokens as the warm-up)", r + 1, f.reps,
              f.n_prompt, pp_tps.back(), tg_name, tg_tps.back());
  }

  const TokenCost c = token_cost(*model);
  const std::string model_file = std::filesystem::path(path).filename().string();
  std::vector<nlohmann::json> results;
  auto add = [&](const std::string& test, const Spread& s, double bytes_per_token, double flops_per_token,
                 bool memory_bound) {
    nlohmann::json j;
    j["commit"] = std::string(git_commit());
    j["loom_version"] = std::string(loom_version());
    j["date"] = utc_now();
    j["command"] = command;
    j["device"] = lim.name;
    j["device_spec"] = lim.spec;
    j["backend"] = std::string(engine->backend_name());
    j["threads"] = f.gen.n_threads;
    // Which kernels did not come from the op library's defaults: the user's store or the
    // kernels that ship with Loom (the same lines go to stderr as the plans are compiled).
    nlohmann::json tuned = nlohmann::json::array();
    for (const store::KernelUse& u : store::kernels_in_use())
      tuned.push_back({{"op", u.op}, {"shape", u.shape_key}, {"id", u.id}, {"origin", u.origin}, {"speedup", u.speedup}});
    j["tuned_kernels"] = std::move(tuned);
    j["model"] = model_file;
    j["shape"] = shape_name(*model);
    j["quant"] = quant_name(*model);
    j["test"] = test;
    j["reps"] = f.reps;
    j["tokens_per_s"] = s.median;
    j["stdev"] = s.stdev;
    j["min"] = s.min;
    j["max"] = s.max;
    j["bytes_per_token"] = bytes_per_token;
    j["flops_per_token"] = flops_per_token;
    j["achieved_gbs"] = s.median * bytes_per_token / 1e9;
    j["achieved_tflops"] = s.median * flops_per_token / 1e12;
    j["bandwidth_limit_gbs"] = lim.bandwidth_gbs;
    j["bandwidth_measured_by"] = lim.bandwidth_how;
    if (memory_bound) {
      j["limit"] = "memory bandwidth";
      j["fraction_of_limit"] = s.median * bytes_per_token / (lim.bandwidth_gbs * 1e9);
    } else if (lim.peak_flops > 0) {
      j["limit"] = "dense fp16 tensor peak (datasheet)";
      j["fraction_of_limit"] = s.median * flops_per_token / lim.peak_flops;
    } else {
      j["limit"] = "compute (peak unknown for this device)";
      j["fraction_of_limit"] = nullptr;
    }
    if (f.profile) {
      // Per step of this test's kind: each op's time, share and bandwidth.
      const std::string kind = test.rfind("tg", 0) == 0 ? "decode" : "prompt";
      const double steps = static_cast<double>(std::max<int64_t>(1, exec::profile_steps(kind)));
      double total = 0;
      const auto prof = exec::profile_snapshot();
      for (const auto& o : prof)
        if (o.step == kind) total += o.seconds;
      nlohmann::json ops = nlohmann::json::array();
      for (const auto& o : prof) {
        if (o.step != kind) continue;
        const double gbs = o.seconds > 0 ? o.bytes / o.seconds / 1e9 : 0;
        ops.push_back({{"op", o.op}, {"launches_per_step", static_cast<double>(o.launches) / steps},
                       {"us_per_step", o.seconds / steps * 1e6}, {"share", total > 0 ? o.seconds / total : 0},
                       {"gbs", gbs}, {"fraction_of_bandwidth", lim.bandwidth_gbs > 0 ? gbs / lim.bandwidth_gbs : 0},
                       {"tflops", o.seconds > 0 ? o.flops / o.seconds / 1e12 : 0},
                       {"fraction_of_peak_flops", o.seconds > 0 && lim.peak_flops > 0 ? o.flops / o.seconds / lim.peak_flops : 0}});
      }
      j["profile"] = {{"step", kind}, {"steps", steps}, {"kernel_us_per_step", total / steps * 1e6},
                      {"note", "eager launches with device events around each (no graph replay): tokens/s of a profiled run are lower"},
                      {"ops", ops}};
    }
    results.push_back(std::move(j));
  };
  // pp: the weights are read once per prompt, the attention over a triangle of cells.
  const double np = static_cast<double>(f.n_prompt), ng = static_cast<double>(f.n_gen);
  add(fmt::format("pp{}", f.n_prompt), spread(pp_tps), c.prompt_weight_bytes / np + c.kv_bytes_per_cell * (np + 1) / 2,
      c.flops + c.attn_flops_per_cell * (np + 1) / 2, false);
  // tg: every token reads every weight and the cache so far (its start + n_gen / 2 cells on average).
  const double cells = static_cast<double>(tg_prompt_len) + ng / 2;
  add(f.depth > 0 ? fmt::format("tg{}@d{}", f.n_gen, f.depth) : fmt::format("tg{}", f.n_gen), spread(tg_tps),
      c.weight_bytes + c.kv_bytes_per_cell * cells, c.flops + c.attn_flops_per_cell * cells, true);
  results.back()["depth"] = f.depth;

  if (!f.out.empty()) {
    std::ofstream o(f.out, std::ios::app);
    if (!o) return not_found("cannot open {} for appending", f.out);
    for (const auto& j : results) o << j.dump() << "\n";
  }
  if (f.json) {
    for (const auto& j : results) std::puts(j.dump().c_str());
    return Status();
  }
  std::printf("model   %s (%s, %s)\n", path.c_str(), shape_name(*model).c_str(), quant_name(*model).c_str());
  std::printf("device  %s [%s], backend %s, %d threads; measured bandwidth %.1f GB/s\n", lim.name.c_str(),
              lim.spec.c_str(), std::string(engine->backend_name()).c_str(), f.gen.n_threads, lim.bandwidth_gbs);
  std::printf("%-10s %10s %8s %20s %11s %9s\n", "test", "tok/s", "stdev", "min-max", "GB/s", "of limit");
  for (const auto& j : results) {
    const std::string frac = j["fraction_of_limit"].is_null()
                                 ? "-"
                                 : fmt::format("{:.1f}%", 100 * j["fraction_of_limit"].get<double>());
    std::printf("%-10s %10.1f %8.1f %20s %11.1f %9s\n", j["test"].get<std::string>().c_str(),
                j["tokens_per_s"].get<double>(), j["stdev"].get<double>(),
                fmt::format("{:.1f}-{:.1f}", j["min"].get<double>(), j["max"].get<double>()).c_str(),
                j["achieved_gbs"].get<double>(), frac.c_str());
  }
  for (const auto& j : results) {
    if (!j.contains("profile")) continue;
    const auto& pr = j["profile"];
    std::printf("\nper-op profile of a %s step (%s; %.0f steps, kernels %.1f us per step):\n",
                pr["step"].get<std::string>().c_str(), j["test"].get<std::string>().c_str(), pr["steps"].get<double>(),
                pr["kernel_us_per_step"].get<double>());
    // TFLOP/s and the fraction of the device's dense fp16 tensor peak beside the bandwidth, so a
    // compute-bound op (the prompt matmul) shows how far it is from its own limit.
    std::printf("  %-18s %9s %11s %7s %9s %9s %9s %9s\n", "op", "launches", "us/step", "share", "GB/s", "of BW", "TFLOP/s",
                "of peak");
    for (const auto& o : pr["ops"]) {
      const double peak = o.value("fraction_of_peak_flops", 0.0);
      std::printf("  %-18s %9.1f %11.1f %6.1f%% %9.1f %8.1f%% %9.2f %9s\n", o["op"].get<std::string>().c_str(),
                  o["launches_per_step"].get<double>(), o["us_per_step"].get<double>(), 100 * o["share"].get<double>(),
                  o["gbs"].get<double>(), 100 * o["fraction_of_bandwidth"].get<double>(), o["tflops"].get<double>(),
                  peak > 0 ? fmt::format("{:.1f}%", 100 * peak).c_str() : "-");
    }
  }
  return Status();
}

}  // namespace

LOOM_COMMAND(kBench, "bench", "measure prompt and generation speed (tokens/s) against the device's limits",
             [](CLI::App& app) -> Action {
  auto f = std::make_shared<BenchFlags>();
  add_gen_flags(app, f->gen, /*sampling=*/false);
  app.add_option("-p,--n-prompt", f->n_prompt, "prompt tokens (test ppN)")->capture_default_str();
  app.add_option("-n,--n-gen", f->n_gen, "generated tokens (test tgN)")->capture_default_str();
  app.add_option("-d,--depth", f->depth,
                 "tokens in the context before tgN starts (0: an empty context, as llama-bench's tgN; "
                 "D > 0 names the test tgN@dD)")
      ->capture_default_str();
  app.add_option("-r,--reps", f->reps, "timed repetitions after one warm-up")->capture_default_str();
  app.add_flag("--json", f->json, "print one JSON object per test (one per line)");
  app.add_option("-o,--out", f->out, "also append the JSON objects to this file (JSON lines)");
  bind_option(app.add_flag("--profile", f->profile,
                           "per-op breakdown of a step: time, share, GB/s and fraction of the bandwidth (HRX devices; eager launches)"),
              opt::Opt::kProfile);
  return [f] {
    f->gen.resolve_device();
    Status s = bench(*f, command_line());
    return s.ok() ? 0 : report(s);
  };
});

}  // namespace loom::cli
