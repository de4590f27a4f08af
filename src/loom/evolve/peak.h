// Measured limits of a device, the denominators of `loom bench`'s "fraction of the limit":
// memory bandwidth measured on the spot (not the datasheet), and the datasheet's dense peak
// FLOP/s where one is known.
#pragma once
#include <string>
#include <string_view>

#include "loom/base/status.h"

namespace loom::evolve {

struct DeviceLimits {
  std::string name;            // "NVIDIA H200", or the CPU's model name
  std::string spec;            // "cuda:0", "cpu" (cpu-ref reports "cpu")
  double bandwidth_gbs = 0;    // measured read bandwidth, GB/s (see measure_limits)
  std::string bandwidth_how;   // how it was measured, for results files
  double peak_flops = 0;       // dense FP16 tensor-core peak from the datasheet; 0 = unknown
};

// Measures the device of a `--device` string ("cpu-ref", "cpu", "cuda", "cuda:N") with the read
// kernel evolve's roofline uses (measure_read_gbps), so `loom bench` and `loom evolve`
// divide by the same figure: cpu, the HRX cpu device's n_threads worker threads summing 4 MiB per
// launch through 256 MiB, median of the launches; cuda, a kernel reading 1 GiB with 16-byte
// loads, best of 5 (read bytes only: a mat-vec reads its weights, it writes almost nothing).
// cpu-ref is measured on the HRX cpu device with n_threads threads (LOOM_THREADS, when unset).
Result<DeviceLimits> measure_limits(std::string_view device, int n_threads);

}  // namespace loom::evolve
