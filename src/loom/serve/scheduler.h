// Continuous batching: one scheduler thread owns the Engine; requests wait in a bounded queue,
// take a sequence slot, and every step carries one token of each decoding slot plus prompt
// chunks of the slots still reading their prompt (one batched engine step). Text streams to
// each request's Job as it becomes final.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/base/status.h"
#include "loom/engine/engine.h"
#include "loom/engine/grammar.h"
#include "loom/engine/sampler.h"
#include "loom/serve/metrics.h"
#include "loom/text/tokenizer.h"

namespace loom::serve {

struct GenParams {
  std::vector<int32_t> prompt;       // token ids (non-empty, shorter than the slot context)
  llm::SamplerParams sampling;
  int64_t max_tokens = -1;           // -1: until end of generation or a full context
  std::vector<std::string> stop;     // generation ends before the first occurrence of any
  bool ignore_eos = false;
  int logprobs = -1;                 // >= 0: each output token's log-probability and this many
                                     // alternatives (llm::SampleLogprobs) come with the text
  std::shared_ptr<const llm::Grammar> grammar;  // when set, the reply follows it (llm::Generation)
};

// One request as both sides see it. The scheduler writes (append/finish); the HTTP side reads
// with wait(), or with poll() when its notify fires, and may cancel() from any thread. Shared
// through shared_ptr.
class Job {
 public:
  struct Update {
    std::string text;           // new text since the last wait()
    std::vector<llm::SampleLogprobs> logprobs;  // of the tokens sampled since (they may run
                                                // ahead of the text, which can be held back)
    bool finished = false;
    std::string finish_reason;  // "eos" | "stop" (a stop string) | "length" | "cancelled" | "error"
    Status error;               // set when finish_reason == "error"
  };
  // Blocks until new text, the end, or the timeout; returns (and consumes) what is new.
  Update wait(std::chrono::milliseconds timeout);
  // The same without blocking: what is new now (possibly nothing).
  Update poll();
  // `notify` is called (on the scheduler's thread, or at once when something is already
  // pending) after each append/finish; it must not block. nullptr removes it.
  void set_notify(std::function<void()> notify);
  // The client went away: the scheduler frees the slot before its next step.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // Filled by the scheduler; read them after `finished`.
  int64_t n_prompt = 0, n_reused = 0;
  std::atomic<int64_t> n_generated{0};
  std::vector<int32_t> tokens;  // generated ids (end-of-generation token not included)
  std::vector<std::vector<float>> embeddings;  // an embeddings Job's results, one per input
  double arrival = 0.0, first_token = 0.0, end = 0.0;  // steady-clock seconds
  int slot = -1;

  // Scheduler side.
  void append(const std::string& text);
  void append_logprobs(llm::SampleLogprobs logprobs);
  void finish(std::string reason, Status error = Status());

