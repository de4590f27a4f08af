// Nsight Compute counters for a candidate (see ncu.h).
#include "loom/evolve/ncu.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include <nlohmann/json.hpp>

#include "loom/base/options.h"
#include "loom/codegen/tool_run.h"
#include "loom/evolve/worker.h"

namespace loom::evolve {
namespace {

constexpr const char* kDram = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kOccupancy = "sm__warps_active.avg.pct_of_peak_sustained_active";

// The last "..." field of a CSV line, without thousands separators.
double last_field(const std::string& line) {
  size_t e = line.rfind('"');
  if (e == std::string::npos || e == 0) return -1;
  size_t b = line.rfind('"', e - 1);
  if (b == std::string::npos) return -1;
  std::string v;
  for (char ch : line.substr(b + 1, e - b - 1))
    if (ch != ',') v += ch;
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  return end == v.c_str() ? -1 : d;
}

}  // namespace

NcuMetrics parse_ncu_csv(const std::string& output) {
  NcuMetrics m;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(kDram) != std::string::npos) m.dram_pct = last_field(line);
    if (line.find(kOccupancy) != std::string::npos) m.occupancy_pct = last_field(line);
  }
  return m;
}

std::string ncu_diagnosis(const std::string& device_spec, const kernels::OpSpec& op, const kernels::Shape& shape,
                          const Candidate& c, const EvalOptions& opt) {
  if (device_spec.rfind("cuda", 0) != 0) return "ncu: skipped: not a cuda device";
  auto ncu = codegen::find_tool({"ncu"});
  if (!ncu.ok()) return "ncu: skipped: ncu (Nsight Compute) is not on PATH";
  const std::string worker = worker_binary();
  if (worker.empty()) return "ncu: skipped: no evolve worker binary to profile";
  auto inst = instantiate(c, op, shape, ir::TargetKind::kPtx);
  if (!inst.ok() || inst->launches.empty()) return "ncu: skipped: the candidate has no launch";
  const std::string kernel = inst->launches[0].kernel;
  EvalOptions o = opt;
  o.trials = 1;
  o.holdout.clear();
  o.time = false;
  o.instrument = false;
  std::string path = opt::get_string(opt::Opt::kTmpdir) + "/loom-evolve-ncu-XXXXXX";
  int fd = mkstemp(path.data());
  if (fd < 0) return "ncu: failed: cannot create a request file";
  const std::string req = evaluate_request(device_spec, op, shape, c, o).dump();
  const bool wrote = write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size());
  close(fd);
  if (!wrote) {
    unlink(path.c_str());
    return "ncu: failed: cannot write the request file";
  }
  // The worker's result goes to its stderr (fd 2): only the CSV lines matter here.
  auto r = codegen::run_tool({*ncu, "--csv", "--metrics", std::string(kDram) + "," + kOccupancy, "--launch-count", "1",
                              "--kernel-name", "regex:^" + kernel + "$", "--target-processes", "all", worker, "evolve",
                              "worker", path, "--fd", "2"});
  unlink(path.c_str());
  if (!r.ok()) return "ncu: failed: " + r.status().to_string();
  const NcuMetrics m = parse_ncu_csv(r->output);
  if (m.dram_pct < 0 && m.occupancy_pct < 0) {
    std::string tail = r->output.size() > 300 ? r->output.substr(r->output.size() - 300) : r->output;
    for (char& ch : tail)
      if (ch == '\n') ch = ' ';
    return fmt::format("ncu: failed (exit {}): {}", r->exit_code, tail);
  }
  return fmt::format("ncu: dram throughput {:.1f}% of peak, achieved occupancy {:.1f}% (kernel {})", m.dram_pct,
                     m.occupancy_pct, kernel);
}

}  // namespace loom::evolve
