// Internals of ggml-hrx shared by its files: one context per HRX device (its ggml device, its
// buffer type, a stream for tensor copies) and the buffer-type entry points.
//
// Threading: ggml may set and get tensors from any thread while a backend computes a graph on
// another, so tensor copies go through `copy_stream` under `copy_mu`; each ggml backend (stream)
// owns its own HRX stream (graph.h).
#pragma once

#include <mutex>
#include <string>

#include "ggml-backend-impl.h"
#include "loom/hrx/runtime.h"

namespace loom::ggml_hrx {

struct DeviceContext {
  hrx::Device dev;
  std::string name;         // "HRX0": GPUs first, the cpu driver last
  std::string description;  // "HRX cuda:0 (NVIDIA H200)"
  std::string id;           // "hrx:cuda:0": distinct from the CUDA backend's PCI id
  std::string buft_name;    // "HRX0"
  ggml_backend_device gdev{};
  ggml_backend_buffer_type buft{};
  std::mutex copy_mu;
  hrx::Stream copy_stream;  // created with the context; guarded by copy_mu
};

// The buffer type's interface (buffer.cpp); `buft.context` is the DeviceContext.
extern const ggml_backend_buffer_type_i kBufferTypeInterface;
bool is_hrx_buffer_type(ggml_backend_buffer_type_t buft);

// The device whose HRX buffer holds a tensor's data; null when no HRX buffer does.
DeviceContext* tensor_device(const ggml_tensor* t);

}  // namespace loom::ggml_hrx
