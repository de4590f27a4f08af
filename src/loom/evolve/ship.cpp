// `loom evolve ship` (see ship.h).
#include "loom/evolve/ship.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "loom/base/version.h"
#include "loom/evolve/device.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/store_names.h"
#include "loom/hrx/runtime.h"
#include "loom/store/shipped.h"

namespace loom::evolve {

namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot read {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<std::vector<ShipSearch>> parse_ship_searches(std::string_view name, std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("searches") || !j["searches"].is_array())
    return invalid_argument("{}: expected {{\"searches\": [{{\"op\": ..., \"shape\": ...}}, ...]}}", name);
  std::vector<ShipSearch> out;
  for (size_t i = 0; i < j["searches"].size(); ++i) {
    const auto& e = j["searches"][i];
    ShipSearch s{e.value("op", ""), e.value("shape", ""), e.value("why", "")};
    if (s.op.empty() || s.shape.empty()) return invalid_argument("{}: search {} lacks op or shape", name, i);
    const kernels::OpSpec* op = kernels::find_op(s.op);
    if (!op) return invalid_argument("{}: search {} names unknown op '{}'", name, i, s.op);
    auto shape = kernels::Shape::parse(s.shape);
    if (!shape.ok()) return std::move(shape).status().with_context(fmt::format("{}: search {}", name, i));
    Status v = op->validate(*shape);
    if (!v.ok()) return std::move(v).with_context(fmt::format("{}: search {} ({} {{{}}})", name, i, s.op, s.shape));
    s.shape = shape->key();
    out.push_back(std::move(s));
  }
  if (out.empty()) return invalid_argument("{}: no searches", name);
  return out;
}

std::string differs_from_baseline(EvalDevice& dev, const kernels::OpSpec& op, const kernels::Shape& shape,
                                  const Candidate& c) {
  std::vector<kernels::Shape> shapes = {shape};
  for (const kernels::Shape& h : holdout_shapes(op, shape, 2)) shapes.push_back(h);
  for (const kernels::Shape& sh : shapes) {
    Result<std::string> d = differs_in_bits(dev, op, sh, c, baseline_candidate(op, sh, dev.target()), 3, 7);
    std::string why = d.ok() ? *d : d.status().to_string();
    if (!why.empty()) return fmt::format("{{{}}}: {}", sh.key(), why);
  }
  return std::string();
}

Status ship(const ShipOptions& opt) {
  auto log = opt.log ? opt.log : [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  if (opt.out.empty()) return invalid_argument("ship needs -o FILE (the shipped file, e.g. data/kernels/cpu-x86-64-v3.json)");
  LOOM_ASSIGN_OR_RETURN(std::string text, read_file(opt.searches_file));
  LOOM_ASSIGN_OR_RETURN(std::vector<ShipSearch> searches, parse_ship_searches(opt.searches_file, text));

  // The device's keys: the store's (exact machine) and the shipped file's (architecture).
  hrx::DeviceProps props;
  {
    LOOM_ASSIGN_OR_RETURN(hrx::Device dev, hrx::Device::open(opt.job.device));
    props = dev.props();
  }
  const std::string exact = device_arch_of(props), key = shipped_arch_of(props);

  store::ShippedFile file;
  std::error_code ec;
  if (std::filesystem::exists(opt.out, ec)) {
    LOOM_ASSIGN_OR_RETURN(std::string old, read_file(opt.out));
    LOOM_ASSIGN_OR_RETURN(file, store::parse_shipped(opt.out, old));
    if (file.device_arch != key)
      return invalid_argument("{} holds kernels for {}; this device's key is {} (write another file)", opt.out,
                              file.device_arch, key);
  }
  file.device_arch = key;

  LOOM_ASSIGN_OR_RETURN(Db db, Db::open(opt.db.empty() ? Db::default_path() : opt.db));
  log(fmt::format("ship: {} searches on {} (key {}), jobs in {}, winners of at least {:.2f}x go to {}", searches.size(),
                  exact, key, db.path(), opt.min_speedup, opt.out));
  int shipped = 0;
  std::unique_ptr<EvalDevice> cpu;  // the bit check's device, opened at the first cpu winner
  for (size_t i = 0; i < searches.size(); ++i) {
    const ShipSearch& s = searches[i];
    JobConfig cfg = opt.job;
    cfg.op = s.op;
    cfg.shape = s.shape;
    cfg.store = true;
    // On the cpu the search itself keeps to the reference's bits (see below).
    cfg.exact = cfg.exact || props.driver == hrx::DriverKind::kCpu;
    log(fmt::format("ship: [{}/{}] {} {{{}}}{}", i + 1, searches.size(), s.op, s.shape, s.why.empty() ? "" : " (" + s.why + ")"));
    Result<int64_t> job = create_job(db, cfg);
    Status st = job.ok() ? run_job(db, *job) : job.status();
    if (!st.ok()) {
      log(fmt::format("ship: [{}/{}] search failed: {}", i + 1, searches.size(), st.to_string()));
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(std::vector<StoredKernel> stored, list_kernels(db));
    const StoredKernel* win = nullptr;
    for (const StoredKernel& k : stored)
      if (k.job == *job && k.op == s.op && k.shape_key == s.shape) win = &k;
    // This search's answer replaces what the file held for the shape, "nothing" included.
    const size_t had = file.kernels.size();
    std::erase_if(file.kernels, [&](const StoredKernel& o) { return o.op == s.op && o.shape_key == s.shape; });
    const char* dropped = file.kernels.size() < had ? "; the file's earlier kernel for it is dropped" : "";
    if (!win || win->speedup < opt.min_speedup) {
      log(fmt::format("ship: [{}/{}] nothing to ship ({}){}", i + 1, searches.size(),
                      win ? fmt::format("winner {:.2f}x, under the floor", win->speedup) : "no confirmed winner", dropped));
      continue;
    }
    // A kernel that keeps to one thread wins only while something else holds the other cores
    // (a build beside the search); a user's machine gives the launch all its threads.
    if (auto th = win->cand.knobs.find("cx_threads"); th != win->cand.knobs.end() && th->second == 1) {
      log(fmt::format("ship: [{}/{}] {} at {:.2f}x does not ship: it runs on one thread (the machine was busy){}", i + 1,
                      searches.size(), win->id(), win->speedup, dropped));
      continue;
    }
    // On the cpu the kernels reproduce the reference engine's bits (the default schedules do), so
    // a winner that reaches its speed by another order of float operations does not ship.
    if (props.driver == hrx::DriverKind::kCpu) {
      if (!cpu) {
        LOOM_ASSIGN_OR_RETURN(cpu, EvalDevice::open(opt.job.device));
      }
      const std::string why = differs_from_baseline(*cpu, *kernels::find_op(s.op), *kernels::Shape::parse(s.shape), win->cand);
      if (!why.empty()) {
        log(fmt::format("ship: [{}/{}] {} at {:.2f}x does not ship: not bit-identical to the default schedule ({}){}", i + 1,
                        searches.size(), win->id(), win->speedup, why, dropped));
        continue;
      }
    }
    StoredKernel k = *win;
    k.device_arch = key;
    file.kernels.push_back(k);
    ++shipped;
    log(fmt::format("ship: [{}/{}] ships {} at {:.2f}x ({:.1f} us vs {:.1f} us): {}", i + 1, searches.size(), k.id(),
                    k.speedup, k.median_us, k.baseline_us, k.cand.summary()));
  }
  file.searched_on = exact;
  file.commit = std::string(git_commit());
  file.date = utc_now();
  file.command = opt.command;
  std::ofstream o(opt.out);
  if (!(o << store::shipped_json(file))) return unavailable("cannot write {}", opt.out);
  log(fmt::format("ship: {} of {} searches shipped; {} holds {} kernels for {} (rebuild loom to compile them in)", shipped,
                  searches.size(), opt.out, file.kernels.size(), key));
  return Status();
}

}  // namespace loom::evolve
