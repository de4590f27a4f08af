// `loom devices`: the compute devices Loom can use here (HRX's cpu device, NVIDIA GPUs through the
// CUDA driver and AMD GPUs through the HSA runtime when installed), with the properties that bound
// kernel speed, and why a GPU driver found no device.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "loom/hrx/runtime.h"

namespace loom::cli {
namespace {

int run_devices(bool json_out) {
  nlohmann::ordered_json devs = nlohmann::ordered_json::array();
  for (const hrx::Device& d : hrx::Device::enumerate()) {
    const hrx::DeviceProps& p = d.props();
    if (p.driver == hrx::DriverKind::kCpu) {
      devs.push_back({{"id", p.spec}, {"name", p.name}, {"arch", p.arch}, {"threads", p.compute_units},
                      {"memory_bytes", static_cast<double>(p.memory_bytes)}});
      continue;
    }
    if (p.driver == hrx::DriverKind::kAmdgpu) {
      devs.push_back({{"id", p.spec}, {"name", p.name}, {"arch", p.arch}, {"compute_units", p.compute_units},
                      {"wave_size", p.warp_size}, {"clock_khz", p.clock_khz}, {"memory_bytes", p.memory_bytes},
                      {"memory_bus_width_bits", p.memory_bus_width_bits}, {"l2_bytes", p.l2_bytes},
                      {"lds_per_workgroup", p.max_shared_per_block}, {"hsa_version", p.driver_version}});
      continue;
    }
    devs.push_back({{"id", p.spec}, {"name", p.name}, {"arch", p.arch},
                    {"compute_capability", fmt::format("{}.{}", p.cc_major, p.cc_minor)},
                    {"sm_count", p.compute_units}, {"clock_khz", p.clock_khz}, {"memory_bytes", p.memory_bytes},
                    {"l2_bytes", p.l2_bytes}, {"shared_per_block_optin", p.max_shared_per_block_optin},
                    {"theoretical_bandwidth_gbs", p.peak_bandwidth_gbs()}, {"driver_version", p.driver_version}});
  }
  size_t n_cuda = 0;
  for (const auto& d : devs) n_cuda += d["id"].get<std::string>().starts_with("cuda") ? 1 : 0;
  std::string cuda_note;
  if (Status s = hrx::Device::cuda_status(); !s.ok()) cuda_note = s.to_string();
  else if (n_cuda == 0) cuda_note = "CUDA driver loaded, no devices";
  std::string amdgpu_note;
  if (Status s = hrx::Device::amdgpu_status(); !s.ok()) amdgpu_note = s.message();
  if (json_out) {
    std::printf("%s\n", nlohmann::ordered_json{{"devices", devs},
                                               {"cuda", cuda_note.empty() ? "ok" : cuda_note},
                                               {"amdgpu", amdgpu_note.empty() ? "ok" : amdgpu_note}}
                            .dump(2)
                            .c_str());
    return 0;
  }
  for (const auto& d : devs) {
    std::printf("%-8s %s\n", d["id"].get<std::string>().c_str(), d["name"].get<std::string>().c_str());
    for (auto it = d.begin(); it != d.end(); ++it)
      if (it.key() != "id" && it.key() != "name") std::printf("         %-24s %s\n", it.key().c_str(), it.value().dump().c_str());
  }
  if (!cuda_note.empty()) std::printf("cuda: %s\n", cuda_note.c_str());
  if (!amdgpu_note.empty()) std::printf("amdgpu: %s\n", amdgpu_note.c_str());
  return 0;
}

LOOM_COMMAND(kDevices, "devices", "List the CPU and GPUs Loom can run on", [](CLI::App& sub) -> Action {
  auto json_out = std::make_shared<bool>(false);
  sub.add_flag("--json", *json_out, "print JSON");
  return [=] { return run_devices(*json_out); };
});

}  // namespace
}  // namespace loom::cli
