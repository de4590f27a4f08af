// Test helper for the GPU timing tests of tests/ops (gpu_bench_test, small_kernel_bench_test):
// the median time per launch of a captured graph, timed with events after a warm-up replay.
#pragma once

#include <algorithm>
#include <vector>

#include "loom/hrx/runtime.h"

namespace loom::kernels {

// Median of `reps` replays of graph `g` of `per_graph` launches; microseconds per launch.
inline Result<double> time_graph(hrx::Graph& g, hrx::Stream& s, const hrx::Device& dev, int per_graph, int reps) {
  LOOM_ASSIGN_OR_RETURN(hrx::Event e0, hrx::Event::create(dev));
  LOOM_ASSIGN_OR_RETURN(hrx::Event e1, hrx::Event::create(dev));
  LOOM_RETURN_IF_ERROR(g.launch(s));  // warm-up
  LOOM_RETURN_IF_ERROR(s.synchronize());
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    LOOM_RETURN_IF_ERROR(e0.record(s));
    LOOM_RETURN_IF_ERROR(g.launch(s));
    LOOM_RETURN_IF_ERROR(e1.record(s));
    LOOM_RETURN_IF_ERROR(e1.synchronize());
    LOOM_ASSIGN_OR_RETURN(float ms, hrx::Event::elapsed_ms(e0, e1));
    t.push_back(1000.0 * ms / per_graph);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace loom::kernels
