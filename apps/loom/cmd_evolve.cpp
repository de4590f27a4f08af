// `loom evolve run|resume|ship|status|ops|report`: automated kernel search (src/loom/evolve). A job is
// stored in one SQLite file (--db, default ~/.cache/loom/evolve.db); every evaluation is
// committed as it finishes, so `resume` continues a job that was killed.
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "cli.h"
#include "option_flags.h"
#include "loom/store/candidate.h"
#include "loom/store/cpp_family.h"
#include "loom/evolve/device.h"
#include "loom/store/db.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/job.h"
#include "loom/evolve/kb.h"
#include "loom/evolve/ncu.h"
#include "loom/evolve/report.h"
#include "loom/evolve/ship.h"
#include "loom/evolve/user_op.h"
#include "loom/evolve/queue.h"
#include "loom/evolve/worker.h"
#include "loom/kernels/op_spec.h"

namespace loom::cli {
namespace {

using namespace loom::evolve;

struct EvolveFlags {
  JobConfig cfg;
  std::string budget = "120s", db, out = "report.html", kb_dir;
  std::string llm_url, llm_model, llm_key;
  int64_t job = 0;
  bool no_skills = false, peak = false, instrument = false, ncu = false;
  std::vector<std::string> files;
  std::vector<std::string> knobs;  // check: schedule candidates ("k=v,k=v")
  int repeat = 1;
  double ws_factor = 4.0;
  std::string request;  // worker REQUEST (internal)
  int fd = 3;           // worker REQUEST (internal)
  int workers = -1;     // run/resume: -1 evaluate here; N >= 0 through the queue with N local workers
  double lease_s = 30;  // worker --db, run/resume --workers
  WorkerOptions queue_worker;
  std::string searches;       // ship
  double min_speedup = 1.05;  // ship
};

Result<Db> open_db(const EvolveFlags& f) { return Db::open(f.db.empty() ? Db::default_path() : f.db); }

Status run_cmd(EvolveFlags& f) {
  LOOM_RETURN_IF_ERROR(parse_budget(f.budget, f.cfg));
  f.cfg.skills = !f.no_skills;
  f.cfg.llm.url = f.llm_url;
  f.cfg.llm.model = f.llm_model;
  f.cfg.llm.fill_from_env();
  if (f.cfg.synth != "mutate") {
    LOOM_RETURN_IF_ERROR(llm_available().with_context("--synth " + f.cfg.synth));
    if (f.cfg.llm.url.empty()) return invalid_argument("--synth {} needs --llm-url or LOOM_LLM_URL", f.cfg.synth);
  }
  if (f.cfg.op.empty() && f.cfg.op_file.empty()) return invalid_argument("run needs --op or --op-file");
  // A batch is what the queue's workers share at once: with N local workers, at least N.
  if (f.workers > 0 && f.cfg.compile_jobs <= 0) f.cfg.compile_jobs = std::max(f.workers, 2);
  LOOM_ASSIGN_OR_RETURN(Db db, open_db(f));
  LOOM_ASSIGN_OR_RETURN(int64_t job, create_job(db, f.cfg));
  std::printf("job %lld in %s\n", static_cast<long long>(job), db.path().c_str());
  RunOptions ro;
  ro.llm_key = f.llm_key;
  ro.queue = f.workers >= 0;
  ro.local_workers = std::max(0, f.workers);
  ro.db_url = f.db;
  ro.worker_lease_s = f.lease_s;
  return run_job(db, job, ro);
}

Status ship_cmd(EvolveFlags& f) {
  ShipOptions o;
  LOOM_RETURN_IF_ERROR(parse_budget(f.budget, f.cfg));
  f.cfg.skills = !f.no_skills;
  o.job = f.cfg;
  o.searches_file = f.searches;
  o.db = f.db;
  o.out = f.out == "report.html" ? "" : f.out;
  o.min_speedup = f.min_speedup;
  o.command = command_line();
  return ship(o);
}

Status resume_cmd(const EvolveFlags& f) {
  LOOM_ASSIGN_OR_RETURN(Db db, open_db(f));
  RunOptions ro;
  ro.llm_key = f.llm_key;
  ro.llm_url = f.llm_url;
  ro.queue = f.workers >= 0;
  ro.local_workers = std::max(0, f.workers);
  ro.db_url = f.db;
  ro.worker_lease_s = f.lease_s;
  return run_job(db, f.job, ro);
}

// `loom evolve worker --db URL`: the long-lived queue worker (queue.h).
Status queue_worker_cmd(EvolveFlags& f) {
  if (f.db.empty()) return invalid_argument("worker needs --db (the database its coordinator uses) or a request file");
  if (f.lease_s < 1) return invalid_argument("--lease {}: at least 1 second", f.lease_s);
  f.queue_worker.db = f.db;
  f.queue_worker.device = f.cfg.device;
  f.queue_worker.lease_s = f.lease_s;
  return serve_queue(f.queue_worker);
}

Status status_cmd(const EvolveFlags& f) {
  LOOM_ASSIGN_OR_RETURN(Db db, open_db(f));
  LOOM_ASSIGN_OR_RETURN(std::string text, job_status(db, f.job));
  std::printf("%s", text.c_str());
  return Status();
}

Status report_cmd(const EvolveFlags& f) {
  LOOM_ASSIGN_OR_RETURN(Db db, open_db(f));
  LOOM_ASSIGN_OR_RETURN(std::string html, job_report_html(db, f.job));
  std::ofstream o(f.out, std::ios::binary);
  if (!(o << html)) return unavailable("cannot write {}", f.out);
  std::printf("wrote %s (%zu bytes)\n", f.out.c_str(), html.size());
  return Status();
}

// The "// expect: TAG|TAG" and "// shape: ..." lines of a planted candidate file.
std::string header_value(const std::string& src, const std::string& key) {
  size_t p = src.find("// " + key + ":");
  if (p == std::string::npos) return "";
  size_t b = p + key.size() + 4, e = src.find('\n', b);
  std::string v = src.substr(b, e == std::string::npos ? std::string::npos : e - b);
  while (!v.empty() && v.front() == ' ') v.erase(0, 1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\r')) v.pop_back();
  return v;
}

// Evaluates kernel files (planted cheats, hand-written kernels) and compares with their expect lines.
Status check_cmd(const EvolveFlags& f) {
  if (f.cfg.op.empty() && f.cfg.op_file.empty()) return invalid_argument("check needs --op or --op-file");
  LOOM_ASSIGN_OR_RETURN(const kernels::OpSpec* op, resolve_op(f.cfg.op, f.cfg.op_file));
  double peak = 0;
  if (f.peak) {
    LOOM_ASSIGN_OR_RETURN(DeviceFacts facts, probe_device(f.cfg.device, true));
    peak = facts.peak_gbps;
    std::printf("measured peak read bandwidth: %.1f GB/s\n", peak);
  }
  int bad = 0;
  std::vector<std::string> items = f.files;
  for (const std::string& k : f.knobs)
    for (int i = 0; i < f.repeat; ++i) items.push_back("knobs:" + k);
  for (const std::string& file : items) {
    Candidate c;
    if (file.rfind("knobs:", 0) == 0) {
      LOOM_ASSIGN_OR_RETURN(kernels::Shape ks, kernels::Shape::parse(file.substr(6)));
      c.knobs = kernels::Schedule(ks.dims.begin(), ks.dims.end());
    } else {
      LOOM_ASSIGN_OR_RETURN(c, candidate_from_file(file));
    }
    std::string shape_text = header_value(c.source, "shape");
    if (shape_text.empty()) shape_text = f.cfg.shape;
    LOOM_ASSIGN_OR_RETURN(kernels::Shape shape, kernels::Shape::parse(shape_text));
    // A file's '// op-file:' line (a path from the working directory) names its own op.
    const kernels::OpSpec* file_op = op;
    if (const std::string of = header_value(c.source, "op-file"); !of.empty()) {
      LOOM_ASSIGN_OR_RETURN(file_op, resolve_op("", of).with_context(file));
    } else if (const std::string on = header_value(c.source, "op"); !on.empty()) {
      LOOM_ASSIGN_OR_RETURN(file_op, resolve_op(on, "").with_context(file));  // '// op:' a library op
    }
    EvalOptions o;
    if (const std::string ts = header_value(c.source, "timing-sets"); !ts.empty()) o.timing_sets = std::atoi(ts.c_str());
    if (header_value(c.source, "perturb") == "0") o.perturb = false;
    o.trials = f.cfg.trials;
    const ir::TargetKind target = f.cfg.device.rfind("cuda", 0) == 0 ? ir::TargetKind::kPtx : ir::TargetKind::kCpp;
    o.holdout = search_holdout_shapes(*file_op, shape, target, f.cfg.holdout);  // as a job holds out
    o.peak_gbps = peak;
    o.time_budget_s = f.cfg.time_budget_s;
    o.ws_factor = f.ws_factor;
    o.seed = static_cast<uint64_t>(bad + 1);
    o.instrument = f.instrument;
    EvalResult r = evaluate_isolated(f.cfg.device, *file_op, shape, c, o, f.cfg.timeout_s);
    const std::string expect = header_value(c.source, "expect");
    bool match = expect.empty();
    for (size_t p = 0; !expect.empty() && p <= expect.size();) {
      size_t e = expect.find('|', p);
      if (e == std::string::npos) e = expect.size();
      if (expect.substr(p, e - p) == r.tag()) match = true;
      p = e + 1;
    }
    if (!match) ++bad;
    std::string reason = r.reason.substr(0, 160);
    for (char& ch : reason) if (ch == '\n') ch = ' ';
    std::printf("%s %-28s expect %-14s got %-14s %s\n", match ? "PASS" : "FAIL", file.substr(file.find_last_of('/') + 1).c_str(),
                expect.empty() ? "-" : expect.c_str(), r.tag().c_str(), r.ok() ? r.diagnosis.c_str() : reason.c_str());
    if (r.ok())
      std::printf("     median %.1f us (p10 %.1f, p90 %.1f, %d reps)\n", r.median_us, r.p10_us, r.p90_us, r.reps);
    if (r.ok() && !r.regions.empty()) std::printf("     regions: %s\n", r.regions.c_str());
    if (r.ok() && f.ncu) std::printf("     %s\n", ncu_diagnosis(f.cfg.device, *file_op, shape, c, o).c_str());
    std::fflush(stdout);
  }
  std::printf("%zu candidates, %d not as expected\n", items.size(), bad);
  if (bad) return failed_precondition("{} of {} candidates were not judged as expected", bad, items.size());
  return Status();
}

int ops_cmd() {
  for (const kernels::OpSpec* op : kernels::all_ops()) {
    std::printf("%-18s %s\n", std::string(op->name()).c_str(), std::string(op->description()).c_str());
    auto shapes = op->test_shapes();
    if (shapes.empty()) continue;
    std::string space;
    for (const auto& k : op->schedule_space(shapes.back(), ir::TargetKind::kCpp)) space += " " + k.name;
    for (const auto& k : rewrite_knobs(ir::TargetKind::kCpp)) space += " " + k.name;
    for (const auto& k : family_knobs(*op, shapes.back(), ir::TargetKind::kCpp)) space += " " + k.name;
    std::printf("  knobs (cpu):%s\n  e.g. --shape %s\n", space.c_str(), shapes.back().key().c_str());
  }
  return 0;
}

Status kb_cmd(const EvolveFlags& f) {
  LOOM_ASSIGN_OR_RETURN(Db db, open_db(f));
  std::string dir = f.kb_dir.empty() ? default_kb_dir() : f.kb_dir;
  if (dir.empty()) return not_found("no kb/ directory found (run from the source tree or pass --dir)");
  LOOM_ASSIGN_OR_RETURN(int n, index_documents(db, dir));
  std::printf("indexed %d documents from %s\n", n, dir.c_str());
  return Status();
}

LOOM_COMMAND(kEvolve, "evolve", "Search for faster kernels (jobs in an SQLite file), resume, report, ship",
             [](CLI::App& sub) -> Action {
               auto f = std::make_shared<EvolveFlags>();
               auto which = std::make_shared<std::string>();
               sub.require_subcommand(1);
               auto db_flag = [&](CLI::App* c) { c->add_option("--db", f->db, "database file (default ~/.cache/loom/evolve.db)"); };
               // How a search judges and times its candidates (run, ship).
               auto search_flags = [&](CLI::App* c) {
                 c->add_option("--trials", f->cfg.trials, "fresh random inputs per candidate (default 3)");
                 c->add_option("--holdout", f->cfg.holdout, "held-out shapes per candidate (default 3)");
                 c->add_option("--time-per-candidate", f->cfg.time_budget_s, "seconds of timing per candidate (default 0.3)");
                 c->add_option("--timeout", f->cfg.timeout_s, "seconds before an evaluation counts as hung (default 120)");
                 c->add_option("--confirm-rounds", f->cfg.confirm_rounds,
                               "interleaved re-timing rounds of the three best against the baseline (default 5)");
               };
               auto* run = sub.add_subcommand("run", "start a search job");
               run->add_option("--op", f->cfg.op, "op name (see `loom evolve ops`)");
               run->add_option("--op-file", f->cfg.op_file, "a user-defined op (JSON: dims, args, reference, kernel; docs/evolve.md)");
               run->add_option("--shape", f->cfg.shape, "NAME=VALUE,... (e.g. n_in=576,n_out=1536,n_tokens=1,wtype=2)")->required();
               run->add_option("--device", f->cfg.device, "cpu or cuda[:N]");
               run->add_option("--budget", f->budget, "time (120s, 10m) and/or count (500), e.g. 10m,500");
               run->add_option("--strategy", f->cfg.strategy, "mcts (default), evolution or random");
               run->add_option("--synth", f->cfg.synth, "mutate (default), llm or both");
               run->add_option("--seed", f->cfg.seed, "seed of every random choice (default 1)");
               run->add_flag("--no-skills", f->no_skills, "do not bias mutations with learned skills");
               search_flags(run);
               run->add_option("--ws-factor", f->cfg.ws_factor,
                               "timing working set in last-level caches (default 4; capped at 1 GiB on the cpu)");
               run->add_option("--compile-jobs", f->cfg.compile_jobs,
                               "candidates proposed and compiled in parallel per batch (default: cores, at most 8)");
               run->add_flag("--no-store", [f](int64_t) { f->cfg.store = false; }, "do not put the winner into the kernel store");
               run->add_flag("--exact", f->cfg.exact, "accept only candidates that give the reference's exact bytes (the cpu driver's contract)");
               bind_option(run->add_option("--llm-url", f->llm_url, "OpenAI-compatible endpoint (or LOOM_LLM_URL)"),
                           opt::Opt::kLlmUrl);
               bind_option(run->add_option("--llm-model", f->llm_model, "model name (or LOOM_LLM_MODEL)"), opt::Opt::kLlmModel);
               bind_option(run->add_option("--llm-key", f->llm_key, "API key (or LOOM_LLM_KEY; never stored)"),
                           opt::Opt::kLlmKey);
               run->add_option("--llm-max-tokens", f->cfg.llm.max_tokens, "reply length limit (default 768)");
               run->add_option("--llm-memory", f->cfg.llm_memory,
                               "what a prompt carries of the tree: parent (its code, default), siblings (its other children's results), both, none");
               run->add_option("--workers", f->workers,
                               "evaluate through the database's queue: start N local `evolve worker`s (0: only "
                               "other workers evaluate; default: evaluate here)");
               run->add_option("--worker-lease", f->lease_s, "lease of a queued evaluation in seconds (default 30)");
               db_flag(run);
               run->callback([which] { *which = "run"; });
               auto* resume = sub.add_subcommand("resume", "continue a job (after a kill, or with more budget spent)");
               resume->add_option("job", f->job, "job id")->required();
               resume->add_option("--llm-key", f->llm_key, "API key (or LOOM_LLM_KEY)");
               resume->add_option("--llm-url", f->llm_url, "override the job's endpoint");
               resume->add_option("--workers", f->workers, "as for run: N local queue workers (0: only others)");
               resume->add_option("--worker-lease", f->lease_s, "lease of a queued evaluation in seconds (default 30)");
               db_flag(resume);
               resume->callback([which] { *which = "resume"; });
               auto* shp = sub.add_subcommand("ship", "run the searches of a file and write the winners as shipped kernels (data/kernels)");
               shp->add_option("--searches", f->searches, "searches file (e.g. data/kernels/searches/cpu.json)")->required();
               shp->add_option("--device", f->cfg.device, "cpu or cuda[:N]");
               shp->add_option("--budget", f->budget, "per search: time (120s, 10m) and/or count (500)");
               shp->add_option("--seed", f->cfg.seed, "seed of every random choice (default 1)");
               search_flags(shp);
               shp->add_option("--min-speedup", f->min_speedup, "confirmed speed-up a winner needs to ship (default 1.05)");
               shp->add_option("-o,--output", f->out, "the shipped file to write or update (e.g. data/kernels/cpu-x86-64-v3.json)")->required();
               db_flag(shp);
               shp->callback([which] { *which = "ship"; });
               auto* status = sub.add_subcommand("status", "jobs, or one job's counts by status");
               status->add_option("job", f->job, "job id (default: all)");
               db_flag(status);
               status->callback([which] { *which = "status"; });
               auto* rep = sub.add_subcommand("report", "self-contained HTML report of a job");
               rep->add_option("job", f->job, "job id")->required();
               rep->add_option("-o,--output", f->out, "output file (default report.html)");
               db_flag(rep);
               rep->callback([which] { *which = "report"; });
               auto* check = sub.add_subcommand("check", "evaluate kernel files (.loom .cpp .cu .ptx) and compare with their '// expect:' lines");
               check->add_option("files", f->files, "kernel files");
               check->add_option("--knobs", f->knobs, "schedule candidates to evaluate (k=v,k=v), besides files");
               check->add_option("--repeat", f->repeat, "evaluate each --knobs candidate this many times");
               check->add_option("--op", f->cfg.op, "op name");
               check->add_option("--op-file", f->cfg.op_file, "a user-defined op (JSON)");
               check->add_option("--shape", f->cfg.shape, "default shape (a file's '// shape:' line wins)");
               check->add_option("--device", f->cfg.device, "cpu or cuda[:N]");
               check->add_option("--timeout", f->cfg.timeout_s, "seconds per file (default 120)");
               check->add_option("--trials", f->cfg.trials, "fresh random inputs (default 3)");
               check->add_option("--holdout", f->cfg.holdout, "held-out shapes (default 3)");
               check->add_option("--time-per-candidate", f->cfg.time_budget_s, "seconds of timing per candidate (default 0.3)");
               check->add_option("--ws-factor", f->ws_factor, "timing working set in last-level caches (default 4; 0: one copy, cache-hot)");
               check->add_flag("--instrument", f->instrument, "also report where time goes (cycle counters around regions; IR kernels)");
               check->add_flag("--ncu", f->ncu, "profile each accepted kernel once with Nsight Compute (cuda; dram throughput, occupancy)");
               check->add_flag("--peak", f->peak, "measure the peak read bandwidth first (enables the floor check)");
               check->callback([which] { *which = "check"; });
               auto* ops = sub.add_subcommand("ops", "the searchable ops and their knobs");
               ops->callback([which] { *which = "ops"; });
               auto* kb = sub.add_subcommand("kb", "index the knowledge base's documents (kb/*.md)");
               kb->add_option("--dir", f->kb_dir, "directory of markdown documents (default: kb/ of the source tree)");
               db_flag(kb);
               kb->callback([which] { *which = "kb"; });
               auto* worker = sub.add_subcommand("worker", "evaluate queued candidates of jobs in --db on --device until "
                                                           "killed (`loom evolve run --workers`)");
               worker->add_option("request", f->request, "(internal) one request file (JSON), or @serve");
               worker->add_option("--fd", f->fd, "(internal) file descriptor of the result pipe");
               worker->add_option("--db", f->db, "the coordinator's database (postgresql://... or a file)");
               worker->add_option("--device", f->cfg.device, "this worker's device: cpu or cuda[:N] (default cpu)");
               worker->add_option("--lease", f->lease_s, "seconds a leased evaluation stays this worker's without a heartbeat (default 30)");
               worker->add_option("--idle-exit", f->queue_worker.idle_exit_s, "exit after this many seconds with nothing to do");
               worker->add_option("--max-evaluations", f->queue_worker.max_evaluations, "exit after this many evaluations");
               worker->callback([which] { *which = "worker"; });
               return [f, which]() -> int {
                 if (*which == "worker" && !f->request.empty()) {
                   if (!f->db.empty()) return report(invalid_argument("worker: a request file and --db exclude each other"));
                   return worker_main(f->request, f->fd);
                 }
                 // Isolated evaluations that must not fork this process (cuda) exec this binary.
                 {
                   char exe[4096];
                   ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
                   if (n > 0) set_worker_binary(std::string(exe, static_cast<size_t>(n)));
                 }
                 if (*which == "ops") return ops_cmd();
                 Status s = *which == "worker" ? queue_worker_cmd(*f) : *which == "run" ? run_cmd(*f) : *which == "ship" ? ship_cmd(*f) : *which == "resume" ? resume_cmd(*f) : *which == "status" ? status_cmd(*f)
                          : *which == "kb" ? kb_cmd(*f) : *which == "check" ? check_cmd(*f) : report_cmd(*f);
                 return s.ok() ? 0 : report(s);
               };
             });

}  // namespace
}  // namespace loom::cli
