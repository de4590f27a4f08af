// Runs ggml graphs on one HRX device for one ggml backend (stream). A graph's nodes become
// op-library calls (lower.h); the engine's plan compile (exec/hrx_plan.h) generates their
// kernels into one module, which HRX compiles once per content (in memory, and on disk for
// the cpu driver), and binds every launch to its tensors' addresses. The plan is kept for the
// next graph with the same nodes at the same addresses (llama.cpp's decode repeats one), and
// from its second run replays as one captured HRX graph.
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
  Result<std::unique_ptr<exec::hrx_detail::Plan>> build(ggml_cgraph* graph);
  Status run(exec::hrx_detail::Plan& plan);

  DeviceContext& dc_;
  hrx::Stream stream_;
  std::set<std::string> stored_used_;  // kernel-store kernels already announced
  struct Cached {
    std::string key;
    std::unique_ptr<exec::hrx_detail::Plan> plan;
  };
  std::list<Cached> plans_;  // most recently used first
  static constexpr size_t kMaxPlans = 64;
};

}  // namespace loom::ggml_hrx
