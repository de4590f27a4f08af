// The device side of evolve's evaluator: an HRX device and stream, loading a candidate instance
// (Loom IR through hrx::Module::compile, C++ as a shared object, PTX, CUDA C++ through NVRTC
// loaded with dlopen), running its launches on device addresses, and the machine facts the
// evaluator needs (last-level cache size, measured peak read bandwidth).
//
// Not thread-safe; one evaluation at a time. Opened inside the (forked) evaluation process, so
// a crashing candidate takes down only that process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/store/candidate.h"
#include "loom/store/store.h"
#include "loom/evolve/store_names.h"
#include "loom/hrx/runtime.h"

namespace loom::evolve {

class EvalDevice {
 public:
  // "cpu" or "cuda[:N]" (HRX specs).
  static Result<std::unique_ptr<EvalDevice>> open(const std::string& spec);

  ir::TargetKind target() const { return dev_.target(); }
  const hrx::DeviceProps& props() const { return dev_.props(); }
  hrx::Device& device() { return dev_; }
  hrx::Stream& stream() { return stream_; }
  // Bytes of the last-level cache a working set must exceed (cpu: sysfs, largest level; cuda: L2).
  uint64_t llc_bytes() const;

  // A loaded instance, ready to launch many times.
  struct Loaded {
    hrx::Module module;
    std::vector<hrx::Kernel> kernels;
    std::vector<kernels::KernelLaunch> launches;
    std::vector<std::vector<ir::Type>> scalar_types;
  };
  Result<Loaded> load(const Instance& inst);
  // Runs every launch in order on `addrs` (one device address per op argument) and waits.
  Status run(const Loaded& l, const std::vector<uint64_t>& addrs);

 private:
  EvalDevice(hrx::Device d, hrx::Stream s) : dev_(d), stream_(std::move(s)) {}
  hrx::Device dev_;
  hrx::Stream stream_;
};






// Compiles an instance's host code into the on-disk kernel cache without a device, so that a
// later EvalDevice::load of the same instance (another process) only loads it: the cpp target's
// shared object (IR emitted exactly as hrx::Module::compile emits it). A no-op for PTX and
// CUDA C++ (the driver and NVRTC compile at load). Safe to run in several processes at once.
Status prebuild(const Instance& inst, ir::TargetKind target);

// Largest cache size from /sys/devices/system/cpu/cpu0/cache/index*/size (0 if unreadable).
uint64_t host_llc_bytes();

// Measured peak read bandwidth in GB/s: cpu, a C++ kernel on the device summing 4 MiB per launch,
// launches rotating through 256 MiB, median of the launches (timed like candidates); cuda, a Loom
// IR kernel reading 1 GiB with wide loads (best of 5).
// Used by evolve's roofline and by `loom bench` (evolve::measure_limits): one figure for both.
Result<double> measure_read_gbps(EvalDevice& d);
// How measure_read_gbps measures on this device, for results files.
std::string read_gbps_method(EvalDevice& d);

}  // namespace loom::evolve
