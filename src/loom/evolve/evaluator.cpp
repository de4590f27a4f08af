// The evaluator (see evaluator.h): guarded correctness checks, rotating-working-set timing whose
// launches are checked, roofline diagnosis. Isolation of a candidate: isolation.cpp.
#include "loom/evolve/evaluator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "loom/evolve/device.h"
#include "loom/evolve/input_sets.h"
#include "loom/evolve/process_watch.h"
#include "loom/evolve/worker.h"
#include "loom/ir/passes/instrument.h"
#include "loom/kernels/op_util.h"
#include "loom/kernels/output_compare.h"

namespace loom::evolve {
namespace {

using kernels::ArgKind;
using kernels::ArgRole;
using kernels::ArgSpec;
using kernels::HostArg;
using kernels::Shape;
using clock_type = std::chrono::steady_clock;

constexpr size_t kGuard = 256;
uint8_t canary(size_t i) { return static_cast<uint8_t>(0x5A ^ (i * 29)); }
// Output poison of a trial: NaN bytes, then a large finite pattern, then a ramp.
uint8_t poison(int trial, size_t i) {
  switch (trial % 3) {
    case 0: return 0xFF;
    case 1: return 0x7E;
    default: return static_cast<uint8_t>(0x40 + (i * 7) % 64);
  }
}

// Guarded device images of every argument of one shape.
class Guarded {
 public:
  Status init(EvalDevice& d, const std::vector<ArgSpec>& specs) {
    d_ = &d;
    specs_ = specs;
    for (const ArgSpec& s : specs) {
      const size_t n = s.kind == ArgKind::kBuffer ? static_cast<size_t>(s.bytes) : 0;
      LOOM_ASSIGN_OR_RETURN(hrx::Buffer b, hrx::Buffer::alloc(d.device(), n + 2 * kGuard));
      bufs_.push_back(std::move(b));
      img_.emplace_back(n + 2 * kGuard);
    }
    return Status();
  }
  // Inputs from `host`, outputs poisoned with `trial`'s pattern, canaries around everything.
  Status upload(const std::vector<HostArg>& host, int trial) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      std::vector<uint8_t>& m = img_[i];
      const size_t n = m.size() - 2 * kGuard;
      // Canaries in the guards only: the middle is written below (inputs copied, outputs poisoned).
      for (size_t j = 0; j < kGuard; ++j) m[j] = canary(j);
      for (size_t j = kGuard + n; j < m.size(); ++j) m[j] = canary(j);
      if (specs_[i].role == ArgRole::kOutput || specs_[i].role == ArgRole::kScratch || host[i].bytes.size() != n) {
        for (size_t j = 0; j < n; ++j) m[kGuard + j] = poison(trial, j);
      } else if (n) {
        std::memcpy(m.data() + kGuard, host[i].bytes.data(), n);
      }
      LOOM_RETURN_IF_ERROR(d_->stream().copy_h2d(bufs_[i], 0, m.data(), m.size()));
    }
    return d_->stream().synchronize();
  }
  Status download() {
    for (size_t i = 0; i < specs_.size(); ++i)
      LOOM_RETURN_IF_ERROR(d_->stream().copy_d2h(img_[i].data(), bufs_[i], 0, img_[i].size()));
    return d_->stream().synchronize();
  }
  std::vector<uint64_t> addrs() const {
    std::vector<uint64_t> a;
    for (const auto& b : bufs_) a.push_back(b.address() + kGuard);
    return a;
  }
  const uint8_t* data(size_t i) const { return img_[i].data() + kGuard; }
  std::string guard_damage() const {
    for (size_t i = 0; i < specs_.size(); ++i) {
      const std::vector<uint8_t>& m = img_[i];
      const size_t n = m.size() - 2 * kGuard;
      for (size_t j = 0; j < m.size(); j = j + 1 == kGuard ? kGuard + n : j + 1) {
        if (m[j] != canary(j))
          return fmt::format("guard: wrote outside its outputs (guard byte {} {} buffer '{}')",
                             j < kGuard ? kGuard - j : j - kGuard - n + 1, j < kGuard ? "before" : "after", specs_[i].name);
      }
    }
    return {};
  }

 private:
  EvalDevice* d_ = nullptr;
  std::vector<ArgSpec> specs_;
  std::vector<hrx::Buffer> bufs_;
  std::vector<std::vector<uint8_t>> img_;
};

