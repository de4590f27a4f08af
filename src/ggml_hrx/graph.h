// Runs ggml graphs on one HRX device for one ggml backend (stream). A graph's nodes become
// op-library calls (lower.h); the engine's plan compile (exec/hrx_plan.h) generates their
// kernels into one module, which HRX compiles once per content (in memory, and on disk for
// the cpu driver), and binds every launch to its tensors' addresses. The plan is kept for the
// next graph with the same nodes at the same addresses (a repeated graph: test-backend-ops'
// cases, llama.cpp's prompt batches), and from its second run replays as one captured HRX
// graph. Scratch between calls comes from one arena per runner.
//
// Threading: one thread at a time (ggml drives a backend from one thread).
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <set>
#include <string>

#include "ggml.h"
#include "ggml_hrx/context.h"
#include "loom/base/status.h"
#include "loom/exec/hrx_plan.h"

namespace loom::ggml_hrx {

class GraphRunner {
 public:
  static Result<std::unique_ptr<GraphRunner>> create(DeviceContext& dc);

  // Computes every node of `graph` (all of them covered by check_node, their tensors in this
  // device's buffers) and waits for the device.
  Status compute(ggml_cgraph* graph);

 private:
  explicit GraphRunner(DeviceContext& dc) : dc_(dc) {}
  // The calls of a graph's nodes, their scratch in arena_; *scratch_bytes: what they need.
  Result<std::vector<exec::OpCall>> lower(ggml_cgraph* graph, uint64_t* scratch_bytes);
  Result<std::unique_ptr<exec::hrx_detail::Plan>> build(ggml_cgraph* graph);
  Status run(exec::hrx_detail::Plan& plan);

  DeviceContext& dc_;
  hrx::Stream stream_;
  std::set<std::string> stored_used_;  // kernel-store kernels already announced
  // Scratch that a plan's calls pass between them (quantized activations), shared by all
  // plans: they run one after another on stream_.
  hrx::Buffer arena_;
  uint64_t arena_size_ = 0;
  struct Cached {
    std::string key;
    std::unique_ptr<exec::hrx_detail::Plan> plan;
  };
  std::list<Cached> plans_;  // most recently used first
  static constexpr size_t kMaxPlans = 256;
};

}  // namespace loom::ggml_hrx
