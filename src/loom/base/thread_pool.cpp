// Fork/join thread pool used by the CPU reference backend (matmul rows, attention heads).
#include "loom/base/thread_pool.h"

#include <algorithm>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOOM_CPU_RELAX() _mm_pause()
#else
#define LOOM_CPU_RELAX() std::this_thread::yield()
#endif

namespace loom {
namespace {
constexpr int kSpinIterations = 1 << 14;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t n_grains = (n + grain - 1) / grain;
  int64_t per = (n_grains + n_threads_ - 1) / n_threads_;
  int64_t chunk = per * grain;
  if (n_threads_ == 1 || chunk >= n) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  fn(0, std::min(n, chunk), 0);
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinIterations) LOOM_CPU_RELAX();
    else std::this_thread::yield();
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load()) {
      if (++spins < kSpinIterations) {
        LOOM_CPU_RELAX();
        continue;
      }
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
    }
    if (stop_.load()) return;
    const RangeFn* fn;
    int64_t begin, end;
    {
      // The lock orders our reads of fn_/n_/chunk_ after the publisher's writes.
      std::lock_guard<std::mutex> lock(mu_);
      seen = generation_.load();
      fn = fn_;
      begin = std::min(n_, chunk_ * index);
      end = std::min(n_, begin + chunk_);
    }
    if (begin < end) (*fn)(begin, end, index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

int default_thread_count() {
  if (const char* env = std::getenv("LOOM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return 2;
}

}  // namespace loom
