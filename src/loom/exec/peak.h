// Measured limits of a device, the denominators of `loom bench`'s "fraction of the limit":
// memory bandwidth measured on the spot (not the datasheet), and the datasheet's dense peak
// FLOP/s where one is known.
#pragma once
#include <string>
#include <string_view>

#include "loom/base/status.h"

namespace loom::exec {

struct DeviceLimits {
  std::string name;            // "NVIDIA H200", or the CPU's model name
  std::string spec;            // "cuda:0", "cpu" (cpu-ref reports "cpu")
  double bandwidth_gbs = 0;    // measured: best of several runs (see measure_limits)
  std::string bandwidth_how;   // how it was measured, for results files
  double peak_flops = 0;       // dense FP16 tensor-core peak from the datasheet; 0 = unknown
};

// Measures the device of a `--device` string ("cpu-ref", "cpu", "cuda", "cuda:N"). cpu: n_threads
// threads summing a 512 MiB buffer (read bandwidth); cuda: device-to-device copies of 1 GiB,
// counting bytes read plus bytes written (the figure a copy benchmark reports).
Result<DeviceLimits> measure_limits(std::string_view device, int n_threads);

}  // namespace loom::exec