// Compares outputs with the reference (kernels::compare_outputs, as the op harness does); empty
// when within tolerance, else "<tag>: detail". `prev` (the previous trial's reference outputs,
// may be empty) names cached results.
std::string compare(const std::vector<ArgSpec>& specs, const Guarded& g, const std::vector<HostArg>& in,
                    const std::vector<HostArg>& want, const std::vector<HostArg>* prev, int trial,
                    const kernels::Tolerance& tol) {
  std::vector<const uint8_t*> got(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) got[i] = g.data(i);
  const kernels::OutputComparison c = kernels::compare_outputs(specs, got, in, want, tol);
  using Kind = kernels::OutputComparison::Kind;
  if (c.kind == Kind::kOk) return {};
  if (c.kind == Kind::kInputModified) return "input: " + c.message;
  if (c.kind == Kind::kBadReference) return "wrong: " + c.message;
  // Why the element is wrong: poison left in place, or an earlier launch's answer, or just wrong.
  const size_t i = c.arg, es = c.elem_bytes, n = static_cast<size_t>(specs[i].bytes);
  const uint8_t* out = got[i];
  size_t same_poison = 0, same_prev = 0, total = 0;
  for (size_t k = c.offset; k + es <= n && total < 64; k += es, ++total) {
    bool p = true;
    for (size_t b = 0; b < es; ++b) p = p && out[k + b] == poison(trial, k + b);
    same_poison += p;
    if (prev && (*prev)[i].bytes.size() == n) same_prev += std::memcmp(out + k, (*prev)[i].bytes.data() + k, es) == 0;
  }
  if (same_poison * 2 > total)
    return fmt::format("stale: output '{}' element {} still holds the poison written before the launch (not computed)",
                       specs[i].name, c.offset / es);
  if (same_prev * 2 > total)
    return fmt::format("cached: output '{}' element {} holds the previous launch's answer, not this input's",
                       specs[i].name, c.offset / es);
  return "wrong: " + c.message;
}

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

// The op's tolerance, or none at all when the job asks for the reference's exact bytes.
kernels::Tolerance tolerance_of(const kernels::OpSpec& op, const Shape& shape, const EvalOptions& opt) {
  kernels::Tolerance t = op.tolerance(shape);
  if (opt.exact) t = kernels::Tolerance{0, 0, true};
  return t;
}

struct ShapeRun {
  std::vector<ArgSpec> specs;
  EvalDevice::Loaded loaded;
  Guarded g;
};

Result<ShapeRun> prepare(EvalDevice& dev, const kernels::OpSpec& op, const Shape& shape, const Candidate& c) {
  ShapeRun r;
  r.specs = op.args(shape);
  LOOM_ASSIGN_OR_RETURN(Instance inst, instantiate(c, op, shape, dev.target()));
  LOOM_ASSIGN_OR_RETURN(r.loaded, dev.load(inst));
  LOOM_RETURN_IF_ERROR(r.g.init(dev, r.specs));
  return r;
}

// One trial: the set's inputs, poisoned outputs, launch, checks. Returns "" or "<tag>: ...".
Result<std::string> trial(EvalDevice& dev, const kernels::OpSpec& op, const Shape& shape, ShapeRun& r,
                          const InputSet& set, int t, const std::vector<HostArg>* prev_ref, Phases& ph, const ProcessWatch& w,
                          const EvalOptions& opt) {
  {
    Lap lap(ph, "upload");
    LOOM_RETURN_IF_ERROR(r.g.upload(set.in, t));
  }
  {
    Lap lap(ph, "launch");
    LOOM_RETURN_IF_ERROR(dev.run(r.loaded, r.g.addrs()).with_context("run"));
  }
  if (std::string a = after_launch(w); !a.empty()) return a;
  Lap lap(ph, "check");
  LOOM_RETURN_IF_ERROR(r.g.download());
  if (std::string gd = r.g.guard_damage(); !gd.empty()) return gd;
  return compare(r.specs, r.g, set.in, set.ref, prev_ref, t, tolerance_of(op, shape, opt));
}

// A rejection found by after_launch (the kernel's code is still loaded: see abandon).
bool launch_state(const std::string& why) { return why.rfind("async:", 0) == 0 || why.rfind("tamper:", 0) == 0; }

EvalResult reject(EvalResult r, std::string reason) {
  r.status = "rejected";
  r.reason = std::move(reason);
  return r;
}

