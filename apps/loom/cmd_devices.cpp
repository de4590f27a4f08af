// `loom devices`: the compute devices Loom can use here (the CPU, and NVIDIA GPUs through the
// CUDA driver when one is installed), with the properties that bound kernel speed.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "loom/hrx/cuda_api.h"

namespace loom::cli {
namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

int run_devices(bool json_out) {
  using namespace hrx::cuda;
  nlohmann::ordered_json devs = nlohmann::ordered_json::array();
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  devs.push_back({{"id", "cpu"}, {"name", cpu_model()}, {"threads", std::thread::hardware_concurrency()},
                  {"memory_bytes", static_cast<double>(pages) * static_cast<double>(page)}});
  std::string cuda_note;
  auto a = api();
  if (!a.ok()) {
    cuda_note = a.status().to_string();
  } else {
    const Api& cu = **a;
    int n = 0, ver = 0;
    cu.cuDriverGetVersion(&ver);
    if (auto s = check(cu.cuDeviceGetCount(&n), "cuDeviceGetCount"); !s.ok()) return report(s);
    for (int i = 0; i < n; ++i) {
      CUdevice d;
      if (auto s = check(cu.cuDeviceGet(&d, i), "cuDeviceGet"); !s.ok()) return report(s);
      char name[256] = {};
      cu.cuDeviceGetName(name, sizeof name, d);
      auto attr = [&](Attr at) {
        int v = 0;
        cu.cuDeviceGetAttribute(&v, static_cast<int>(at), d);
        return v;
      };
      size_t mem = 0;
      cu.cuDeviceTotalMem(&mem, d);
      double peak_bw = 2.0 * attr(Attr::kMemoryClockKHz) * 1e3 * attr(Attr::kMemoryBusWidthBits) / 8.0;
      devs.push_back({{"id", fmt::format("cuda:{}", i)}, {"name", name},
                      {"compute_capability", fmt::format("{}.{}", attr(Attr::kCcMajor), attr(Attr::kCcMinor))},
                      {"sm_count", attr(Attr::kSmCount)}, {"clock_khz", attr(Attr::kClockRateKHz)},
                      {"memory_bytes", mem}, {"l2_bytes", attr(Attr::kL2CacheBytes)},
                      {"shared_per_block_optin", attr(Attr::kMaxSharedPerBlockOptin)},
                      {"theoretical_bandwidth_gbs", peak_bw / 1e9}, {"driver_version", ver}});
    }
    if (n == 0) cuda_note = "CUDA driver loaded, no devices";
  }
  if (json_out) {
    std::printf("%s\n", nlohmann::ordered_json{{"devices", devs}, {"cuda", cuda_note.empty() ? "ok" : cuda_note}}.dump(2).c_str());
    return 0;
  }
  for (const auto& d : devs) {
    std::printf("%-8s %s\n", d["id"].get<std::string>().c_str(), d["name"].get<std::string>().c_str());
    for (auto it = d.begin(); it != d.end(); ++it)
      if (it.key() != "id" && it.key() != "name") std::printf("         %-24s %s\n", it.key().c_str(), it.value().dump().c_str());
  }
  if (!cuda_note.empty()) std::printf("cuda: %s\n", cuda_note.c_str());
  return 0;
}

LOOM_COMMAND(kDevices, "devices", "List the CPU and GPUs Loom can run on", [](CLI::App& sub) -> Action {
  auto json_out = std::make_shared<bool>(false);
  sub.add_flag("--json", *json_out, "print JSON");
  return [=] { return run_devices(*json_out); };
});

}  // namespace
}  // namespace loom::cli
