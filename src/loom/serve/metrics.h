// Server metrics: counters, gauges and a time-to-first-token histogram, rendered as Prometheus
// text (exposition format 0.0.4) for GET /metrics.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace loom::serve {

// Thread-safe: counters are atomics, the labelled maps and the histogram take a mutex.
class Metrics {
 public:
  Metrics();

  void count_request(const std::string& endpoint, int status);
  void observe_ttft(double seconds);

  std::atomic<int64_t> prompt_tokens{0};     // prompt tokens of admitted requests
  std::atomic<int64_t> reused_tokens{0};     // of which came from a slot's cached prefix
  std::atomic<int64_t> prefix_lookups{0};    // admissions (each looks for a cached prefix)
  std::atomic<int64_t> prefix_hits{0};       // of which found one (at least one token)
  std::atomic<int64_t> prefix_evicted_tokens{0};  // cached tokens dropped to make room
  std::atomic<int64_t> prefix_copied_tokens{0};   // prefix cells copied from another slot
  std::atomic<int64_t> generated_tokens{0};
  std::atomic<int64_t> cancelled{0};         // requests ended because the client went away
  std::atomic<int64_t> rejected_queue_full{0};
  std::atomic<int64_t> steps{0};             // batched engine steps
  std::atomic<int64_t> step_tokens{0};       // tokens carried by those steps
  std::atomic<int64_t> step_sequences{0};    // sequences carried by those steps (sum)
  std::atomic<double> step_seconds{0.0};
  // Gauges, written by the scheduler after each step.
  std::atomic<int64_t> queue_depth{0};
  std::atomic<int64_t> slots_busy{0};
  std::atomic<int64_t> slots_total{0};
  std::atomic<int64_t> kv_cells_used{0};     // cells holding tokens of busy slots
  std::atomic<int64_t> kv_cells_cached{0};   // cells holding tokens of any slot (prefix cache)
  std::atomic<int64_t> kv_cells_total{0};
  std::atomic<double> gen_tokens_per_second{0.0};  // generated tokens/s over the last few seconds
  std::atomic<bool> draining{false};

  std::string prometheus_text() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::vector<double> ttft_bounds_;
  std::vector<int64_t> ttft_buckets_;  // cumulative at render time, per-bucket here
  double ttft_sum_ = 0.0;
  int64_t ttft_count_ = 0;
};

}  // namespace loom::serve