// Where the time goes inside the kernel: the first launch's kernel instrumented with cycle
// counters (ir::instrument_regions), run `reps` times over the timing working set; the shares
// of the regions as text, or why not.
std::string measure_regions(EvalDevice& dev, const kernels::OpSpec& op, const Shape& shape, const Candidate& c,
                            const std::vector<std::vector<uint64_t>>& all_addrs, int reps) {
  if (c.kind != CandKind::kSchedule && c.kind != CandKind::kIr) return "not measured: only Loom IR kernels are instrumented";
  auto inst = instantiate(c, op, shape, dev.target());
  if (!inst.ok()) return "not measured: " + inst.status().to_string();
  if (inst->kind != CandKind::kSchedule && inst->kind != CandKind::kIr)
    return "not measured: the candidate is C++ text (only Loom IR kernels are instrumented)";
  if (inst->launches.empty()) return "not measured: no launch";
  kernels::KernelLaunch& l0 = inst->launches[0];
  ir::Kernel* k = inst->gen.module.find(l0.kernel);
  if (!k) return "not measured: no kernel " + l0.kernel;
  auto info = ir::instrument_regions(*k, l0.args.size());
  if (!info.ok()) return "not measured: " + info.status().to_string();
  const size_t nargs = all_addrs.empty() ? 0 : all_addrs[0].size();
  l0.args.push_back(static_cast<int>(nargs));  // the profile buffer, after the op's arguments
  inst->gen.launches = inst->launches;
  auto loaded = dev.load(*inst);
  if (!loaded.ok()) return "not measured: instrumented kernel: " + loaded.status().to_string();
  const uint64_t blocks = uint64_t{l0.grid[0]} * l0.grid[1] * l0.grid[2];
  const uint64_t bytes = blocks * ir::kInstrumentRegions * 4;
  auto buf = hrx::Buffer::alloc(dev.device(), bytes);
  if (!buf.ok()) return "not measured: " + buf.status().to_string();
  if (Status st = dev.stream().memset(*buf, 0, 0, bytes); !st.ok()) return "not measured: " + st.to_string();
  for (int i = 0; i < reps; ++i) {
    std::vector<uint64_t> a = all_addrs[static_cast<size_t>(i) % all_addrs.size()];
    a.push_back(buf->address());
    if (Status st = dev.run(*loaded, a); !st.ok()) return "not measured: " + st.to_string();
  }
  std::vector<uint32_t> host(blocks * ir::kInstrumentRegions);
  if (Status st = dev.stream().copy_d2h(host.data(), *buf, 0, bytes); !st.ok()) return "not measured: " + st.to_string();
  (void)dev.stream().synchronize();
  double sum[ir::kInstrumentRegions] = {}, total = 0;
  for (uint64_t b = 0; b < blocks; ++b)
    for (int r = 0; r < ir::kInstrumentRegions; ++r) sum[r] += host[b * ir::kInstrumentRegions + static_cast<uint64_t>(r)];
  for (double v : sum) total += v;
  if (total <= 0) return "not measured: the counters stayed at zero";
  std::string out;
  for (int r = 0; r < ir::kInstrumentRegions; ++r) {
    if (!info->has_loop && (r == 1 || r == 2)) continue;
    out += fmt::format("{}{} {:.0f}%", out.empty() ? "" : ", ", ir::instrument_region_name(r), 100 * sum[r] / total);
  }
  return out + fmt::format(" (cycle counters of thread 0 per block, kernel {}, {} launches)", l0.kernel, reps);
}

}  // namespace

std::string EvalResult::to_json() const {
  nlohmann::json j = {{"status", status}, {"reason", reason}, {"median_us", median_us}, {"p10_us", p10_us},
                      {"p90_us", p90_us}, {"reps", reps}, {"timed_checks", timed_checks}, {"timing_sets", timing_sets}, {"gbps", gbps}, {"frac_peak", frac_peak},
                      {"diagnosis", diagnosis}, {"eval_s", eval_s}, {"ws_bytes", ws_bytes}, {"regions", regions}, {"phases", phases}};
  return j.dump();
}

EvalResult EvalResult::from_json(std::string_view text) {
  EvalResult r;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    r.status = "error";
    r.reason = "evaluation process returned no result";
    return r;
  }
  r.status = j.value("status", "error");
  r.reason = j.value("reason", "");
  r.median_us = j.value("median_us", 0.0);
  r.p10_us = j.value("p10_us", 0.0);
  r.p90_us = j.value("p90_us", 0.0);
  r.reps = j.value("reps", 0);
  r.timed_checks = j.value("timed_checks", 0);
  r.timing_sets = j.value("timing_sets", 0);
  r.gbps = j.value("gbps", 0.0);
  r.frac_peak = j.value("frac_peak", 0.0);
  r.diagnosis = j.value("diagnosis", "");
  r.eval_s = j.value("eval_s", 0.0);
  r.ws_bytes = j.value("ws_bytes", uint64_t{0});
  r.regions = j.value("regions", "");
  r.phases = j.value("phases", "");
  return r;
}

std::vector<Shape> holdout_shapes(const kernels::OpSpec& op, const Shape& shape, int max,
                                  const std::function<bool(const Shape&)>& fits) {
  auto is_size = [](const std::string& name, int64_t v) {
    return v >= 2 && name.find("type") == std::string::npos && name.find("_f32") == std::string::npos &&
           name.rfind("has_", 0) != 0 && name != "mode" && name != "n_tokens" && name != "add";
  };
  std::vector<Shape> out;
  auto push = [&](const Shape& s) {
    if (static_cast<int>(out.size()) >= max || s.key() == shape.key()) return;
    for (const Shape& o : out)
      if (o.key() == s.key()) return;
    out.push_back(s);
  };
  // The op's smallest test shape of the same class first: cheap and usually odd.
  const std::vector<Shape> tests = op.test_shapes();  // `smallest` points into it
  const Shape* smallest = nullptr;
  int64_t smallest_size = 0;
  for (const Shape& t : tests) {
    if (t.dims.size() != shape.dims.size()) continue;
    bool same = true;
    int64_t size = 1;
    for (const auto& [n, v] : shape.dims) {
      auto it = t.dims.find(n);
      if (it == t.dims.end() || (!is_size(n, v) && it->second != v)) same = false;
      else if (is_size(n, v)) size *= std::max<int64_t>(1, it->second);
    }
    if (same && t.key() != shape.key() && op.validate(t).ok() && (!smallest || size < smallest_size) && (!fits || fits(t))) {
      smallest = &t;
      smallest_size = size;
    }
  }
  if (smallest) push(*smallest);
  // Each size dimension moved to a nearby valid value (odd first).
  for (const auto& [n, v] : shape.dims) {
    if (!is_size(n, v)) continue;
    for (int64_t delta : {1, 3, -1, 32, -32, 96, 160, 256}) {
      Shape s = shape;
      s.dims[n] = v + delta;
      if (s.dims[n] < 1 || !op.validate(s).ok() || (fits && !fits(s))) continue;
      push(s);
      break;
    }
  }
  return out;
}

