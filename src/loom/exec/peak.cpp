// Measuring a device's memory bandwidth for `loom bench` (see peak.h).
#include "loom/exec/peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "loom/hrx/runtime.h"

namespace loom::exec {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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

// Sum of a slice as 64-bit words in four independent chains (the compiler vectorizes it); the
// sum is returned so the reads cannot be dropped.
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < n; ++i) a += p[i];
  return a + b + c + d;
}

double host_read_gbs(int n_threads) {
  const size_t words = (512ull << 20) / 8;
  std::vector<uint64_t> buf(words);
  for (size_t i = 0; i < words; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;  // touch every page
  n_threads = std::max(1, n_threads);
  double best = 0;
  volatile uint64_t sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<uint64_t> part(static_cast<size_t>(n_threads));
    std::vector<std::thread> threads;
    const double t0 = now_s();
    for (int t = 0; t < n_threads; ++t)
      threads.emplace_back([&, t] {
        const size_t lo = words * static_cast<size_t>(t) / static_cast<size_t>(n_threads);
        const size_t hi = words * static_cast<size_t>(t + 1) / static_cast<size_t>(n_threads);
        part[static_cast<size_t>(t)] = sum_words(buf.data() + lo, hi - lo);
      });
    for (auto& th : threads) th.join();
    const double dt = now_s() - t0;
    for (uint64_t x : part) sink = sink + x;
    best = std::max(best, static_cast<double>(words * 8) / dt / 1e9);
  }
  return best;
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
  if (device == "cpu-ref" || device == "cpu" || device.empty()) {
    l.name = cpu_model_name();
    l.spec = "cpu";
    l.bandwidth_gbs = host_read_gbs(n_threads);
    l.bandwidth_how = fmt::format("{} threads summing 512 MiB, best of 5", n_threads);
    return l;
  }
  LOOM_ASSIGN_OR_RETURN(hrx::Device dev, hrx::Device::open(device));
  l.name = dev.props().name;
  l.spec = dev.props().spec;
  l.peak_flops = datasheet_flops(l.name);
  const uint64_t bytes = 1ull << 30;
  LOOM_ASSIGN_OR_RETURN(hrx::Buffer a, hrx::Buffer::alloc(dev, bytes));
  LOOM_ASSIGN_OR_RETURN(hrx::Buffer b, hrx::Buffer::alloc(dev, bytes));
  LOOM_ASSIGN_OR_RETURN(hrx::Stream s, hrx::Stream::create(dev));
  LOOM_RETURN_IF_ERROR(s.memset(a, 0, 0x5a, bytes));
  LOOM_RETURN_IF_ERROR(s.copy_d2d(b, 0, a, 0, bytes));  // warm-up
  LOOM_RETURN_IF_ERROR(s.synchronize());
  double best = 0;
  for (int rep = 0; rep < 10; ++rep) {
    const double t0 = now_s();
    LOOM_RETURN_IF_ERROR(s.copy_d2d(b, 0, a, 0, bytes));
    LOOM_RETURN_IF_ERROR(s.synchronize());
    best = std::max(best, 2.0 * static_cast<double>(bytes) / (now_s() - t0) / 1e9);
  }
  l.bandwidth_how = "device-to-device copy of 1 GiB, read + write bytes, best of 10";
  l.bandwidth_gbs = best;
  return l;
}

}  // namespace loom::exec
