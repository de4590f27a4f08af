// The job loop: baseline, propose, evaluate, record, resume, confirm, store (see job.h).
#include "loom/evolve/job.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "loom/base/hash.h"
#include "loom/base/options.h"
#include "loom/base/version.h"
#include "loom/store/cpp_family.h"
#include "loom/store/db.h"
#include "loom/evolve/device.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/kb.h"
#include "loom/evolve/lease.h"
#include "loom/evolve/ncu.h"
#include "loom/evolve/queue.h"
#include "loom/evolve/search.h"
#include "loom/store/store.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/user_op.h"
#include "loom/evolve/winner.h"
#include "loom/evolve/worker.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {
namespace {

using clock_type = std::chrono::steady_clock;
using Log = std::function<void(const std::string&)>;

nlohmann::json to_json(const JobConfig& c) {
  return {{"op", c.op},          {"op_file", c.op_file},     {"shape", c.shape},         {"device", c.device},     {"strategy", c.strategy},
          {"synth", c.synth},    {"seed", c.seed},           {"budget_count", c.budget_count},
          {"budget_s", c.budget_s}, {"skills", c.skills},    {"trials", c.trials},     {"holdout", c.holdout},
          {"time_budget_s", c.time_budget_s}, {"timeout_s", c.timeout_s}, {"store", c.store},
          {"confirm_rounds", c.confirm_rounds}, {"ws_factor", c.ws_factor}, {"exact", c.exact},
          {"compile_jobs", c.compile_jobs}, {"llm_memory", c.llm_memory}, {"llm_url", c.llm.url}, {"llm_model", c.llm.model}, {"llm_max_tokens", c.llm.max_tokens}};
}

JobConfig from_json(const nlohmann::json& j) {
  JobConfig c;
  c.op = j.value("op", "");
  c.op_file = j.value("op_file", "");
  c.shape = j.value("shape", "");
  c.device = j.value("device", "cpu");
  c.strategy = j.value("strategy", "mcts");
  c.synth = j.value("synth", "mutate");
  c.seed = j.value("seed", uint64_t{1});
  c.budget_count = j.value("budget_count", 0);
  c.budget_s = j.value("budget_s", 0.0);
  c.skills = j.value("skills", true);
  c.trials = j.value("trials", 3);
  c.holdout = j.value("holdout", 3);
  c.time_budget_s = j.value("time_budget_s", 0.3);
  c.timeout_s = j.value("timeout_s", 120.0);
  c.store = j.value("store", true);
  c.confirm_rounds = j.value("confirm_rounds", 5);
  c.ws_factor = j.value("ws_factor", 4.0);
  c.exact = j.value("exact", false);
  c.compile_jobs = j.value("compile_jobs", 1);
  c.llm_memory = j.value("llm_memory", "parent");  // jobs from before batches: one at a time
  c.llm.url = j.value("llm_url", "");
  c.llm.model = j.value("llm_model", "");
  c.llm.max_tokens = j.value("llm_max_tokens", 768);
  return c;
}

Result<double> peak_for(Db& db, const std::string& spec, DeviceFacts& p, const std::function<void(const std::string&)>& log) {
  const std::string key = fmt::format("{}:t{}", p.arch, p.threads);
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("SELECT read_gbps FROM device_peaks WHERE device_arch = ?1"));
  s.bind(1, key);
  LOOM_ASSIGN_OR_RETURN(bool has, s.step());
  if (has) return s.f64(0);
  log(fmt::format("measuring the peak read bandwidth of {} ({} threads)...", p.arch, p.threads));
  LOOM_ASSIGN_OR_RETURN(DeviceFacts m, probe_device(spec, true));
  LOOM_ASSIGN_OR_RETURN(Stmt ins, db.prepare("INSERT INTO device_peaks VALUES (?1, ?2, ?3, julianday('now')) ON CONFLICT(device_arch) "
                                                       "DO UPDATE SET read_gbps = excluded.read_gbps, method = excluded.method, "
                                                       "measured = excluded.measured"));
  ins.bind(1, key).bind(2, m.peak_gbps).bind(3, p.arch.rfind("cuda", 0) == 0 ? "ir read kernel, 1 GiB, best of 5"
                                                                              : "cpp kernel reading 4 MiB per launch over 256 MiB, median of launches");
  LOOM_RETURN_IF_ERROR(ins.run());
  log(fmt::format("peak read bandwidth: {:.1f} GB/s (cached in the database)", m.peak_gbps));
  return m.peak_gbps;
}

Result<History> load_history(Db& db, int64_t job) {
  History h;
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("SELECT id, seq, parent, synth, body, hash, status, speedup, island FROM candidates "
                                           "WHERE job = ?1 ORDER BY seq"));
  s.bind(1, job);
  while (true) {
    LOOM_ASSIGN_OR_RETURN(bool has, s.step());
    if (!has) break;
    Node n;
    n.id = s.i64(0);
    n.seq = static_cast<int>(s.i64(1));
    n.parent = s.i64(2);
    n.synth = s.text(3);
    auto c = Candidate::from_body(s.text(4));
    if (c.ok()) n.cand = *c;
    n.hash = s.text(5);
    n.ok = s.text(6) == "ok";
    n.speedup = s.f64(7);
    n.island = static_cast<int>(s.i64(8));
    h.add(std::move(n));
  }
  return h;
}

struct Record {
  int seq = 0;
  int64_t parent = 0;
  std::string synth, diff;
  Candidate cand;
  EvalResult ev;
  double speedup = 0, at_s = 0;
  int island = 0;
  bool needs_eval = true;  // false: the synthesizer already failed (ev holds why)
  std::string worker;      // host:pid of the queue worker that evaluated it ("" here)
};

// The id of the row an `INSERT ... RETURNING id` made (one statement on both engines: no
// separate "last id" query that a reconnection in between could answer for another session).
Result<int64_t> inserted_id(Stmt& s) {
  LOOM_ASSIGN_OR_RETURN(bool row, s.step());
  if (!row) return internal_error("INSERT ... RETURNING id returned no row");
  const int64_t id = s.i64(0);
  LOOM_RETURN_IF_ERROR(s.reset());
  return id;
}

