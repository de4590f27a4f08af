// The engine on HRX: a llm::Backend that runs each step Program as op-library kernels (Loom IR,
// compiled for the device) launched through HRX, on the cpu driver or a CUDA GPU.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/llm/backend.h"

namespace loom::exec {

struct HrxBackendOptions {
  std::string device = "cpu";  // an HRX device spec: "cpu", "cuda", "cuda:N"
  int n_threads = 0;           // cpu driver worker threads (0: the driver's default)
  bool use_graphs = true;      // replay each step shape as a captured graph after its first run
};

// A backend on an HRX device. The device is opened here; the model's weights are uploaded and
// the KV cache allocated by init(). Kernels are generated, compiled and loaded per step shape
// (one module per shape, compiled once per machine: the cpp target's disk cache and the CUDA
// driver's JIT), with n_tokens padded up to a power of two so that few shapes exist; padding
// tokens write a scratch sequence slot of the KV cache that no real sequence reads.
Result<std::unique_ptr<llm::Backend>> make_hrx_backend(const HrxBackendOptions& options);

// The engine's default device: $LOOM_DEVICE if set, else the first CUDA device when one is
// present, else "cpu-ref" (the reference CPU ops).
std::string default_device();

// The backend for a --device flag: "cpu-ref" (the reference ops), or an HRX device spec;
// "" means default_device(). n_threads sizes the cpu thread pools.
Result<std::unique_ptr<llm::Backend>> make_backend(std::string_view device, int n_threads);

}  // namespace loom::exec