Result<std::string> differs_in_bits(EvalDevice& dev, const kernels::OpSpec& op, const Shape& shape, const Candidate& a,
                                    const Candidate& b, int trials, uint64_t seed) {
  LOOM_ASSIGN_OR_RETURN(ShapeRun ra, prepare(dev, op, shape, a));
  LOOM_ASSIGN_OR_RETURN(ShapeRun rb, prepare(dev, op, shape, b));
  std::mt19937_64 rng(seed);
  for (int t = 0; t < trials; ++t) {
    std::vector<HostArg> in(ra.specs.size());
    op.fill_inputs(shape, rng, in);
    for (ShapeRun* r : {&ra, &rb}) {
      LOOM_RETURN_IF_ERROR(r->g.upload(in, t));
      LOOM_RETURN_IF_ERROR(dev.run(r->loaded, r->g.addrs()).with_context("run"));
      LOOM_RETURN_IF_ERROR(r->g.download());
    }
    for (size_t i = 0; i < ra.specs.size(); ++i) {
      if (ra.specs[i].role != ArgRole::kOutput) continue;
      const size_t n = static_cast<size_t>(ra.specs[i].bytes);
      const uint8_t *x = ra.g.data(i), *y = rb.g.data(i);
      for (size_t k = 0; k < n; ++k)
        if (x[k] != y[k])
          return fmt::format("output '{}' byte {} differs (trial {} of {})", ra.specs[i].name, k, t + 1, trials);
    }
  }
  return std::string();
}

