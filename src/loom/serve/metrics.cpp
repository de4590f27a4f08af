// Prometheus text rendering of the server metrics.
#include "loom/serve/metrics.h"

#include <fmt/format.h>

namespace loom::serve {

Metrics::Metrics() : ttft_bounds_{0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0} {
  ttft_buckets_.assign(ttft_bounds_.size(), 0);
}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::observe_ttft(double seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < ttft_bounds_.size(); ++i)
    if (seconds <= ttft_bounds_[i]) {
      ++ttft_buckets_[i];
      break;
    }
  ttft_sum_ += seconds;
  ++ttft_count_;
}

namespace {
void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}
template <typename T>
void sample(std::string& out, const char* name, T value) {
  out += fmt::format("{} {}\n", name, value);
}
}  // namespace

std::string Metrics::prometheus_text() const {
  std::string out;
  {
    std::lock_guard<std::mutex> lk(mu_);
    metric(out, "loom_requests_total", "counter", "HTTP requests by endpoint and status code.");
    for (const auto& [key, n] : requests_)
      out += fmt::format("loom_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
    metric(out, "loom_time_to_first_token_seconds", "histogram",
           "From a request's arrival to its first generated token.");
    int64_t cum = 0;
    for (size_t i = 0; i < ttft_bounds_.size(); ++i) {
      cum += ttft_buckets_[i];
      out += fmt::format("loom_time_to_first_token_seconds_bucket{{le=\"{}\"}} {}\n", ttft_bounds_[i], cum);
    }
    out += fmt::format("loom_time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {}\n", ttft_count_);
    out += fmt::format("loom_time_to_first_token_seconds_sum {}\n", ttft_sum_);
    out += fmt::format("loom_time_to_first_token_seconds_count {}\n", ttft_count_);
  }
  metric(out, "loom_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.");
  sample(out, "loom_prompt_tokens_total", prompt_tokens.load());
  metric(out, "loom_prompt_tokens_reused_total", "counter", "Prompt tokens found in a slot's cached prefix.");
  sample(out, "loom_prompt_tokens_reused_total", reused_tokens.load());
  metric(out, "loom_prefix_cache_lookups_total", "counter", "Admitted requests (each looks for a cached prefix).");
  sample(out, "loom_prefix_cache_lookups_total", prefix_lookups.load());
  metric(out, "loom_prefix_cache_hits_total", "counter", "Admitted requests that found a cached prefix.");
  sample(out, "loom_prefix_cache_hits_total", prefix_hits.load());
  metric(out, "loom_prefix_cache_hit_ratio", "gauge", "Prompt tokens served from cache / all prompt tokens.");
  const int64_t prompts = prompt_tokens.load();
  sample(out, "loom_prefix_cache_hit_ratio", prompts > 0 ? static_cast<double>(reused_tokens.load()) / prompts : 0.0);
  metric(out, "loom_prefix_cache_evicted_tokens_total", "counter", "Cached tokens dropped to make room for another prompt.");
  sample(out, "loom_prefix_cache_evicted_tokens_total", prefix_evicted_tokens.load());
  metric(out, "loom_prefix_cache_copied_tokens_total", "counter", "Cached prefix tokens copied from another slot.");
  sample(out, "loom_prefix_cache_copied_tokens_total", prefix_copied_tokens.load());
  metric(out, "loom_generated_tokens_total", "counter", "Generated tokens.");
  sample(out, "loom_generated_tokens_total", generated_tokens.load());
  metric(out, "loom_requests_cancelled_total", "counter", "Requests ended early because the client went away.");
  sample(out, "loom_requests_cancelled_total", cancelled.load());
  metric(out, "loom_requests_rejected_queue_full_total", "counter", "Requests refused with 503 (queue full).");
  sample(out, "loom_requests_rejected_queue_full_total", rejected_queue_full.load());
  metric(out, "loom_batch_steps_total", "counter", "Batched engine steps.");
  sample(out, "loom_batch_steps_total", steps.load());
  metric(out, "loom_batch_tokens_total", "counter", "Tokens carried by the batched steps.");
  sample(out, "loom_batch_tokens_total", step_tokens.load());
  metric(out, "loom_batch_sequences_total", "counter", "Sequences carried by the batched steps (sum over steps).");
  sample(out, "loom_batch_sequences_total", step_sequences.load());
  metric(out, "loom_batch_seconds_total", "counter", "Time spent in batched engine steps.");
  sample(out, "loom_batch_seconds_total", step_seconds.load());
  metric(out, "loom_generation_tokens_per_second", "gauge", "Generated tokens per second, all streams, last 5 s.");
  sample(out, "loom_generation_tokens_per_second", gen_tokens_per_second.load());
  metric(out, "loom_queue_depth", "gauge", "Requests waiting for a free slot.");
  sample(out, "loom_queue_depth", queue_depth.load());
  metric(out, "loom_slots_busy", "gauge", "Sequence slots serving a request.");
  sample(out, "loom_slots_busy", slots_busy.load());
  metric(out, "loom_slots_total", "gauge", "Sequence slots (--parallel).");
  sample(out, "loom_slots_total", slots_total.load());
  metric(out, "loom_kv_cache_used_cells", "gauge", "KV cache cells holding tokens of busy slots.");
  sample(out, "loom_kv_cache_used_cells", kv_cells_used.load());
  metric(out, "loom_kv_cache_cached_cells", "gauge", "KV cache cells holding tokens of any slot (incl. reusable prefixes).");
  sample(out, "loom_kv_cache_cached_cells", kv_cells_cached.load());
  metric(out, "loom_kv_cache_cells", "gauge", "KV cache cells (slots x context).");
  sample(out, "loom_kv_cache_cells", kv_cells_total.load());
  metric(out, "loom_kv_cache_usage_ratio", "gauge", "Used cells / all cells.");
  const int64_t total = kv_cells_total.load();
  sample(out, "loom_kv_cache_usage_ratio", total > 0 ? static_cast<double>(kv_cells_used.load()) / total : 0.0);
  metric(out, "loom_draining", "gauge", "1 while the server drains after SIGTERM.");
  sample(out, "loom_draining", draining.load() ? 1 : 0);
  return out;
}

}  // namespace loom::serve
