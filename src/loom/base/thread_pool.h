// A small fork/join thread pool: parallel_for splits [0, n) into contiguous chunks, runs them on
// the workers and the calling thread, and returns when all are done.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace loom {

// Contract: one caller at a time (parallel_for is not re-entrant and must not be called from
// inside a task). n_threads counts the caller, so ThreadPool(1) runs everything inline.
// Chunk boundaries depend only on (n, n_threads); each task owns its index range, so results
// never depend on scheduling, and code that computes each output element the same way in any
// chunk gives bit-identical results for every thread count.
class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Runs fn(begin, end, thread_index) over a partition of [0, n) into chunks whose sizes are
  // multiples of `grain` (except the last). Threads take chunks from a shared counter, so a
  // worker that is not scheduled in time costs nothing: the caller takes its chunks. Blocks
  // until all chunks finished.
  using RangeFn = std::function<void(int64_t begin, int64_t end, int thread_index)>;
  void parallel_for(int64_t n, const RangeFn& fn, int64_t grain = 1);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  // A job is published by bumping generation_; workers spin on it briefly (decode issues
  // hundreds of tiny jobs per token, and a futex wake per job would dominate), then sleep.
  // Workers join a job only while it is open (under mu_); the caller closes it once no chunk
  // is left and then waits just for the joined workers (active_) to finish theirs.
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<int> active_{0};
  std::atomic<bool> stop_{false};
  bool open_ = false;
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 0, n_chunks_ = 0;
};

// Default thread count for the CLI and for pools sized by it (the HRX cpu device's, made when
// the device is first opened): the last set_default_thread_count(n > 0), else $LOOM_THREADS if
// set, else 2. Thread-safe; unlike setenv, safe while other threads read the environment.
int default_thread_count();
void set_default_thread_count(int n);  // n <= 0: back to $LOOM_THREADS / 2

}  // namespace loom