Result<int64_t> insert(Db& db, int64_t job, const Record& r) {
  LOOM_ASSIGN_OR_RETURN(
      Stmt s, db.prepare("INSERT INTO candidates(job, seq, parent, synth, kind, hash, body, diff, status, reason, median_us, "
                         "p10_us, p90_us, reps, speedup, gbps, frac_peak, diagnosis, eval_s, at_s, island, worker) VALUES "
                         "(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22) RETURNING id"));
  s.bind(1, job).bind(2, r.seq).bind(3, r.parent).bind(4, r.synth).bind(5, cand_kind_name(r.cand.kind));
  s.bind(6, r.cand.hash()).bind(7, r.cand.body()).bind(8, r.diff).bind(9, r.ev.status).bind(10, r.ev.reason);
  s.bind(11, r.ev.median_us).bind(12, r.ev.p10_us).bind(13, r.ev.p90_us).bind(14, r.ev.reps).bind(15, r.speedup);
  s.bind(16, r.ev.gbps).bind(17, r.ev.frac_peak).bind(18, r.ev.diagnosis).bind(19, r.ev.eval_s).bind(20, r.at_s);
  s.bind(21, r.island);
  if (r.worker.empty()) s.bind_null(22);
  else s.bind(22, r.worker);
  return inserted_id(s);
}

std::string short_reason(const EvalResult& e) {
  std::string r = e.reason.substr(0, 110);
  for (char& c : r)
    if (c == '\n') c = ' ';
  return r;
}

// The prompt of the llm synthesizer (kept short: small local models have small contexts).
std::string build_prompt(const kernels::OpSpec& op, const kernels::Shape& shape, ir::TargetKind target,
                         const std::string& parent_ir, const std::string& parent_diag, const std::vector<Document>& docs,
                         const std::vector<std::string>& skills, const std::vector<std::string>& siblings,
                         std::string& default_launch) {
  std::string args;
  for (const kernels::ArgSpec& a : op.args(shape))
    args += fmt::format("  {} ({}, {} bytes)\n", a.name,
                        a.role == kernels::ArgRole::kInput ? "input" : a.role == kernels::ArgRole::kOutput ? "output" : "in/out",
                        a.bytes);
  std::string p = fmt::format(
      "Write a faster kernel in Loom IR for the op `{}`: {}.\nShape: {}.\nArguments (kernel parameters, in this order):\n{}"
      "Reference: the op's definition above, computed on the host; results must match within tolerance on fresh random "
      "inputs and on other shapes, so write sizes as ${{n_in}}, ${{n_out}} (replaced by the shape's values).\n"
      "Add a launch line: // launch NAME grid=X,Y,Z block=X,Y,Z args=0,1,2\nTarget: {}.\n",
      op.name(), op.description(), shape.key(), args, target == ir::TargetKind::kCpp ? "cpu (one thread per block)" : "cuda");
  if (!parent_diag.empty()) p += "Current kernel: " + parent_diag + "\n";
  for (const std::string& s : skills) p += "Known to help: " + s + "\n";
  for (const Document& d : docs) p += "Note (" + d.title + "): " + d.body.substr(0, 240) + "\n";
  for (const std::string& s : siblings) p += "Tried before from the same kernel: " + s + "\n";
  if (!parent_ir.empty()) {
    std::string cut;
    size_t lines = 0, pos = 0;
    while (pos < parent_ir.size() && lines < 40) {
      size_t e = parent_ir.find('\n', pos);
      if (e == std::string::npos) e = parent_ir.size();
      cut += parent_ir.substr(pos, e - pos + 1);
      pos = e + 1;
      ++lines;
    }
    p += "The current kernel begins:\n```loom\n" + cut + (pos < parent_ir.size() ? "...\n" : "") + "```\n";
  }
  p += "Reply with the whole new kernel in one ```loom block.";
  (void)default_launch;
  return p;
}

}  // namespace

Status parse_budget(std::string_view text, JobConfig& cfg) {
  size_t p = 0;
  while (p <= text.size()) {
    size_t e = text.find(',', p);
    if (e == std::string_view::npos) e = text.size();
    std::string item(text.substr(p, e - p));
    p = e + 1;
    if (item.empty()) return invalid_argument("empty budget item in '{}'", text);
    char* end = nullptr;
    double v = std::strtod(item.c_str(), &end);
    std::string unit(end);
    if (end == item.c_str() || v <= 0) return invalid_argument("budget '{}': expected 120s, 10m, 1h or a count", item);
    if (unit.empty()) cfg.budget_count = static_cast<int>(v);
    else if (unit == "s") cfg.budget_s = v;
    else if (unit == "m") cfg.budget_s = v * 60;
    else if (unit == "h") cfg.budget_s = v * 3600;
    else return invalid_argument("budget '{}': unknown unit '{}' (s, m, h)", item, unit);
  }
  return Status();
}

Result<int64_t> create_job(Db& db, const JobConfig& cfg) {
  LOOM_ASSIGN_OR_RETURN(const kernels::OpSpec* op, resolve_op(cfg.op, cfg.op_file));
  LOOM_ASSIGN_OR_RETURN(kernels::Shape shape, kernels::Shape::parse(cfg.shape));
  LOOM_RETURN_IF_ERROR(op->validate(shape));
  LOOM_RETURN_IF_ERROR(parse_strategy(cfg.strategy).status());
  if (cfg.llm_memory != "parent" && cfg.llm_memory != "siblings" && cfg.llm_memory != "both" && cfg.llm_memory != "none")
    return invalid_argument("unknown llm memory '{}' (parent, siblings, both, none)", cfg.llm_memory);
  if (cfg.synth != "mutate" && cfg.synth != "llm" && cfg.synth != "both")
    return invalid_argument("unknown synthesizer '{}' (mutate, llm, both)", cfg.synth);
  if (cfg.budget_count <= 0 && cfg.budget_s <= 0) return invalid_argument("a job needs a budget (--budget 120s or 500)");
  JobConfig c = cfg;
  c.shape = shape.key();
  c.op = std::string(op->name());
  c.op_file = op_file_of(*op);  // absolute: a resume may run elsewhere
  // Batches pay off where candidates compile on the host (cpu device: C++); on cuda the driver
  // JIT-compiles at load, so proposals go one at a time (each sees every result before it).
  if (c.compile_jobs <= 0)
    c.compile_jobs = c.device.rfind("cpu", 0) == 0 ? static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u)) : 1;
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("INSERT INTO jobs(op, shape, device, strategy, synth, seed, budget, config, "
                                           "loom_version, status, created) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,'new',julianday('now')) "
                                           "RETURNING id"));
  s.bind(1, c.op).bind(2, c.shape).bind(3, c.device).bind(4, c.strategy).bind(5, c.synth).bind(6, static_cast<int64_t>(c.seed));
  s.bind(7, fmt::format("{}{}{}", c.budget_s > 0 ? fmt::format("{}s", c.budget_s) : "",
                        c.budget_s > 0 && c.budget_count > 0 ? "," : "",
                        c.budget_count > 0 ? std::to_string(c.budget_count) : ""));
  s.bind(8, to_json(c).dump()).bind(9, loom_version());
  return inserted_id(s);
}