EvalResult evaluate(EvalDevice& dev, const kernels::OpSpec& op, const Shape& shape, const Candidate& c,
                    const EvalOptions& opt) {
  const auto t_start = clock_type::now();
  EvalResult r;
  Phases ph;
  // The phase notes carry the time spent so far: a killed evaluation still says where it went.
  auto phase = [&](const std::string& what) {
    const std::string so_far = ph.str();
    note_phase(so_far.empty() ? what : what + " (so far: " + so_far + ")");
  };
  auto done = [&](EvalResult x) {
    x.eval_s = std::chrono::duration<double>(clock_type::now() - t_start).count();
    x.phases = ph.str();
    return x;
  };
  if (Status s = op.validate(shape); !s.ok()) {
    r.reason = s.to_string();
    return done(r);
  }
  const ProcessWatch watch = watch_process(dev.props().driver == hrx::DriverKind::kCpu);
  phase("compile");
  auto prep = [&] {
    Lap lap(ph, "compile");
    return prepare(dev, op, shape, c);
  }();
  if (!prep.ok()) {
    r.status = "compile_error";
    r.reason = prep.status().to_string();
    return done(r);
  }
  ShapeRun& run = *prep;
  // A kernel that left threads running is never unloaded: its threads run its code, and its
  // static objects' destructors (a condition variable they wait on) could hang the unload.
  // The evaluation's process ends soon after (an isolated child, a worker that restarts).
  auto abandon = [&](EvalResult x, ShapeRun* other = nullptr) {
    if (x.tag() == "async" || x.tag() == "tamper") {
      new ShapeRun(std::move(run));  // deliberately leaked
      if (other) new ShapeRun(std::move(*other));
    }
    return done(std::move(x));
  };
  InputSet first;
  std::vector<HostArg> prev_ref;
  phase("trials");
  for (int t = 0; t < std::max(1, opt.trials); ++t) {
    // Fresh trials draw from this candidate's seed; the others from the job's pool.
    const bool fresh = t < opt.fresh_trials;
    auto set = input_set(op, shape, run.specs, mix(fresh ? opt.seed : opt.pool_seed, static_cast<uint64_t>(t)), !fresh,
                         opt, ph);
    if (!set.ok()) {
      r.reason = set.status().to_string();
      return done(r);
    }
    auto bad = trial(dev, op, shape, run, *set, t, t ? &prev_ref : nullptr, ph, watch, opt);
    if (!bad.ok()) {
      r.reason = bad.status().to_string();
      return done(r);
    }
    if (!bad->empty()) return abandon(reject(r, *bad));
    prev_ref = set->ref;
    if (t == 0) first = std::move(*set);
  }
  // Launch order and history: the first inputs again, twice, after the others.
  for (int again = 0; again < 2; ++again) {
    auto bad = trial(dev, op, shape, run, first, 3 + again, nullptr, ph, watch, opt);
    if (!bad.ok()) {
      r.reason = bad.status().to_string();
      return done(r);
    }
    if (!bad->empty() && launch_state(*bad)) return abandon(reject(r, *bad));
    if (!bad->empty())
      return done(reject(r, fmt::format("order: repeating the first launch gave another answer ({})", *bad)));
  }
  // Special values, where the op's reference defines them: infinities, NaNs, -0.0, denormals
  // and extremes mixed into the inputs (a fresh set: never one the earlier trials showed).
  bool any_special = false;
  for (size_t i = 0; i < run.specs.size(); ++i) any_special = any_special || op.special_values(shape, i);
  if (any_special) {
    phase("special values");
    auto set = input_set(op, shape, run.specs, mix(opt.seed, 0x5BEC), false, opt, ph, /*specials=*/true);
    if (!set.ok()) {
      r.reason = set.status().to_string();
      return done(r);
    }
    auto bad = trial(dev, op, shape, run, *set, 5, nullptr, ph, watch, opt);
    if (!bad.ok()) {
      r.reason = bad.status().to_string();
      return done(r);
    }
    if (!bad->empty() && launch_state(*bad)) return abandon(reject(r, *bad));
    if (!bad->empty())
      return done(reject(r, fmt::format("special: wrong where the inputs hold special values (inf, NaN, -0.0, denormals, "
                                        "extremes), which this op's reference defines ({})",
                                        *bad)));
  }
  for (size_t h = 0; h < opt.holdout.size(); ++h) {
    const Shape& hs = opt.holdout[h];
    phase("holdout {" + hs.key() + "}");
    auto hp = [&] {
      Lap lap(ph, "compile");
      return prepare(dev, op, hs, c);
    }();
    if (!hp.ok())
      return done(reject(r, fmt::format("holdout: does not build for held-out shape {{{}}}: {}", hs.key(),
                                        hp.status().to_string())));
    auto set = input_set(op, hs, hp->specs, mix(opt.pool_seed, 100 + h), true, opt, ph);
    if (!set.ok())
      return done(reject(r, fmt::format("holdout: fails on held-out shape {{{}}}: {}", hs.key(), set.status().to_string())));
    auto bad = trial(dev, op, hs, *hp, *set, static_cast<int>(h), nullptr, ph, watch, opt);
    if (!bad.ok())
      return done(reject(r, fmt::format("holdout: fails on held-out shape {{{}}}: {}", hs.key(), bad.status().to_string())));
    if (!bad->empty() && launch_state(*bad)) return abandon(reject(r, *bad), &*hp);
    if (!bad->empty()) return done(reject(r, fmt::format("holdout: wrong on held-out shape {{{}}} ({})", hs.key(), *bad)));
  }
  if (!opt.time) {
    r.status = "ok";
    return done(r);
  }
  phase("timing");
  // Timing over a working set larger than the last-level cache: `copies` images of every
  // buffer argument, launches rotating through them so that every launch streams its inputs
  // from memory and writes outputs that nothing else touched. The inputs of the images are
  // sets that the trials never showed, in turn, and each pass over the working set moves
  // every image on to the next set (copied from pristine device images, outside the timed
  // launches): no launch sees the inputs its image held the last time, so an answer kept from
  // an earlier launch is wrong, and answers kept per set need memory that the judge measures.
  // After a launch returns the judge decides, at random, whether to check that launch's outputs
  // right away (before any further launch), and it always checks the last one: a kernel cannot
  // know which of its timed launches are verified, or do less work once the trials are over.
  std::optional<Lap> setup_lap(std::in_place, ph, "timing setup");
  uint64_t in_bytes = 0, all_bytes = 0;
  for (const ArgSpec& s : run.specs) {
    if (s.kind != ArgKind::kBuffer) continue;
    all_bytes += static_cast<uint64_t>(s.bytes);
    if (s.role == ArgRole::kInput || s.role == ArgRole::kInOut) in_bytes += static_cast<uint64_t>(s.bytes);
  }
  const uint64_t cap = dev.props().driver == hrx::DriverKind::kCuda ? (8ull << 30) : (1ull << 30);
  uint64_t copies = in_bytes ? static_cast<uint64_t>(std::ceil(opt.ws_factor * static_cast<double>(dev.llc_bytes()) /
                                                               static_cast<double>(in_bytes)))
                             : 1;
  copies = std::clamp<uint64_t>(copies, 1, std::max<uint64_t>(1, std::min<uint64_t>(4096, cap / std::max<uint64_t>(1, all_bytes))));
  r.ws_bytes = copies * in_bytes;
  auto fail = [&](const Status& st) {
    r.reason = st.to_string();
    return done(r);
  };
  // As many sets as the working set has images (every image its own inputs), within 512 MiB of
  // host copies and about a second of making them, at least 3 (opt.timing_sets overrides). Few
  // sets come from the job's pool; many small ones are made here, from the candidate's seed.
  // They hold inputs only: the answer for a timed launch is computed after it returned, and
  // only for the launches that are checked, so no answer exists anywhere while a launch runs.
  const uint64_t want_sets =
      opt.timing_sets > 0 ? static_cast<uint64_t>(opt.timing_sets)
                          : std::clamp<uint64_t>(std::min<uint64_t>(copies, (512ull << 20) / std::max<uint64_t>(1, in_bytes)), 3, 4096);
  const bool pool_sets = want_sets <= 8;
  std::vector<InputSet> sets;
  const auto sets_t0 = clock_type::now();
  const int made0 = ph.made, pooled0 = ph.pooled;
  for (uint64_t j = 0; j < want_sets; ++j) {
    if (j >= 3 && opt.timing_sets <= 0 && std::chrono::duration<double>(clock_type::now() - sets_t0).count() > 1.0) break;
    auto set = input_set(op, shape, run.specs, mix(pool_sets ? opt.pool_seed : opt.seed, 0x71AE + j), pool_sets, opt, ph,
                         /*specials=*/false, /*reference=*/false);
    if (!set.ok()) return fail(set.status());
    sets.push_back(std::move(*set));
  }
  const uint64_t n_sets = sets.size();
  r.timing_sets = static_cast<int>(n_sets);
  ph.made = made0;
  ph.pooled = pooled0;
  ph.timing = static_cast<int>(n_sets);
  std::vector<hrx::Buffer> bufs, pristine;  // per argument: `copies` images; the sets' inputs
  std::vector<uint64_t> stride;
  std::vector<bool> fed;  // arguments whose images hold a set's inputs
  std::vector<size_t> mark_bytes;  // > 0: float inputs whose elements each launch changes (element bytes)
  for (size_t i = 0; i < run.specs.size(); ++i) {
    const ArgSpec& s = run.specs[i];
    const uint64_t st = (static_cast<uint64_t>(std::max<int64_t>(s.bytes, 1)) + 255) / 256 * 256;
    auto b = hrx::Buffer::alloc(dev.device(), st * copies);
    if (!b.ok()) return fail(b.status());
    const bool input = s.kind == ArgKind::kBuffer && (s.role == ArgRole::kInput || s.role == ArgRole::kInOut) &&
                       s.bytes > 0 && sets[0].in[i].bytes.size() == static_cast<size_t>(s.bytes);
    hrx::Buffer p;
    if (input) {
      auto pb = hrx::Buffer::alloc(dev.device(), st * n_sets);
      if (!pb.ok()) return fail(pb.status());
      for (uint64_t k = 0; k < n_sets; ++k)
        if (Status st2 = dev.stream().copy_h2d(*pb, k * st, sets[k].in[i].bytes.data(), sets[k].in[i].bytes.size());
            !st2.ok())
          return fail(st2);
      p = std::move(*pb);
    } else if (s.kind == ArgKind::kBuffer) {
      // Finite poison (not NaN): an element left unwritten never matches, whatever the reference says.
      if (Status st2 = dev.stream().memset(*b, 0, 0x7E, st * copies); !st2.ok()) return fail(st2);
    }
    bufs.push_back(std::move(*b));
    pristine.push_back(std::move(p));
    stride.push_back(st);
    fed.push_back(input);
    const size_t es = s.elem == ir::Scalar::kF32 ? 4 : s.elem == ir::Scalar::kF16 || s.elem == ir::Scalar::kBF16 ? 2 : 0;
    mark_bytes.push_back(input && opt.perturb && n_sets > 1 && s.bytes >= static_cast<int64_t>(es) ? es : 0);
  }
  std::vector<uint64_t> held(copies);  // the set each image holds now
  auto refresh = [&](uint64_t pass) -> Status {
    for (uint64_t k = 0; k < copies; ++k) {
      held[k] = (k + pass) % n_sets;
      for (size_t i = 0; i < run.specs.size(); ++i)
        if (fed[i])
          LOOM_RETURN_IF_ERROR(dev.stream().copy_d2d(bufs[i], k * stride[i], pristine[i], held[k] * stride[i],
                                                     static_cast<uint64_t>(run.specs[i].bytes)));
    }
    return dev.stream().synchronize();
  };
  if (Status st = refresh(0); !st.ok()) return fail(st);
  auto addrs_of = [&](uint64_t k) {
    std::vector<uint64_t> a;
    for (size_t i = 0; i < bufs.size(); ++i) a.push_back(bufs[i].address() + stride[i] * k);
    return a;
  };
  std::vector<std::vector<uint64_t>> all_addrs;
  for (uint64_t k = 0; k < copies; ++k) all_addrs.push_back(addrs_of(k));
  // Every launch's inputs are new: before it (outside the timed region) a few random elements of
  // each float input of its image take the value another set holds there, so no two launches
  // see the same inputs and an answer kept from an earlier launch, found anywhere (a cache, a
  // file, another image's output), is wrong where they changed.
  struct Mark {
    size_t arg;
    uint64_t offset;  // bytes into the argument
    uint64_t from;    // the set whose element it took
  };
  std::mt19937_64 marker(mix(opt.seed, 0x3A4C));
  std::vector<Mark> marks;  // the marks of the launch that ran last
  auto mark = [&](uint64_t k) -> Status {
    marks.clear();
    for (size_t i = 0; i < run.specs.size(); ++i) {
      const size_t es = mark_bytes[i];
      if (!es) continue;
      const uint64_t n = static_cast<uint64_t>(run.specs[i].bytes) / es;
      for (int m = 0; m < 4; ++m) {
        const uint64_t e = marker() % n, from = (held[k] + 1 + marker() % (n_sets - 1)) % n_sets;
        marks.push_back(Mark{i, e * es, from});
        LOOM_RETURN_IF_ERROR(dev.stream().copy_h2d(bufs[i], k * stride[i] + e * es, sets[from].in[i].bytes.data() + e * es, es));
      }
    }
    return marks.empty() ? Status() : dev.stream().synchronize();
  };
  // The reference for the launch that ran last on image k: its set's inputs with its marks.
  // On the cpu the host buffers are made (and the reference run once) before timing starts, so
  // the judge's own allocations do not count as the kernel's memory below.
  std::vector<HostArg> want(run.specs.size());
  auto reference_of = [&](uint64_t k) -> Status {
    for (size_t i = 0; i < run.specs.size(); ++i) want[i].bytes = sets[held[k]].in[i].bytes;
    for (const Mark& m : marks)
      std::memcpy(want[m.arg].bytes.data() + m.offset, sets[m.from].in[m.arg].bytes.data() + m.offset, mark_bytes[m.arg]);
    return op.reference(shape, want).with_context("reference");
  };
  if (watch.on)
    if (Status st = reference_of(0); !st.ok()) return fail(st);  // no marks yet: set 0 as it is
  // Checks image k's outputs (and in/out buffers) against the reference of the inputs it held.
  // Pure inputs are not read back (the trials checked that they stay untouched; the next pass
  // overwrites them anyway), which keeps a check cheap next to an 8B-shape weight matrix.
  std::vector<std::vector<uint8_t>> host_img(run.specs.size());
  for (size_t i = 0; i < run.specs.size(); ++i)
    if (run.specs[i].kind == ArgKind::kBuffer && run.specs[i].role != ArgRole::kScratch &&
        run.specs[i].role != ArgRole::kInput)
      host_img[i].resize(static_cast<size_t>(run.specs[i].bytes));
  const std::vector<HostArg> no_inputs(run.specs.size());
  auto verify = [&](uint64_t k, uint64_t launch) -> Result<std::string> {
    std::vector<const uint8_t*> got(run.specs.size(), nullptr);
    for (size_t i = 0; i < run.specs.size(); ++i) {
      if (host_img[i].empty()) continue;
      LOOM_RETURN_IF_ERROR(dev.stream().copy_d2h(host_img[i].data(), bufs[i], k * stride[i], host_img[i].size()));
      got[i] = host_img[i].data();
    }
    LOOM_RETURN_IF_ERROR(dev.stream().synchronize());
    LOOM_RETURN_IF_ERROR(reference_of(k));
    for (size_t i = 0; i < run.specs.size(); ++i)  // compare_outputs never reads a pure input's reference
      if (run.specs[i].role == ArgRole::kInput) want[i].bytes.clear();
    const kernels::OutputComparison c = kernels::compare_outputs(run.specs, got, no_inputs, want, tolerance_of(op, shape, opt));
    if (c.ok()) return std::string();
    return fmt::format("timed: timed launch {} (working-set image {} of {}, inputs of set {} of {} with {} elements "
                       "changed for this launch) answered wrongly: {}",
                       launch, k, copies, held[k] + 1, n_sets, marks.size(), c.message);
  };
  // After the check (or not), the launch's outputs are poisoned, so that no answer stays in
  // memory for a later launch to find; the byte alternates (NaN, then a large finite value).
  auto poison_outputs = [&](uint64_t k, uint64_t launch) -> Status {
    for (size_t i = 0; i < run.specs.size(); ++i)
      if (run.specs[i].kind == ArgKind::kBuffer && run.specs[i].role != ArgRole::kInput && run.specs[i].bytes > 0)
        LOOM_RETURN_IF_ERROR(dev.stream().memset(bufs[i], k * stride[i], launch % 2 ? 0xFF : 0x7E,
                                                 static_cast<uint64_t>(run.specs[i].bytes)));
    return dev.stream().synchronize();
  };
  std::mt19937_64 chooser(std::random_device{}());  // which launches are checked: drawn after each returns
  constexpr int kChecks = 24;                       // expected checks per evaluation, spread over all of it
  int checks = 0;
  // Memory the kernel keeps for itself while it is timed (cpu: this process's resident bytes;
  // the judge allocated everything it needs above): answers kept between launches need it.
  const uint64_t rss0 = watch.on ? resident_bytes() : 0;
  setup_lap.reset();
  std::optional<Lap> time_lap(std::in_place, ph, "timing");
  uint64_t launch = 0;  // launches so far: image launch % copies, pass launch / copies
  double untimed_s = 0;  // the loop's own work between launches (marks, checks, poison)
  auto next = [&](double* us) -> Result<std::string> {
    const uint64_t k = launch % copies;
    const auto p0 = clock_type::now();
    if (k == 0 && launch > 0) LOOM_RETURN_IF_ERROR(refresh(launch / copies));
    LOOM_RETURN_IF_ERROR(mark(k));
    auto a = clock_type::now();
    LOOM_RETURN_IF_ERROR(dev.run(run.loaded, all_addrs[k]));
    const auto b = clock_type::now();
    if (us) *us = std::chrono::duration<double, std::micro>(b - a).count();
    untimed_s += std::chrono::duration<double>(a - p0).count();
    ++launch;
    return after_launch(watch);
  };
  const uint64_t warm = std::min<uint64_t>(copies, 64) + 3;
  std::vector<double> warm_us;
  for (uint64_t i = 0; i < warm; ++i) {
    double us = 0;
    auto w = next(&us);
    if (!w.ok()) return fail(w.status());
    if (!w->empty()) return abandon(reject(r, *w));
    warm_us.push_back(us);
    if (Status st = poison_outputs((launch - 1) % copies, launch - 1); !st.ok()) return fail(st);
  }
  // The launches the budget will allow, from the warm-up's median: checks spread over them all.
  std::nth_element(warm_us.begin(), warm_us.begin() + warm_us.size() / 2, warm_us.end());
  const double expect_reps = std::clamp(opt.time_budget_s * 1e6 / std::max(1e-3, warm_us[warm_us.size() / 2]),
                                        static_cast<double>(opt.min_reps), static_cast<double>(opt.max_reps));
  std::bernoulli_distribution check_this(std::min(1.0, kChecks / expect_reps));
  std::vector<double> t;
  double checked_s = 0;
  const auto t0 = clock_type::now();
  untimed_s = 0;
  while (static_cast<int>(t.size()) < opt.max_reps) {
    double us = 0;
    auto w = next(&us);
    if (!w.ok()) return fail(w.status());
    if (!w->empty()) return abandon(reject(r, *w));
    t.push_back(us);
    const bool last = static_cast<int>(t.size()) >= opt.max_reps ||
                      (static_cast<int>(t.size()) >= opt.min_reps &&
                       std::chrono::duration<double>(clock_type::now() - t0).count() - checked_s - untimed_s >
                           opt.time_budget_s);
    // A check costs a reference: past max(0.5 s, twice the timing budget) of checks (big
    // shapes), only the last launch is checked beyond the first three.
    const auto c0 = clock_type::now();
    const bool affordable = checks < 3 || checked_s < std::max(0.5, 2 * opt.time_budget_s);
    if (last || (checks < 2 * kChecks && affordable && check_this(chooser))) {
      auto bad = verify((launch - 1) % copies, launch - 1);
      if (!bad.ok()) return fail(bad.status());
      if (!bad->empty()) return done(reject(r, *bad));
      ++checks;
    }
    if (Status st = poison_outputs((launch - 1) % copies, launch - 1); !st.ok()) return fail(st);
    checked_s += std::chrono::duration<double>(clock_type::now() - c0).count();
    if (last) break;
  }
  time_lap.reset();
  r.timed_checks = checks;
  if (rss0 > 0) {
    uint64_t out_bytes = 0;
    for (const ArgSpec& s : run.specs)
      if (s.kind == ArgKind::kBuffer && s.role != ArgRole::kInput) out_bytes += static_cast<uint64_t>(s.bytes);
    const uint64_t rss1 = resident_bytes();
    const uint64_t grown = rss1 - std::min(rss1, rss0);
    const uint64_t allowed = (8ull << 20) + out_bytes;
    if (grown > allowed)
      return done(reject(r, fmt::format("memory: the process grew by {:.1f} MiB while the kernel was timed (allowed {:.1f} "
                                        "MiB): a kernel keeps no copies of inputs or answers between launches",
                                        static_cast<double>(grown) / (1 << 20), static_cast<double>(allowed) / (1 << 20))));
  }
  std::sort(t.begin(), t.end());
  r.reps = static_cast<int>(t.size());
  r.median_us = t[t.size() / 2];
  r.p10_us = t[t.size() / 10];
  r.p90_us = t[t.size() * 9 / 10];
  const kernels::Cost cost = op.cost(shape);
  r.gbps = cost.bytes / r.median_us / 1e3;
  if (opt.peak_gbps > 0) r.frac_peak = r.gbps / opt.peak_gbps;
  if (opt.peak_gbps > 0 && r.gbps > opt.floor_margin * opt.peak_gbps) {
    // The job's peak may have been measured while the machine was busier than it is now (a
    // shared machine, parallel tests): before flagging, measure the peak again here, under the
    // conditions the candidate was just timed in, and flag only above both measurements.
    Result<double> fresh = measure_read_gbps(dev);
    const double peak = std::max(opt.peak_gbps, fresh.ok() ? *fresh : 0.0);
    if (r.gbps > opt.floor_margin * peak)
      return done(reject(r, fmt::format("floor: {:.2f} us moves {:.0f} bytes at {:.1f} GB/s, above the measured peak {:.1f} "
                                        "GB/s (job) / {:.1f} GB/s (measured again now) by more than {:.0f}%: faster than "
                                        "physically possible (flagged, not accepted)",
                                        r.median_us, cost.bytes, r.gbps, opt.peak_gbps, fresh.ok() ? *fresh : 0.0,
                                        100 * (opt.floor_margin - 1))));
    r.frac_peak = r.gbps / peak;
  }
  const double intensity = cost.flops / std::max(1.0, cost.bytes);
  if (opt.peak_gbps <= 0)
    r.diagnosis = fmt::format("{:.1f} GB/s (no measured peak); {:.2f} flop/byte", r.gbps, intensity);
  else if (r.frac_peak >= 0.6)
    r.diagnosis = fmt::format("memory-bound: {:.0f}% of the measured read bandwidth ({:.1f} of {:.1f} GB/s)",
                              100 * r.frac_peak, r.gbps, opt.peak_gbps);
  else
    r.diagnosis = fmt::format("instruction/latency-bound: {:.0f}% of the measured read bandwidth ({:.1f} of {:.1f} GB/s), "
                              "{:.2f} flop/byte: fewer instructions per byte or more parallelism would help",
                              100 * r.frac_peak, r.gbps, opt.peak_gbps, intensity);
  if (opt.instrument) {
    phase("instrumented run");
    Lap lap(ph, "instrumented run");
    r.regions = measure_regions(dev, op, shape, c, all_addrs, 20);
  }
  r.status = "ok";
  return done(r);
}

}  // namespace loom::evolve
