// Fork/join thread pool used by the CPU reference backend (matmul rows, attention heads).
#include "loom/base/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "loom/base/options.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOOM_CPU_RELAX() _mm_pause()
#else
#define LOOM_CPU_RELAX() std::this_thread::yield()
#endif

namespace loom {
namespace {
// A worker waits for the next job spinning for this long, then sleeps on the condition variable.
// Long enough to bridge the caller's short serial work between the parallel sections of one
// decode step (a few microseconds per op for one token), short enough that the longer serial
// stretches of a batched step (norms, SwiGLU, rope over 16 tokens) and the gaps between steps
// are slept through rather than burnt: with a spin of 8192 pauses (~0.9 ms on the 2-core Zen 3)
// a second thread spent about a quarter of a 16-token step's CPU time spinning. Time-based,
// because a pause lasts from ~10 to ~150 cycles depending on the CPU.
constexpr auto kWorkerSpin = std::chrono::microseconds(50);
// The caller's wait for workers that joined a job (they are finishing their last chunk).
constexpr int kCallerSpinIterations = 1 << 13;
constexpr int64_t kChunksPerThread = 4;
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
  const int64_t n_grains = (n + grain - 1) / grain;
  const int64_t n_chunks = std::min<int64_t>(n_grains, n_threads_ * kChunksPerThread);
  if (n_threads_ == 1 || n_chunks <= 1) {
    fn(0, n, 0);
    return;
  }
  const int64_t chunk = (n_grains + n_chunks - 1) / n_chunks * grain;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    n_chunks_ = (n + chunk - 1) / chunk;
    next_chunk_.store(0);
    open_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  for (int64_t c; (c = next_chunk_.fetch_add(1)) < n_chunks_;) fn(c * chunk, std::min(n, (c + 1) * chunk), 0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  for (int spins = 0; active_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kCallerSpinIterations) LOOM_CPU_RELAX();
    else std::this_thread::yield();
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const auto spin_until = std::chrono::steady_clock::now() + kWorkerSpin;
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load()) {
      // The clock is read every 16 pauses only.
      if ((++spins & 15) != 0 || std::chrono::steady_clock::now() < spin_until) {
        LOOM_CPU_RELAX();
        continue;
      }
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
    }
    if (stop_.load()) return;
    const RangeFn* fn = nullptr;
    int64_t n = 0, chunk = 0, n_chunks = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen = generation_.load();
      if (!open_) continue;  // came too late: the caller already did the work
      active_.fetch_add(1);
      fn = fn_;
      n = n_;
      chunk = chunk_;
      n_chunks = n_chunks_;
    }
    for (int64_t c; (c = next_chunk_.fetch_add(1)) < n_chunks;) (*fn)(c * chunk, std::min(n, (c + 1) * chunk), index);
    active_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

namespace {
std::atomic<int> g_thread_override{0};
}  // namespace

void set_default_thread_count(int n) { g_thread_override.store(n > 0 ? n : 0, std::memory_order_relaxed); }

int default_thread_count() {
  if (int n = g_thread_override.load(std::memory_order_relaxed); n > 0) return n;
  return static_cast<int>(opt::get_int(opt::Opt::kThreads));
}

}  // namespace loom