Candidate baseline_candidate(const kernels::OpSpec& op, const kernels::Shape& shape, ir::TargetKind target, bool exact) {
  Candidate c;
  c.knobs = op.default_schedule(shape, target);
  std::vector<kernels::Knob> space = op.schedule_space(shape, target);  // the search's space, in its order
  for (const kernels::Knob& k : rewrite_knobs(target)) space.push_back(k);
  for (const kernels::Knob& k : family_knobs(op, shape, target)) space.push_back(k);
  if (exact) keep_exact_choices(space);
  for (const kernels::Knob& k : space) {
    // Knobs the default leaves out take their first choice; an exact job also replaces a
    // default that is inexact (the cpu's summed Q4_0 prompt lanes) with its first exact choice.
    auto it = c.knobs.find(k.name);
    const bool inexact = exact && it != c.knobs.end() &&
                         std::find(k.inexact.begin(), k.inexact.end(), it->second) != k.inexact.end();
    if (it == c.knobs.end() || inexact) c.knobs[k.name] = k.choices[0];
  }
  return c;
}

std::vector<kernels::Shape> search_holdout_shapes(const kernels::OpSpec& op, const kernels::Shape& shape,
                                                  ir::TargetKind target, int max) {
  const Candidate base = baseline_candidate(op, shape, target);
  return holdout_shapes(op, shape, max, [&](const kernels::Shape& s) { return instantiate(base, op, s, target).ok(); });
}

