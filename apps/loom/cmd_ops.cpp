// `loom ops list|test|bench|ir|build`: the op library from the command line. `list` shows every
// op with its test shapes and schedule space; `test` runs the differential check of one op (all
// its test shapes or --shape) on a device; `bench` checks and then times one op and shape, and,
// for matvec/matmul, llm::ref::matmul on the same data (median of repetitions after a warm-up);
// `build` compiles every op for an AMDGPU arch and reports each kernel's resources.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "loom/base/file.h"
#include "loom/base/stats.h"
#include "loom/base/thread_pool.h"
#include "loom/codegen/target.h"
#include "loom/ir/ir.h"
#include "loom/kernels/amdgpu_build.h"
#include "loom/kernels/op_harness.h"
#include "loom/kernels/op_list.h"
#include "loom/ref/ops_ref.h"

namespace loom::cli {
namespace {

using namespace loom::kernels;

struct OpsFlags {
  std::string op, shape, schedule, device = "cpu";
  int threads = 0, reps = 50, warmup = 5, random = 3;
  uint64_t seed = 0;
  bool json = false;
  std::string target = "amdgpu", out;  // build
  int jobs = 0;
};

Result<const OpSpec*> find(const std::string& name) {
  const OpSpec* op = find_op(name);
  if (!op) {
    std::string names;
    for (const OpSpec* o : all_ops()) names += std::string(names.empty() ? "" : ", ") + std::string(o->name());
    return invalid_argument("unknown op '{}' (ops: {})", name, names);
  }
  return op;
}

std::string space_text(const std::vector<Knob>& space) {
  std::string out;
  for (const Knob& k : space) {
    if (!out.empty()) out += ' ';
    out += k.name + "={";
    for (size_t i = 0; i < k.choices.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(k.choices[i]);
    }
    out += "}";
  }
  return out;
}

int run_list() {
  for (const OpSpec* op : all_ops()) {
    std::printf("%-14s %s\n", std::string(op->name()).c_str(), std::string(op->description()).c_str());
    auto shapes = op->test_shapes();
    if (!shapes.empty()) {
      std::printf("  space (cpu): %s\n", space_text(op->schedule_space(shapes[0], ir::TargetKind::kCpp)).c_str());
      std::printf("  space (ptx): %s\n", space_text(op->schedule_space(shapes[0], ir::TargetKind::kPtx)).c_str());
      std::printf("  space (amdgpu): %s\n", space_text(op->schedule_space(shapes[0], ir::TargetKind::kAmdgpu)).c_str());
    }
    for (const Shape& s : shapes) std::printf("  shape %s\n", s.key().c_str());
  }
  return 0;
}

// --schedule: the knobs given over the op's default schedule for this shape and target (a knob
// left out keeps its default; no text, the default); a name outside the op's space is refused,
// naming the space.
Result<Schedule> parse_schedule(const std::string& text, const OpSpec& op, const Shape& shape, ir::TargetKind target) {
  LOOM_ASSIGN_OR_RETURN(Shape given, Shape::parse(text));  // same NAME=VALUE,... syntax
  Schedule sc = op.default_schedule(shape, target);
  const std::vector<Knob> space = op.schedule_space(shape, target);
  for (const auto& [name, value] : given.dims) {
    const bool known = std::any_of(space.begin(), space.end(), [&](const Knob& k) { return k.name == name; });
    if (!known)
      return invalid_argument("--schedule: {} has no knob '{}' for {{{}}} on this target (knobs: {})", op.name(), name,
                              shape.key(), space_text(space));
    sc[name] = value;
  }
  return sc;
}

Status run_test(const OpsFlags& f) {
  LOOM_ASSIGN_OR_RETURN(const OpSpec* op, find(f.op));
  LOOM_ASSIGN_OR_RETURN(auto dev, OpDevice::open(f.device, f.threads));
  std::vector<Shape> shapes;
  if (!f.shape.empty()) {
    LOOM_ASSIGN_OR_RETURN(Shape s, Shape::parse(f.shape));
    LOOM_RETURN_IF_ERROR(op->validate(s));
    shapes.push_back(s);
  } else {
    shapes = op->test_shapes();
  }
  uint64_t seed = f.seed ? f.seed : std::random_device{}();
  std::mt19937_64 rng(seed);
  int failed = 0, total = 0;
  for (const Shape& s : shapes) {
    std::vector<Schedule> scheds;
    if (!f.schedule.empty()) {
      LOOM_ASSIGN_OR_RETURN(Schedule sc, parse_schedule(f.schedule, *op, s, dev->target()));
      scheds.push_back(sc);
    } else {
      scheds.push_back(op->default_schedule(s, dev->target()));
      for (int i = 0; i < f.random; ++i) scheds.push_back(random_schedule(op->schedule_space(s, dev->target()), rng));
    }
    for (const Schedule& sc : scheds) {
      CheckResult r = check_op(*op, s, sc, *dev, seed + static_cast<uint64_t>(total));
      ++total;
      if (!r.passed) ++failed;
      std::printf("%s %s\n", r.passed ? "PASS" : "FAIL", r.message.c_str());
    }
  }
  std::printf("%d of %d checks passed\n", total - failed, total);
  if (failed) return failed_precondition("{} of {} checks failed", failed, total);
  return Status();
}

// llm::ref::matmul on the op's own inputs, timed like the kernel (the reference's activation
// quantization included, as in the engine; the kernel is timed without quantize_act).
Result<BenchResult> bench_ref_matmul(const OpSpec& op, const Shape& s, int threads, int warmup, int reps) {
  const auto wt = static_cast<llm::GgmlType>(s.at("wtype"));
  const int64_t n_in = s.at("n_in"), n_out = s.at("n_out"), nt = s.at("n_tokens");
  auto specs = op.args(s);
  std::vector<HostArg> host(specs.size());
  std::mt19937_64 rng(3);
  op.fill_inputs(s, rng, host);
  llm::ref::WeightView w{wt, host[0].bytes.data(), n_in, n_out, static_cast<size_t>(specs[0].bytes / n_out)};
  std::vector<float> x(static_cast<size_t>(n_in * nt));
  std::uniform_real_distribution<float> d(-1, 1);
  for (float& v : x) v = d(rng);
  std::vector<float> y(static_cast<size_t>(n_out * nt));
  std::vector<uint8_t> scratch;
  ThreadPool pool(threads > 0 ? threads : default_thread_count());
  for (int i = 0; i < warmup; ++i) LOOM_RETURN_IF_ERROR(llm::ref::matmul(w, x.data(), nt, y.data(), &pool, &scratch));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    LOOM_RETURN_IF_ERROR(llm::ref::matmul(w, x.data(), nt, y.data(), &pool, &scratch));
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  const Spread sp = spread(t);
  return BenchResult{sp.median, sp.min, sp.max, reps};
}

Status run_bench(const OpsFlags& f) {
  LOOM_ASSIGN_OR_RETURN(const OpSpec* op, find(f.op));
  if (f.shape.empty()) return invalid_argument("bench needs --shape (see `loom ops list`)");
  LOOM_ASSIGN_OR_RETURN(Shape s, Shape::parse(f.shape));
  LOOM_RETURN_IF_ERROR(op->validate(s));
  LOOM_ASSIGN_OR_RETURN(auto dev, OpDevice::open(f.device, f.threads));
  LOOM_ASSIGN_OR_RETURN(Schedule sc, parse_schedule(f.schedule, *op, s, dev->target()));
  LOOM_ASSIGN_OR_RETURN(BenchResult b, bench_op(*op, s, sc, *dev, f.warmup, f.reps));
  Cost c = op->cost(s);
  nlohmann::ordered_json j = {{"op", op->name()}, {"shape", s.key()}, {"schedule", schedule_key(sc)},
                              {"device", dev->name()}, {"threads", f.threads ? f.threads : default_thread_count()},
                              {"median_us", b.median_us}, {"min_us", b.min_us}, {"max_us", b.max_us},
                              {"reps", b.reps}, {"bytes", c.bytes}, {"gb_per_s", c.bytes / b.median_us / 1e3},
                              {"gflops", c.flops / b.median_us / 1e3}};
  if (op->name() == "matvec" || op->name() == "matmul") {
    LOOM_ASSIGN_OR_RETURN(BenchResult r, bench_ref_matmul(*op, s, f.threads, f.warmup, f.reps));
    j["ref_median_us"] = r.median_us;
    j["ref_min_us"] = r.min_us;
    j["ref_max_us"] = r.max_us;
    j["speedup_vs_ref"] = r.median_us / b.median_us;
  }
  if (f.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s %s [%s] on %s: median %.1f us (min %.1f, max %.1f, %d reps), %.2f GB/s\n",
                std::string(op->name()).c_str(), s.key().c_str(), schedule_key(sc).c_str(), dev->name().c_str(),
                b.median_us, b.min_us, b.max_us, b.reps, c.bytes / b.median_us / 1e3);
    if (j.contains("ref_median_us"))
      std::printf("  llm::ref::matmul (incl. activation quantization): median %.1f us (min %.1f, max %.1f); "
                  "kernel/ref speedup %.2fx\n",
                  j["ref_median_us"].get<double>(), j["ref_min_us"].get<double>(), j["ref_max_us"].get<double>(),
                  j["speedup_vs_ref"].get<double>());
  }
  return Status();
}

// Prints the IR of one op, shape and schedule (feed it to `loom ir compile --target ... -S`).
Status run_ir(const OpsFlags& f) {
  LOOM_ASSIGN_OR_RETURN(const OpSpec* op, find(f.op));
  if (f.shape.empty()) return invalid_argument("ir needs --shape (see `loom ops list`)");
  LOOM_ASSIGN_OR_RETURN(Shape s, Shape::parse(f.shape));
  LOOM_RETURN_IF_ERROR(op->validate(s));
  auto target = ir::parse_target_kind(f.device == "cpu" ? "cpp" : f.device);
  if (!target) return invalid_argument("unknown target '{}' (cpp, ptx, amdgpu)", f.device);
  LOOM_ASSIGN_OR_RETURN(Schedule sc, parse_schedule(f.schedule, *op, s, *target));
  LOOM_ASSIGN_OR_RETURN(Generated g, op->generate(s, sc, *target));
  std::printf("// op %s shape {%s} schedule {%s} target %s\n", std::string(op->name()).c_str(), s.key().c_str(),
              schedule_key(sc).c_str(), std::string(ir::target_kind_name(*target)).c_str());
  for (const KernelLaunch& l : g.launches)
    std::printf("// launch %s grid (%u,%u,%u) block (%u,%u,%u)\n", l.kernel.c_str(), l.grid[0], l.grid[1], l.grid[2],
                l.block[0], l.block[1], l.block[2]);
  std::printf("%s", ir::print(g.module).c_str());
  return Status();
}

// `build --target amdgpu[:ARCH]`: the resource report of every kernel for ARCH (both gfx11
// archs when none is named), to stdout or --out (one file per arch: ARCH is put before the
// extension). Fails when any op shape failed to build; refused shapes are listed, not fatal.
Status run_build(const OpsFlags& f) {
  std::string_view t = f.target;
  const size_t colon = t.find(':');
  if (t.substr(0, colon) != "amdgpu") return invalid_argument("ops build: --target must be amdgpu[:ARCH], got '{}'", t);
  std::vector<std::string> archs = codegen::amdgpu_target().archs();
  if (colon != std::string_view::npos) archs = {std::string(t.substr(colon + 1))};
  int failed = 0;
  for (const std::string& arch : archs) {
    LOOM_ASSIGN_OR_RETURN(AmdgpuBuildReport r,
                          build_ops_amdgpu(arch, f.op, f.jobs > 0 ? f.jobs : default_thread_count()));
    const std::string text = format_amdgpu_report(r);
    if (f.out.empty()) {
      std::printf("%s", text.c_str());
    } else {
      std::string path = f.out;
      if (archs.size() > 1) {
        const size_t dot = path.rfind('.');
        path = dot == std::string::npos || path.find('/', dot) != std::string::npos
                   ? path + "_" + arch
                   : path.substr(0, dot) + "_" + arch + path.substr(dot);
      }
      LOOM_RETURN_IF_ERROR(write_file(path, text));
      std::fprintf(stderr, "wrote %s\n", path.c_str());
    }
    std::fprintf(stderr, "amdgpu:%s: %zu kernels built, %zu op shapes refused, %zu failed\n", arch.c_str(),
                 r.kernels.size(), r.refused.size(), r.failed.size());
    failed += static_cast<int>(r.failed.size());
  }
  if (failed) return failed_precondition("{} op shapes failed to build for amdgpu", failed);
  return Status();
}

LOOM_COMMAND(kOps, "ops", "The op library: list ops, test them against their references, time them",
             [](CLI::App& sub) -> Action {
               auto f = std::make_shared<OpsFlags>();
               auto which = std::make_shared<std::string>();
               sub.require_subcommand(1);
               auto* list = sub.add_subcommand("list", "ops with their test shapes and schedule spaces");
               list->callback([which] { *which = "list"; });
               auto* irc = sub.add_subcommand("ir", "print the Loom IR an op generates");
               irc->add_option("op", f->op, "op name")->required();
               irc->add_option("--shape", f->shape, "NAME=VALUE,...")->required();
               irc->add_option("--schedule", f->schedule, "knob values over the default schedule, NAME=VALUE,...");
               irc->add_option("--target", f->device, "cpp (default), ptx or amdgpu");
               irc->callback([which] { *which = "ir"; });
               auto* build = sub.add_subcommand("build", "compile every op for AMDGPU; report registers, LDS, spills");
               build->add_option("--target", f->target, "amdgpu (gfx1100 and gfx1151) or amdgpu:ARCH");
               build->add_option("--op", f->op, "only this op");
               build->add_option("-j,--jobs", f->jobs, "compilations at a time (default $LOOM_THREADS or 2)");
               build->add_option("-o,--out", f->out, "write the report here (ARCH added before the extension "
                                                     "when building both archs)");
               build->callback([which] { *which = "build"; });
               for (const char* name : {"test", "bench"}) {
                 auto* c = sub.add_subcommand(name, std::string(name) == "test"
                                                        ? "differential check against the reference"
                                                        : "check, then time (median of --reps after --warmup)");
                 c->add_option("op", f->op, "op name")->required();
                 c->add_option("--shape", f->shape, "NAME=VALUE,... (e.g. n_in=576,n_out=1536,n_tokens=1,wtype=3)");
                 c->add_option("--schedule", f->schedule, "knob values over the default schedule, NAME=VALUE,... (knobs left out keep their default)");
                 c->add_option("--device", f->device, "cpu, cuda[:N], amdgpu[:N] (through HRX) or cpu-direct");
                 c->add_option("--threads", f->threads, "cpu-direct and reference threads (default $LOOM_THREADS or 2)");
                 c->add_option("--seed", f->seed, "input seed (default random, printed)");
                 if (std::string(name) == "test") {
                   c->add_option("--random", f->random, "random schedules per shape besides the default");
                 } else {
                   c->add_option("--reps", f->reps, "timed repetitions");
                   c->add_option("--warmup", f->warmup, "untimed repetitions first");
                   c->add_flag("--json", f->json, "one JSON object");
                 }
                 c->callback([which, name] { *which = name; });
               }
               return [f, which]() -> int {
                 if (*which == "list") return run_list();
                 if (*which == "ir" || *which == "build") {
                   Status s = *which == "ir" ? run_ir(*f) : run_build(*f);
                   return s.ok() ? 0 : report(s);
                 }
                 Status s = *which == "test" ? run_test(*f) : run_bench(*f);
                 return s.ok() ? 0 : report(s);
               };
             });

}  // namespace
}  // namespace loom::cli