 private:
  Update take_locked();
  void ping();

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> notify_;
  std::string pending_;
  std::vector<llm::SampleLogprobs> pending_logprobs_;
  bool finished_ = false;
  bool delivered_end_ = false;
  std::string reason_;
  Status error_;
  std::atomic<bool> cancelled_{false};
};

struct SchedulerOptions {
  int64_t n_batch = 512;     // tokens per step (decode tokens first, then prompt chunks)
  size_t max_queue = 64;     // requests waiting for a slot; more get kResourceExhausted
  int embed_threads = 2;     // threads of the reference engine that computes embeddings
};

double now_seconds();

// What one sequence slot is doing, as GET /slots shows it (a copy taken after the last step).
struct SlotInfo {
  int id = 0;
  bool busy = false;          // a request holds the slot
  bool decoding = false;      // its prompt is read, it is generating
  int64_t n_cached = 0;       // KV cells of this slot's sequence (kept after a request, for reuse)
  int64_t n_prompt = 0;       // the current (or last) request's prompt tokens
  int64_t n_decoded = 0;      // tokens it has generated so far
  int64_t max_tokens = -1;    // its limit (-1: none)
  llm::SamplerParams sampling;
};

// Thread-safe front (submit, drain, stop); the Engine is touched only by the scheduler thread.
class Scheduler {
 public:
  // engine, tokenizer and metrics must outlive the scheduler. Starts its thread.
  Scheduler(llm::Engine& engine, const llm::Tokenizer& tokenizer, Metrics& metrics, SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. kResourceExhausted: the queue is full (retry later); kUnavailable: the
  // server is draining; kInvalidArgument: the prompt does not fit a slot.
  Result<std::shared_ptr<Job>> submit(GenParams params);
  // Queues several requests at once (the choices of one HTTP request): all of them, or none
  // with the same errors as submit().
  Result<std::vector<std::shared_ptr<Job>>> submit_all(std::vector<GenParams> params);

  // Queues the inputs of one embeddings request. They are computed on the scheduler's thread,
  // between two steps, by a reference-backend Engine of one sequence made at the first such
  // request (whatever device generation runs on); the Job then finishes with "stop" and
  // job->embeddings (Engine::embed's, one per input, in order), or with "error". Same errors as
  // submit().
  Result<std::shared_ptr<Job>> submit_embeddings(std::vector<std::vector<int32_t>> inputs);
  int64_t n_embd() const { return engine_.model().config().n_embd; }

  // Refuses new requests from now on; in-flight and queued ones go on.
  void begin_drain();
  // Waits until no request is queued or running, or the deadline passes; true if idle.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  // Ends every remaining request ("cancelled") and joins the thread. Idempotent.
  void stop();

  int64_t n_ctx() const { return engine_.n_ctx(); }
  int n_slots() const { return engine_.n_seq(); }
  // Thread-safe: the slots as of the last step (or admission).
  std::vector<SlotInfo> slot_infos() const;

 private:
  struct Slot;
  struct EmbedWork {
    std::shared_ptr<Job> job;
    std::vector<std::vector<int32_t>> inputs;
  };
  void loop();
  void run_embeddings(EmbedWork& work);
  void admit_locked();
  void plan_step(std::vector<llm::SeqTokens>* parts, std::vector<Slot*>* part_slot);
  size_t shared_prefix(const Slot& s, const std::vector<int32_t>& prompt) const;
  Slot* pick_slot(const std::vector<int32_t>& prompt, size_t* common) const;
  size_t copy_prefix_into(Slot& dst, const std::vector<int32_t>& prompt, size_t have);
  bool prompt_being_read(const std::vector<int32_t>& prompt) const;
  static constexpr size_t kMinCopy = 16;  // shorter shared prefixes are computed, not copied
  void finish_slot(Slot& s, const std::string& reason, Status error = Status());
  void advance(Slot& s, const float* logits);
  void update_gauges();

  llm::Engine& engine_;
  const llm::Tokenizer& tok_;
  Metrics& metrics_;
  SchedulerOptions opt_;
  std::vector<std::unique_ptr<Slot>> slots_;

  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::deque<std::shared_ptr<GenParams>> queue_params_;
  std::deque<EmbedWork> embed_queue_;
  bool embedding_ = false;                     // an embeddings request is being computed
  std::unique_ptr<llm::Engine> embed_engine_;  // scheduler thread only
  std::shared_ptr<const llm::TokenTrie> trie_;  // the vocabulary for grammars; scheduler thread only
  bool can_copy_ = true;  // the backend copies KV cells between slots (until it says it cannot)
  int n_busy_ = 0;
  bool stop_ = false, draining_ = false;
  std::deque<std::pair<double, int64_t>> recent_;  // (time, tokens generated) per step
  mutable std::mutex info_mu_;
  std::vector<SlotInfo> infos_;  // written by update_gauges(), read by slot_infos()
  std::thread thread_;
};

}  // namespace loom::serve