namespace {

struct JobRow {
  JobConfig cfg;
  double elapsed_s = 0, baseline_us = 0;
  std::string status;
};

// The job's row, read in full and its statement finished: a statement left open would hold a
// read snapshot for the whole job, and a later write from this connection would then fail
// with "database is locked" as soon as another process had written.
Result<JobRow> read_job(Db& db, int64_t job) {
  LOOM_ASSIGN_OR_RETURN(Stmt js, db.prepare("SELECT config, elapsed_s, baseline_us, status FROM jobs WHERE id = ?1"));
  js.bind(1, job);
  LOOM_ASSIGN_OR_RETURN(bool found, js.step());
  if (!found) return not_found("no evolve job {} in {}", job, db.path());
  JobRow r;
  r.cfg = from_json(nlohmann::json::parse(js.text(0), nullptr, false));
  r.elapsed_s = js.f64(1);
  r.baseline_us = js.f64(2);
  r.status = js.text(3);
  return r;
}

// Removes the job's pool of input sets when the run ends (a SIGKILL leaves it for resume).
struct PoolDir {
  std::string dir;
  explicit PoolDir(std::string d) : dir(std::move(d)) {}
  PoolDir(const PoolDir&) = delete;
  PoolDir& operator=(const PoolDir&) = delete;
  ~PoolDir() {
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
};

// How the job evaluates: its trials, held-out shapes, timing, peak, and its pool of shared input
// sets (EvalOptions): one directory per (database, job) under TMPDIR, so a resumed job finds it.
EvalOptions job_eval_options(const std::string& db_path, int64_t job, const JobConfig& cfg, const kernels::OpSpec& op,
                             const kernels::Shape& shape, ir::TargetKind target, double peak) {
  EvalOptions eo;
  eo.trials = cfg.trials;
  eo.holdout = search_holdout_shapes(op, shape, target, cfg.holdout);
  eo.time_budget_s = cfg.time_budget_s;
  eo.ws_factor = cfg.ws_factor;
  eo.exact = cfg.exact;
  eo.peak_gbps = peak;
  eo.pool_seed = step_seed(cfg.seed, 1 << 30);
  const uint64_t h = key_hash64(db_path);
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::path(opt::get_string(opt::Opt::kTmpdir)) /
                              fmt::format("loom-evolve-pool-{:016x}-{}", h, job);
  if (std::filesystem::create_directories(dir, ec) || std::filesystem::is_directory(dir, ec)) eo.pool_dir = dir.string();
  return eo;
}

// Confirms the finalists against the baseline: the search's kFinalists best candidates,
// cfg.confirm_rounds rounds (default 5), each timing the baseline and every finalist back to back; a finalist's confirmed
// speed-up is the median of its rounds' ratios (robust to a busy machine; kept in its row), and
// the highest one is the job's winner. (One search-time sample decides little on a shared
// machine: a baseline timed in a slow moment makes any candidate look 2x faster, so the
// search's single best is often a lucky sample.) Without finalists the winner is the search's
// best (the baseline when nothing was faster), not re-timed. The rounds run here, or all on one
// queue worker (interleaving needs one device).
Result<Winner> confirm_finalists(Db& db, int64_t job, const JobConfig& cfg, const kernels::OpSpec& op,
                                 const kernels::Shape& shape, const History& h, EvalOptions o,
                                 JobLease& lease, JobQueue* remote, const Log& log) {
  constexpr size_t kFinalists = 3;
  const Node* best = h.best();
  std::vector<const Node*> finalists;
  for (const Node& n : h.nodes)
    if (n.ok && n.seq != 0 && n.speedup > 0) finalists.push_back(&n);
  std::stable_sort(finalists.begin(), finalists.end(), [](const Node* a, const Node* b) { return a->speedup > b->speedup; });
  if (finalists.size() > kFinalists) finalists.resize(kFinalists);
  if (best->seq == 0 || finalists.empty()) return search_winner(db, job, best->id);
  o.trials = 1;
  o.fresh_trials = 0;  // timing rounds of candidates already proven correct: the pool's set
  o.holdout.clear();
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<std::vector<double>> ratios(finalists.size()), times(finalists.size());
  std::vector<double> base;
  std::vector<Candidate> cands;
  for (const Node* f : finalists) cands.push_back(f->cand);
  nlohmann::json rounds;
  if (remote) {
    nlohmann::json req = evaluate_request(cfg.device, op, shape, h.nodes[0].cand, o);
    req["finalists"] = nlohmann::json::array();
    for (const Candidate& c : cands) req["finalists"].push_back(c.body());
    req["rounds"] = cfg.confirm_rounds;
    LOOM_RETURN_IF_ERROR(remote->enqueue("confirm", 0, req));
    LOOM_ASSIGN_OR_RETURN(std::optional<QueueRow> r, remote->wait("confirm", 0));
    if (r) rounds = r->result;
    if (r) log(fmt::format("confirmation rounds timed by worker {}", r->worker));
  } else {
    rounds = confirm_rounds(cfg.device, op, shape, h.nodes[0].cand, cands, o, cfg.confirm_rounds, cfg.timeout_s,
                            [&] { return lease.beat(); });
  }
  if (rounds.is_object() && rounds.contains("error")) return failed_precondition("{}", rounds["error"].get<std::string>());
  for (const auto& row : rounds.is_array() ? rounds : nlohmann::json::array()) {
    if (!row.is_array() || row.empty() || !row[0].is_number()) continue;
    const double b = row[0].get<double>();
    base.push_back(b);
    for (size_t i = 0; i < finalists.size() && i + 1 < row.size(); ++i) {
      if (!row[i + 1].is_number()) continue;
      const double w = row[i + 1].get<double>();
      ratios[i].push_back(b / w);
      times[i].push_back(w);
    }
  }
  size_t pick = finalists.size();
  double pick_ratio = 0;
  for (size_t i = 0; i < finalists.size(); ++i) {
    if (ratios[i].empty()) continue;
    const double r = median(ratios[i]);
    log(fmt::format("confirm #{} (search {:.2f}x): {:.1f} us, {} interleaved rounds with the baseline: {:.2f}x "
                    "(round ratios {:.2f}..{:.2f})",
                    finalists[i]->seq, finalists[i]->speedup, median(times[i]), ratios[i].size(), r,
                    *std::min_element(ratios[i].begin(), ratios[i].end()), *std::max_element(ratios[i].begin(), ratios[i].end())));
    LOOM_ASSIGN_OR_RETURN(Stmt u, db.prepare("UPDATE candidates SET confirmed_speedup = ?2 WHERE id = ?1"));
    LOOM_RETURN_IF_ERROR(u.bind(1, finalists[i]->id).bind(2, r).run());
    if (pick == finalists.size() || r > pick_ratio) {
      pick = i;
      pick_ratio = r;
    }
  }
  if (pick == finalists.size()) {
    log("confirm: no finalist could be re-timed; the winner is the search's best, not re-timed");
    return search_winner(db, job, best->id);
  }
  LOOM_ASSIGN_OR_RETURN(Winner w, search_winner(db, job, finalists[pick]->id));
  w.rounds = static_cast<int>(ratios[pick].size());
  w.confirmed_speedup = pick_ratio;
  w.median_us = median(times[pick]);
  w.baseline_us = median(base);
  log(fmt::format("confirm: baseline {:.1f} us vs best #{} {:.1f} us: {:.2f}x", w.baseline_us, w.seq, w.median_us,
                  w.confirmed_speedup));
  return w;
}

// Where the winner spends its time: one instrumented evaluation (cycle counters around its
// regions, ir::instrument_regions); Loom IR kernels only. A C++ winner (evolve's AVX2 family)
// cannot be instrumented: then the best Loom IR kernel is. Hardware counters, where Nsight
// Compute is installed, go into the winner's diagnosis.
Result<std::string> best_kernel_regions(Db& db, const JobConfig& cfg, const kernels::OpSpec& op, const kernels::Shape& shape,
                                const History& h, const Node& best, EvalOptions o, JobQueue* remote, const Log& log) {
  o.trials = 1;
  o.holdout.clear();
  o.time_budget_s = 0.05;
  o.fresh_trials = 0;
  o.instrument = true;
  auto is_ir = [](const Candidate& c) {
    auto fam = c.knobs.find("ev_family");
    return c.kind == CandKind::kIr || (c.kind == CandKind::kSchedule && (fam == c.knobs.end() || fam->second == 0));
  };
  const Node* target_node = &best;
  if (!is_ir(best.cand)) {
    target_node = nullptr;
    for (const Node& n : h.nodes)
      if (n.ok && is_ir(n.cand) && (!target_node || n.speedup > target_node->speedup)) target_node = &n;
  }
  std::string regions = "not measured: no Loom IR kernel passed";
  if (target_node) {
    EvalResult w;
    if (remote) {
      LOOM_RETURN_IF_ERROR(remote->enqueue("regions", target_node->seq, evaluate_request(cfg.device, op, shape, target_node->cand, o)));
      LOOM_ASSIGN_OR_RETURN(std::optional<QueueRow> r, remote->wait("regions", target_node->seq));
      if (r) w = EvalResult::from_json(r->result.dump());
      else w.reason = "cancelled";
    } else {
      w = evaluate_isolated(cfg.device, op, shape, target_node->cand, o, cfg.timeout_s);
    }
    regions = w.ok() ? w.regions : "not measured: " + w.status + " " + w.reason.substr(0, 200);
    if (target_node != &best)
      regions = fmt::format("best #{} is C++ text (not instrumented); best Loom IR kernel #{} ({:.2f}x): {}", best.seq,
                            target_node->seq, target_node->speedup, regions);
  }
  log(fmt::format("regions of best #{}: {}", best.seq, regions));
  if (remote) return regions;  // the profiler runs where the device is: not on a queue worker yet
  // With this job's persistent worker ended first: the profiler gets a quiet device.
  stop_persistent_workers();
  const std::string hw = ncu_diagnosis(cfg.device, op, shape, best.cand, o);
  log(hw);
  if (hw.rfind("ncu: skipped: not a cuda", 0) != 0) {
    LOOM_ASSIGN_OR_RETURN(Stmt d, db.prepare("UPDATE candidates SET diagnosis = diagnosis || '; ' || ?2 WHERE id = ?1"));
    LOOM_RETURN_IF_ERROR(d.bind(1, best.id).bind(2, hw).run());
  }
  return regions;
}

Status run_leased(Db& db, int64_t job, const JobRow& row, const RunOptions& ro, JobLease& lease, const Log& log) {
  JobConfig cfg = row.cfg;
  const double elapsed0 = row.elapsed_s;
  double baseline_us = row.baseline_us;
  auto op_or = resolve_op(cfg.op, cfg.op_file);
  if (!op_or.ok()) return std::move(op_or).status().with_context(fmt::format("job {}", job));
  const kernels::OpSpec* op = *op_or;
  // What the search minimizes: the median time, or the 90th percentile for ops that ask for it.
  const bool tail = op_objective(*op) == "p90";
  auto objective_us = [tail](const EvalResult& e) { return tail ? e.p90_us : e.median_us; };
  LOOM_ASSIGN_OR_RETURN(kernels::Shape shape, kernels::Shape::parse(cfg.shape));
  LOOM_ASSIGN_OR_RETURN(StrategyKind strategy, parse_strategy(cfg.strategy));
  if (!ro.llm_key.empty()) cfg.llm.key = ro.llm_key;
  if (!ro.llm_url.empty()) cfg.llm.url = ro.llm_url;
  cfg.llm.fill_from_env();

  LOOM_ASSIGN_OR_RETURN(DeviceFacts pr, probe_device(cfg.device, false));
  LOOM_ASSIGN_OR_RETURN(double peak, peak_for(db, cfg.device, pr, log));
  const ir::TargetKind target = pr.arch.rfind("cuda", 0) == 0 ? ir::TargetKind::kPtx : ir::TargetKind::kCpp;
  {
    LOOM_ASSIGN_OR_RETURN(Stmt u, db.prepare("UPDATE jobs SET device_arch = ?2 WHERE id = ?1"));
    LOOM_RETURN_IF_ERROR(u.bind(1, job).bind(2, pr.arch).run());
  }
  const std::string family = op_family(cfg.op), dkind = device_kind(pr.arch);
  if (auto kbdir = default_kb_dir(); !kbdir.empty()) {
    LOOM_ASSIGN_OR_RETURN(Stmt c, db.prepare("SELECT count(*) FROM documents"));
    LOOM_ASSIGN_OR_RETURN(bool has, c.step());
    const bool empty = has && c.i64(0) == 0;
    LOOM_RETURN_IF_ERROR(c.reset());  // no read left open across the writes below
    if (empty) (void)index_documents(db, kbdir);
  }

  const EvalOptions eo = job_eval_options(db.path(), job, cfg, *op, shape, target, peak);
  const PoolDir pool_cleanup{eo.pool_dir};
  std::vector<kernels::Knob> space = op->schedule_space(shape, target);
  for (const kernels::Knob& k : rewrite_knobs(target)) space.push_back(k);
  for (const kernels::Knob& k : family_knobs(*op, shape, target)) space.push_back(k);
  if (cfg.exact) keep_exact_choices(space);
  const kernels::Schedule op_default = op->default_schedule(shape, target);
  auto normalize = [&](Candidate& c) { canonicalize(c.knobs, space, op_default); };

  LOOM_ASSIGN_OR_RETURN(History h, load_history(db, job));
  const auto t_run = clock_type::now();
  auto elapsed = [&] { return elapsed0 + std::chrono::duration<double>(clock_type::now() - t_run).count(); };
  // After every evaluation: the heartbeat, and the best so far (the winner record until the
  // confirmation writes the final one).
  auto save_progress = [&](int64_t best_id) -> Status {
    LOOM_RETURN_IF_ERROR(lease.beat());
    LOOM_ASSIGN_OR_RETURN(Stmt u, db.prepare("UPDATE jobs SET elapsed_s = ?2, best_candidate = ?3, baseline_us = ?4 WHERE id = ?1"));
    return u.bind(1, job).bind(2, elapsed()).bind(3, best_id).bind(4, baseline_us).run();
  };
  if (!h.nodes.empty())
    log(fmt::format("job {}: resuming after {} evaluations ({:.0f} s spent), best {:.2f}x", job, h.nodes.size(), elapsed0,
                    h.best() ? h.best()->speedup : 0.0));
  log(fmt::format("job {}: {} {{{}}} on {} ({}), strategy {}, synth {}, seed {}{}; held-out shapes: {}", job, cfg.op,
                  shape.key(), cfg.device, pr.arch, cfg.strategy, cfg.synth, cfg.seed,
                  cfg.exact ? ", exact (the reference's bytes)" : "", [&] {
                    std::string s;
                    for (const auto& x : eo.holdout) s += (s.empty() ? "{" : ", {") + x.key() + "}";
                    return s.empty() ? std::string("none") : s;
                  }()));

  // Out of time (the time budget): the queue's pending rows are cancelled, not waited for.
  JobQueue remote_evals{db, job, pr.arch, cfg.device, cfg.timeout_s, lease, log,
                        [&] { return cfg.budget_s > 0 && elapsed() >= cfg.budget_s; }};
  JobQueue* remote = ro.queue ? &remote_evals : nullptr;
  if (!remote) {  // rows an earlier queued run of this job left are evaluated here now
    LOOM_RETURN_IF_ERROR(cancel_pending(db, job).status());
  }
  auto request_of = [&](const Candidate& c, uint64_t seed) {
    EvalOptions o = eo;
    o.seed = seed;
    return evaluate_request(cfg.device, *op, shape, c, o);
  };
  // Returns false when the queue cancelled it (out of time before any worker took it).
  auto evaluate_one = [&](Record& r, uint64_t seed) -> Result<bool> {
    if (!remote) {
      EvalOptions o = eo;
      o.seed = seed;
      r.ev = evaluate_isolated(cfg.device, *op, shape, r.cand, o, cfg.timeout_s);
      return true;
    }
    LOOM_RETURN_IF_ERROR(remote->enqueue("eval", r.seq, request_of(r.cand, seed)));
    LOOM_ASSIGN_OR_RETURN(std::optional<QueueRow> q, remote->wait("eval", r.seq));
    if (!q) return false;
    r.ev = EvalResult::from_json(q->result.dump());
    r.worker = q->worker;
    return true;
  };

  std::string last_phases;  // where the last search evaluation's time went (logged after the search)
  if (h.nodes.empty()) {
    Record r;
    r.synth = "baseline";
    r.diff = "the op's default schedule";
    r.cand = baseline_candidate(*op, shape, target, cfg.exact);
    LOOM_ASSIGN_OR_RETURN(bool got, evaluate_one(r, step_seed(cfg.seed, 0)));
    if (!got) return failed_precondition("the search ran out of time before a worker evaluated the baseline");
    if (!r.ev.ok()) return failed_precondition("the baseline (default schedule) fails: {} {}", r.ev.status, r.ev.reason);
    baseline_us = objective_us(r.ev);
    r.speedup = 1;
    r.at_s = elapsed();
    LOOM_ASSIGN_OR_RETURN(int64_t id, insert(db, job, r));
    Node n{id, 0, 0, r.synth, r.cand, r.cand.hash(), true, 1.0, 0};
    h.add(n);
    LOOM_RETURN_IF_ERROR(save_progress(id));
    log(fmt::format("[   0 {:6.1f}s] baseline {}: {:.1f} us (p10 {:.1f}, p90 {:.1f}, {} reps, working set {:.0f} MiB); {}",
                    elapsed(), r.cand.summary(), r.ev.median_us, r.ev.p10_us, r.ev.p90_us, r.ev.reps,
                    r.ev.ws_bytes / 1048576.0, r.ev.diagnosis));
    log(fmt::format("baseline evaluation {:.1f} s: {}", r.ev.eval_s, r.ev.phases));
  }

  SkillTable skills;
  if (cfg.skills) {
    LOOM_ASSIGN_OR_RETURN(skills, load_skills(db, family, dkind));
  }
  // Candidates are proposed in batches of `batch` (the job's compile_jobs): every proposal of a
  // batch sees the history as it stood at the batch's first seq (plus the batch's earlier
  // proposals, for duplicates), so the batch can be compiled in parallel before its candidates
  // are measured one at a time. A resumed job rebuilds a half-done batch the same way.
  const int batch = std::max(1, cfg.compile_jobs);
  if (remote)
    log(fmt::format("queued in batches of {}: at most {} workers evaluate this job at once (--compile-jobs at `run`)",
                    batch, batch));
  auto propose = [&](int seq, const History& base, const History& seen) -> Result<std::optional<Record>> {
    std::mt19937_64 rng(step_seed(cfg.seed, seq));
    Pick pick = pick_parent(strategy, base, seq, rng);
    const Node* parent = pick.parent ? base.find(*pick.parent) : nullptr;
    const bool use_llm = cfg.synth == "llm" || (cfg.synth == "both" && seq % 2 == 0);
    Record r;
    r.seq = seq;
    r.parent = parent ? parent->id : 0;
    r.island = pick.island;
    if (!use_llm) {
      r.synth = "mutate";
      if (strategy != StrategyKind::kRandom) {
        if (auto o = opening_move(space, base, seen, normalize)) {
          r.parent = base.nodes[0].id;
          r.island = 0;
          r.cand = o->cand;
          r.diff = o->diff;
          return std::optional<Record>(std::move(r));
        }
      }
      auto m = mutate(space, parent ? &parent->cand : nullptr, seen, cfg.skills ? &skills : nullptr, rng, normalize);
      if (!m) return std::optional<Record>();
      r.cand = m->cand;
      r.diff = m->diff;
      return std::optional<Record>(std::move(r));
    }
    r.synth = "llm";
    // Node memory: the parent's code and diagnosis (inherit), what its other children gave
    // (siblings, as of the batch's start), both, or neither (a fresh attempt).
    const bool inherit = cfg.llm_memory == "parent" || cfg.llm_memory == "both";
    const bool compare = cfg.llm_memory == "siblings" || cfg.llm_memory == "both";
    std::vector<std::string> siblings;
    if (compare) {
      LOOM_ASSIGN_OR_RETURN(Stmt q, db.prepare("SELECT seq, synth, kind, diff, status, speedup, reason FROM candidates "
                                               "WHERE job = ?1 AND parent = ?2 AND seq < ?3 ORDER BY seq DESC LIMIT 4"));
      q.bind(1, job).bind(2, r.parent).bind(3, static_cast<int64_t>(base.nodes.size()));
      while (true) {
        LOOM_ASSIGN_OR_RETURN(bool row, q.step());
        if (!row) break;
        const std::string what = q.text(3).empty() ? q.text(2) + " text" : q.text(3);
        siblings.push_back(q.text(4) == "ok" ? fmt::format("#{} {} ({}): {:.2f}x", q.i64(0), what.substr(0, 60), q.text(1), q.f64(5))
                                             : fmt::format("#{} {} ({}): {}: {}", q.i64(0), what.substr(0, 60), q.text(1),
                                                           q.text(4), q.text(6).substr(0, 100)));
      }
    }
    std::string parent_ir, launch;
    if (parent && inherit) {
      auto inst = instantiate(parent->cand, *op, shape, target);
      if (inst.ok() && (inst->kind == CandKind::kSchedule || inst->kind == CandKind::kIr)) parent_ir = ir::print(inst->gen.module);
      else if (inst.ok()) parent_ir = inst->source;
    }
    std::string diag;
    if (inherit) {
      LOOM_ASSIGN_OR_RETURN(Stmt d, db.prepare("SELECT diagnosis FROM candidates WHERE id = ?1"));
      d.bind(1, r.parent);
      LOOM_ASSIGN_OR_RETURN(bool has, d.step());
      if (has) diag = d.text(0);
    }
    auto docs = search_documents(db, diag + " " + cfg.op + " " + dkind, 1);
    auto sk = describe_skills(db, family, dkind, 3);
    std::string prompt = build_prompt(*op, shape, target, parent_ir, diag, docs.ok() ? *docs : std::vector<Document>{},
                                      sk.ok() ? *sk : std::vector<std::string>{}, siblings, launch);
    auto reply = llm_chat(cfg.llm, "You are an expert kernel engineer. You answer with code only.", prompt);
    {
      LOOM_ASSIGN_OR_RETURN(Stmt lc, db.prepare("INSERT INTO llm_calls(job, seq, prompt, reply, error, at) VALUES (?1,?2,?3,?4,?5,julianday('now'))"));
      lc.bind(1, job).bind(2, seq).bind(3, prompt).bind(4, reply.ok() ? *reply : std::string()).bind(5, reply.ok() ? std::string() : reply.status().to_string());
      LOOM_RETURN_IF_ERROR(lc.run());
    }
    std::vector<Candidate> got;
    if (reply.ok()) got = parse_reply(*reply, target, "");
    if (!reply.ok() || got.empty()) {
      r.cand.kind = CandKind::kIr;
      r.cand.source = reply.ok() ? "// (no kernel in the reply)\n" + reply->substr(0, 2000) : "";
      r.ev.status = reply.ok() ? "no_kernel" : "llm_error";
      r.ev.reason = reply.ok() ? "the reply holds no kernel (no ```loom/```cpp block and no `kernel @`)" : reply.status().to_string();
      r.needs_eval = false;
    } else {
      r.cand = got[0];
      r.diff = "llm reply";
      if (seen.by_hash.count(r.cand.hash())) {
        r.ev.status = "duplicate";
        r.ev.reason = "the reply repeats an evaluated candidate";
        r.needs_eval = false;
      }
    }
    return std::optional<Record>(std::move(r));
  };

  bool exhausted = false;
  auto out_of_budget = [&](int seq) {
    return (cfg.budget_count > 0 && seq - 1 >= cfg.budget_count) || (cfg.budget_s > 0 && elapsed() >= cfg.budget_s);
  };
  while (!exhausted) {
    const int seq0 = static_cast<int>(h.nodes.size());
    if (out_of_budget(seq0)) break;
    const int start = 1 + (seq0 - 1) / batch * batch;
    int end = start + batch;
    if (cfg.budget_count > 0) end = std::min(end, cfg.budget_count + 1);
    History base;
    for (int i = 0; i < start; ++i) base.add(h.nodes[static_cast<size_t>(i)]);
    History seen = h;
    std::vector<Record> todo;
    for (int seq = seq0; seq < end; ++seq) {
      LOOM_ASSIGN_OR_RETURN(std::optional<Record> r, propose(seq, base, seen));
      if (!r) {
        exhausted = true;
        break;
      }
      Node pending;
      pending.seq = seq;
      pending.hash = r->cand.hash();
      if (!seen.by_hash.count(pending.hash)) seen.add(pending);
      todo.push_back(std::move(*r));
    }
    // Compile the batch in parallel (cpp target), then measure one at a time.
    std::vector<Candidate> to_build;
    for (const Record& r : todo)
      if (r.needs_eval) to_build.push_back(r.cand);
    if (remote) {  // every worker can start on the batch at once
      for (const Record& r : todo)
        if (r.needs_eval) LOOM_RETURN_IF_ERROR(remote->enqueue("eval", r.seq, request_of(r.cand, step_seed(cfg.seed, r.seq))));
    } else if (to_build.size() > 1) {
      std::vector<kernels::Shape> shapes = {shape};
      for (const kernels::Shape& x : eo.holdout) shapes.push_back(x);
      const auto t0 = clock_type::now();
      auto built = prebuild_parallel(cfg.device, *op, shapes, to_build, target, batch, cfg.timeout_s);
      double sum = 0;
      for (const PrebuildResult& b : built) sum += b.seconds;
      const double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
      if (target == ir::TargetKind::kCpp && sum > 0.5)
        log(fmt::format("compiled {} candidates in parallel: {:.1f} s of compiling in {:.1f} s", to_build.size(), sum, wall));
    }
    for (Record& r : todo) {
      if (out_of_budget(r.seq)) break;
      const Node* parent = r.parent ? h.find(r.parent) : nullptr;
      std::optional<Node> parent_node;
      if (parent) parent_node = *parent;  // a copy: h.add() below may move the nodes
      parent = parent_node ? &*parent_node : nullptr;
      if (r.needs_eval) {
        LOOM_ASSIGN_OR_RETURN(bool got, evaluate_one(r, step_seed(cfg.seed, r.seq)));
        if (!got) break;  // out of time: the rest of the batch was cancelled
        if (!r.ev.phases.empty()) last_phases = fmt::format("#{} {:.1f} s: {}", r.seq, r.ev.eval_s, r.ev.phases);
      }
      r.speedup = r.ev.ok() && objective_us(r.ev) > 0 ? baseline_us / objective_us(r.ev) : 0;
      r.at_s = elapsed();
      LOOM_ASSIGN_OR_RETURN(int64_t id, insert(db, job, r));
      Node n{id, r.seq, r.parent, r.synth, r.cand, r.cand.hash(), r.ev.ok(), r.speedup, r.island};
      if (n.hash.empty() || h.by_hash.count(n.hash)) n.hash += fmt::format("#{}", r.seq);  // keep the map unique
      h.add(n);
      if (parent && parent->ok && r.ev.ok() && r.cand.kind == CandKind::kSchedule && parent->cand.kind == CandKind::kSchedule) {
        LOOM_RETURN_IF_ERROR(record_skill(db, family, dkind, parent->cand.knobs, r.cand.knobs, std::log(r.speedup / parent->speedup)));
      }
      const Node* best = h.best();
      LOOM_RETURN_IF_ERROR(save_progress(best ? best->id : 0));
      std::string what = r.cand.kind == CandKind::kSchedule ? r.diff : r.cand.summary();
      if (r.ev.ok())
        log(fmt::format("[{:4} {:6.1f}s] {}<-#{} {:6} {:<34} {:8.1f} us {:5.2f}x (best {:.2f}x) {:3.0f}% peak", r.seq, elapsed(),
                        cfg.strategy, parent ? parent->seq : -1, r.synth, what.substr(0, 34), r.ev.median_us, r.speedup,
                        best ? best->speedup : 0, 100 * r.ev.frac_peak) +
            (r.worker.empty() ? "" : " [" + r.worker + "]"));
      else
        log(fmt::format("[{:4} {:6.1f}s] {}<-#{} {:6} {:<34} {}: {}", r.seq, elapsed(), cfg.strategy, parent ? parent->seq : -1,
                        r.synth, what.substr(0, 34), r.ev.status, short_reason(r.ev)));
    }
    if (remote) {
      LOOM_ASSIGN_OR_RETURN(int64_t n, cancel_pending(db, job));
      if (n > 0) log(fmt::format("out of time: {} queued evaluations cancelled", n));
    }
    if (exhausted) log("the search space is exhausted: every candidate the mutate synthesizer can reach is evaluated");
  }

  if (!last_phases.empty()) log("last search evaluation " + last_phases);
  if (!h.best()) return internal_error("job {} has no evaluated baseline", job);
  LOOM_ASSIGN_OR_RETURN(Winner w, confirm_finalists(db, job, cfg, *op, shape, h, eo, lease, remote, log));
  w.final = true;
  std::optional<StoredKernel> k;
  if (cfg.store && w.seq != 0 && w.rounds > 0 && w.claim() > 1.05) k = stored_kernel_of(w, cfg.op, shape, pr.arch);
  else if (cfg.store && w.seq != 0) log(fmt::format("not stored: {:.2f}x is within the noise of the baseline", w.claim()));
  LOOM_RETURN_IF_ERROR(record_winner(db, w, k ? &*k : nullptr));
  if (k) {
    w.kernel = k->id();
    log(fmt::format("stored as {} for {} {{{}}} on {} ({:.2f}x)", k->id(), k->op, k->shape_key, k->device_arch, k->speedup));
  }
  const Node* best = h.find(w.candidate);
  std::string regions;
  if (best) {
    LOOM_ASSIGN_OR_RETURN(regions, best_kernel_regions(db, cfg, *op, shape, h, *best, eo, remote, log));
  }
  LOOM_ASSIGN_OR_RETURN(Stmt u, db.prepare("UPDATE jobs SET status = 'done', elapsed_s = ?2, regions = ?3 WHERE id = ?1"));
  LOOM_RETURN_IF_ERROR(u.bind(1, job).bind(2, elapsed()).bind(3, regions).run());
  log(fmt::format("job {} done: {} evaluations in {:.0f} s; winner {} ({})", job, h.nodes.size(), elapsed(), w.line(),
                  w.cand.summary()));
  return Status();
}

}  // namespace

Status run_job(Db& db, int64_t job, const RunOptions& ro) {
  Log log = ro.log ? ro.log : [](const std::string& l) {
    std::printf("%s\n", l.c_str());
    std::fflush(stdout);
  };
  LOOM_ASSIGN_OR_RETURN(JobRow row, read_job(db, job));
  if (row.status == "done") {
    log(fmt::format("job {} is already done (`loom evolve status {}`)", job, job));
    return Status();
  }
  LOOM_ASSIGN_OR_RETURN(JobLease lease, JobLease::acquire(db, job));
  std::optional<LocalWorkers> workers;
  if (ro.queue && ro.local_workers > 0) {
    workers.emplace(ro.local_workers, ro.db_url.empty() ? db.path() : ro.db_url, row.cfg.device, ro.worker_lease_s);
    log(fmt::format("job {}: started {} local workers (`loom evolve worker`) on {}", job, workers->size(), row.cfg.device));
  }
  return lease.release(run_leased(db, job, row, ro, lease, log));
}

Result<std::string> job_status(Db& db, int64_t job) {
  std::vector<int64_t> ids;
  {
    LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("SELECT id FROM jobs WHERE ?1 = 0 OR id = ?1 ORDER BY id"));
    s.bind(1, job);
    while (true) {
      LOOM_ASSIGN_OR_RETURN(bool has, s.step());
      if (!has) break;
      ids.push_back(s.i64(0));
    }
  }
  if (ids.empty() && job) return not_found("no job {} in {}", job, db.path());
  if (ids.empty()) return std::string("no jobs yet in " + db.path() + "\n");
  std::string out;
  for (int64_t id : ids) {
    LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("SELECT j.op, j.shape, j.device, j.device_arch, j.strategy, j.synth, j.budget, "
                                             "j.elapsed_s, j.baseline_us, j.regions, (SELECT count(*) FROM candidates c "
                                             "WHERE c.job = j.id), (SELECT count(*) FROM candidates c WHERE c.job = j.id AND "
                                             "c.status = 'ok') FROM jobs j WHERE j.id = ?1"));
    s.bind(1, id);
    LOOM_ASSIGN_OR_RETURN(bool has, s.step());
    if (!has) continue;
    out += fmt::format("job {}: {} {{{}}} on {} [{}] {} / {} budget {}: {} evaluations ({} ok), {:.0f} s, baseline {:.1f} us\n",
                       id, s.text(0), s.text(1), s.text(2), s.text(3), s.text(4), s.text(5), s.text(6), s.i64(10), s.i64(11),
                       s.f64(7), s.f64(8));
    LOOM_ASSIGN_OR_RETURN(std::string state, job_state(db, id));
    out += "  status: " + state + "\n";
    LOOM_ASSIGN_OR_RETURN(std::optional<Winner> w, read_winner(db, id));
    if (w) out += fmt::format("  {}: {}\n", w->final ? "winner" : "best so far", w->line());
    if (!s.text(9).empty()) out += fmt::format("  regions of the best kernel: {}\n", s.text(9));
    if (job == 0) continue;
    LOOM_ASSIGN_OR_RETURN(Stmt r, db.prepare("SELECT status, count(*) FROM candidates WHERE job = ?1 GROUP BY status"));
    r.bind(1, id);
    while (true) {
      LOOM_ASSIGN_OR_RETURN(bool hr, r.step());
      if (!hr) break;
      out += fmt::format("  {:14} {}\n", r.text(0), r.i64(1));
    }
  }
  return out;
}

}  // namespace loom::evolve
