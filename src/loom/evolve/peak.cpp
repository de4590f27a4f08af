// Measuring a device's memory bandwidth for `loom bench` (see peak.h) with the read kernel of evolve's roofline.
#include "loom/evolve/peak.h"

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "loom/base/thread_pool.h"
#include "loom/evolve/device.h"
#include "loom/hrx/runtime.h"

namespace loom::evolve {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  return "unknown CPU";
}

// Dense FP16/BF16 tensor-core peak (no sparsity), from the vendors' datasheets.
double datasheet_flops(const std::string& name) {
  if (name.find("H200") != std::string::npos || name.find("H100 SXM") != std::string::npos) return 989.4e12;
  if (name.find("H100") != std::string::npos) return 756e12;  // PCIe
  if (name.find("A100") != std::string::npos) return 312e12;
  return 0;
}

}  // namespace

Result<DeviceLimits> measure_limits(std::string_view device, int n_threads) {
  DeviceLimits l;
  std::string spec(device);
  if (device == "cpu-ref" || device.empty()) spec = "cpu";
  // The cpu device reads its thread count when first opened (as the engine's backend does).
  if (spec == "cpu" && n_threads > 0) set_default_thread_count(n_threads);
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<EvalDevice> dev, EvalDevice::open(spec));
  l.name = dev->props().driver == hrx::DriverKind::kCpu ? cpu_model_name() : std::string(dev->props().name);
  l.spec = dev->props().spec;
  l.peak_flops = datasheet_flops(l.name);
  // One measurement for `loom bench` and evolve's roofline (measure_read_gbps).
  LOOM_ASSIGN_OR_RETURN(l.bandwidth_gbs, measure_read_gbps(*dev));
  l.bandwidth_how = read_gbps_method(*dev);
  return l;
}

}  // namespace loom::evolve
