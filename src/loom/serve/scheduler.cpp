// The scheduler thread: admission with prefix reuse, batched steps, one llm::Generation per slot.
#include "loom/serve/scheduler.h"

#include <algorithm>

#include "loom/base/log.h"
#include "loom/engine/generation.h"

namespace loom::serve {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- Job ------------------------------------------------------------------------------------

Job::Update Job::take_locked() {
  Update u;
  u.text.swap(pending_);
  u.logprobs.swap(pending_logprobs_);
  if (finished_) {
    u.finished = true;
    u.finish_reason = reason_;
    u.error = error_;
    delivered_end_ = true;
  }
  return u;
}

Job::Update Job::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] {
    return !pending_.empty() || !pending_logprobs_.empty() || (finished_ && !delivered_end_);
  });
  return take_locked();
}

Job::Update Job::poll() {
  std::lock_guard<std::mutex> lk(mu_);
  return take_locked();
}

void Job::set_notify(std::function<void()> notify) {
  bool ready = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    notify_ = std::move(notify);
    ready = notify_ && (!pending_.empty() || !pending_logprobs_.empty() || finished_);
  }
  if (ready) ping();
}

void Job::ping() {
  std::function<void()> n;
  {
    std::lock_guard<std::mutex> lk(mu_);
    n = notify_;
  }
  cv_.notify_all();
  if (n) n();
}

void Job::append(const std::string& text) {
  if (text.empty()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_ += text;
  }
  ping();
}

void Job::append_logprobs(llm::SampleLogprobs logprobs) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_logprobs_.push_back(std::move(logprobs));
  }
  ping();
}

void Job::finish(std::string reason, Status error) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (finished_) return;
    finished_ = true;
    reason_ = std::move(reason);
    error_ = std::move(error);
    end = now_seconds();
  }
  ping();
}

// ---- Scheduler ------------------------------------------------------------------------------

struct Scheduler::Slot {
  int seq = 0;
  std::shared_ptr<Job> job;
  std::shared_ptr<GenParams> params;
  size_t fed = 0;             // prompt tokens in the cache
  bool decoding = false;      // prompt done, generating
  int32_t last = 0;           // token to feed next while decoding
  std::unique_ptr<llm::Generation> gen;  // sampler, detokenizer, stop strings, end rule
  uint64_t admitted = 0;      // admission order (older prompts get the chunk budget first)
  double last_used = 0.0;     // when its last request ended (eviction: least recently used)
};

Scheduler::Scheduler(llm::Engine& engine, const llm::Tokenizer& tokenizer, Metrics& metrics, SchedulerOptions options)
    : engine_(engine), tok_(tokenizer), metrics_(metrics), opt_(options) {
  for (int s = 0; s < engine_.n_seq(); ++s) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->seq = s;
  }
  metrics_.slots_total = engine_.n_seq();
  metrics_.kv_cells_total = engine_.n_seq() * engine_.n_ctx();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { stop(); }

Result<std::shared_ptr<Job>> Scheduler::submit(GenParams params) {
  std::vector<GenParams> one;
  one.push_back(std::move(params));
  LOOM_ASSIGN_OR_RETURN(auto jobs, submit_all(std::move(one)));
  return jobs[0];
}

Result<std::vector<std::shared_ptr<Job>>> Scheduler::submit_all(std::vector<GenParams> params) {
  if (params.empty()) return invalid_argument("no request to queue");
  for (const GenParams& p : params) {
    if (p.prompt.empty()) return invalid_argument("the prompt is empty");
    if (static_cast<int64_t>(p.prompt.size()) >= engine_.n_ctx())
      return invalid_argument("the prompt has {} tokens; this server's context is {} tokens per request",
                              p.prompt.size(), engine_.n_ctx());
  }
  std::vector<std::shared_ptr<Job>> jobs;
  for (const GenParams& p : params) {
    auto job = std::make_shared<Job>();
    job->arrival = now_seconds();
    job->n_prompt = static_cast<int64_t>(p.prompt.size());
    jobs.push_back(std::move(job));
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (draining_ || stop_) return unavailable("the server is shutting down");
    // Several choices fit an empty queue even beyond its limit (else a small --max-queue would
    // refuse them forever); otherwise they all fit or none is queued.
    if (queue_.size() >= opt_.max_queue || (!queue_.empty() && queue_.size() + jobs.size() > opt_.max_queue)) {
      metrics_.rejected_queue_full.fetch_add(1);
      return resource_exhausted("the request queue is full ({} waiting)", queue_.size());
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
      queue_.push_back(jobs[i]);
      queue_params_.push_back(std::make_shared<GenParams>(std::move(params[i])));
    }
    metrics_.queue_depth = static_cast<int64_t>(queue_.size());
  }
  cv_.notify_all();
  return jobs;
}

Result<std::shared_ptr<Job>> Scheduler::submit_embeddings(std::vector<std::vector<int32_t>> inputs) {
  if (inputs.empty()) return invalid_argument("no input to embed");
  auto job = std::make_shared<Job>();
  job->arrival = now_seconds();
  for (const auto& in : inputs) {
    if (in.empty()) return invalid_argument("an input is empty");
    if (static_cast<int64_t>(in.size()) > engine_.n_ctx())
      return invalid_argument("an input has {} tokens; this server's context is {} tokens", in.size(), engine_.n_ctx());
    job->n_prompt += static_cast<int64_t>(in.size());
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (draining_ || stop_) return unavailable("the server is shutting down");
    if (queue_.size() + embed_queue_.size() >= opt_.max_queue) {
      metrics_.rejected_queue_full.fetch_add(1);
      return resource_exhausted("the request queue is full ({} waiting)", queue_.size() + embed_queue_.size());
    }
    embed_queue_.push_back(EmbedWork{job, std::move(inputs)});
  }
  cv_.notify_all();
  return job;
}

void Scheduler::run_embeddings(EmbedWork& w) {
  if (w.job->cancelled()) {
    metrics_.cancelled.fetch_add(1);
    w.job->finish("cancelled");
    return;
  }
  if (!embed_engine_) {
    llm::EngineOptions eo;
    eo.n_ctx = engine_.n_ctx();
    eo.n_threads = opt_.embed_threads;
    eo.n_batch = opt_.n_batch;
    eo.n_seq = 1;
    auto e = llm::Engine::create(engine_.model(), eo);
    if (!e.ok()) {
      w.job->finish("error", e.status());
      return;
    }
    embed_engine_ = std::move(e).value();
  }
  for (const auto& in : w.inputs) {
    std::vector<float> v;
    Status s = embed_engine_->embed(in, &v);
    if (!s.ok()) {
      w.job->finish("error", std::move(s));
      return;
    }
    w.job->embeddings.push_back(std::move(v));
  }
  w.job->finish("stop");
}

void Scheduler::begin_drain() {
  std::lock_guard<std::mutex> lk(mu_);
  draining_ = true;
  metrics_.draining = true;
}

bool Scheduler::wait_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lk(mu_);
  return idle_cv_.wait_until(lk, deadline, [&] {
    return queue_.empty() && n_busy_ == 0 && embed_queue_.empty() && !embedding_;
  });
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

size_t Scheduler::shared_prefix(const Slot& s, const std::vector<int32_t>& prompt) const {
  const auto& cached = engine_.tokens(s.seq);
  size_t c = 0;
  while (c < cached.size() && c < prompt.size() && cached[c] == prompt[c]) ++c;
  return c;
}

// The free slot whose cache shares the longest prefix with the prompt. Among equals (most often:
// none shares anything) an empty slot, else the one idle the longest: the cached prefix evicted
// is the least recently used one, so a conversation that goes on finds its history where it left
// it. Null when every slot is busy.
Scheduler::Slot* Scheduler::pick_slot(const std::vector<int32_t>& prompt, size_t* common) const {
  Slot* best = nullptr;
  *common = 0;
  auto evict_before = [&](const Slot& a, const Slot& b) {
    const bool a_empty = engine_.n_past(a.seq) == 0, b_empty = engine_.n_past(b.seq) == 0;
    if (a_empty != b_empty) return a_empty;
    return a.last_used < b.last_used;
  };
  for (const auto& s : slots_) {
    if (s->job) continue;
    const size_t c = shared_prefix(*s, prompt);
    if (!best || c > *common || (c == *common && evict_before(*s, *best))) {
      best = s.get();
      *common = c;
    }
  }
  return best;
}

// A longer prefix of the prompt in another slot (a busy one: a free one would have been picked)
// is copied into dst's cells rather than computed. Returns the prefix dst now holds.
size_t Scheduler::copy_prefix_into(Slot& dst, const std::vector<int32_t>& prompt, size_t have) {
  if (!can_copy_) return have;
  const Slot* src = nullptr;
  size_t longest = have;
  for (const auto& s : slots_) {
    if (s.get() == &dst) continue;
    const size_t c = shared_prefix(*s, prompt);
    if (c > longest) {
      src = s.get();
      longest = c;
    }
  }
  // The last prompt token is decoded again anyway (fresh logits); a few tokens are not worth it.
  const size_t n = std::min(longest, prompt.size() - 1);
  if (!src || n < have + kMinCopy) return have;
  Status st = engine_.copy_prefix(src->seq, dst.seq, static_cast<int64_t>(n));
  if (!st.ok()) {
    if (st.code() == StatusCode::kUnimplemented) can_copy_ = false;
    return have;
  }
  metrics_.prefix_copied_tokens.fetch_add(static_cast<int64_t>(n));
  return n;
}

// True when another slot is reading this very prompt now (the choices of one request, or the
// same prompt sent twice): the request waits until that read is done and then copies its cells.
bool Scheduler::prompt_being_read(const std::vector<int32_t>& prompt) const {
  if (!can_copy_ || prompt.size() <= kMinCopy) return false;
  for (const auto& s : slots_)
    if (s->job && !s->decoding && s->params && s->params->prompt == prompt) return true;
  return false;
}

// Moves queued requests into free slots, reusing cached prefixes (see pick_slot and
// copy_prefix_into).
void Scheduler::admit_locked() {
  static uint64_t counter = 0;
  while (!queue_.empty()) {
    auto job = queue_.front();
    auto params = queue_params_.front();
    if (job->cancelled()) {
      queue_.pop_front();
      queue_params_.pop_front();
      metrics_.cancelled.fetch_add(1);
      job->finish("cancelled");
      continue;
    }
    if (prompt_being_read(params->prompt)) break;
    size_t best_common = 0;
    Slot* best = pick_slot(params->prompt, &best_common);
    if (!best) break;
    queue_.pop_front();
    queue_params_.pop_front();
    metrics_.prefix_evicted_tokens.fetch_add(engine_.n_past(best->seq) - static_cast<int64_t>(best_common));
    // At least the last prompt token is decoded again, so its logits are fresh.
    size_t common = std::min(best_common, params->prompt.size() - 1);
    engine_.truncate(best->seq, static_cast<int64_t>(common));
    common = copy_prefix_into(*best, params->prompt, common);
    metrics_.prefix_lookups.fetch_add(1);
    if (common > 0) metrics_.prefix_hits.fetch_add(1);
    best->job = job;
    best->params = params;
    best->fed = common;
    best->decoding = false;
    llm::GenerationOptions gen;
    gen.max_tokens = params->max_tokens;
    gen.stop = params->stop;
    gen.ignore_eos = params->ignore_eos;
    gen.render_special = false;
    gen.logprobs = params->logprobs;
    gen.grammar = params->grammar;
    if (gen.grammar) {
      if (!trie_) trie_ = std::make_shared<const llm::TokenTrie>(tok_);  // once, at the first grammar
      gen.trie = trie_;
    }
    best->gen = std::make_unique<llm::Generation>(tok_, params->sampling, engine_.n_vocab(), std::move(gen));
    best->gen->accept_prompt(params->prompt);
    best->admitted = ++counter;
    job->n_reused = static_cast<int64_t>(common);
    job->slot = best->seq;
    ++n_busy_;
    metrics_.prompt_tokens.fetch_add(static_cast<int64_t>(params->prompt.size()));
    metrics_.reused_tokens.fetch_add(static_cast<int64_t>(common));
  }
  metrics_.queue_depth = static_cast<int64_t>(queue_.size());
}

void Scheduler::finish_slot(Slot& s, const std::string& reason, Status error) {
  if (s.gen) {
    if (reason == "cancelled") s.gen->cancel();
    // What the detokenizer and the stop matcher hold back belongs to the text (Generation::finish
    // knows when); after a failed step the request ends with the error alone.
    if (reason != "error") s.job->append(s.gen->finish());
  }
  if (reason == "cancelled") metrics_.cancelled.fetch_add(1);
  std::shared_ptr<Job> job = std::move(s.job);
  s.last_used = now_seconds();
  s.params.reset();
  s.gen.reset();
  {
    std::lock_guard<std::mutex> lk(mu_);
    --n_busy_;
  }
  // The slot reads idle (/slots, /metrics) before the client learns that its request ended, so a
  // request that follows the end of a stream finds it free.
  update_gauges();
  job->finish(reason, std::move(error));
  idle_cv_.notify_all();
}

// One sampled token for a slot; the rules are llm::generate's (the same Generation), so a request
// gets what `loom run` would give for the same prompt and sampling.
void Scheduler::advance(Slot& s, const float* logits) {
  Job& job = *s.job;
  if (job.n_generated.load() == 0) {
    job.first_token = now_seconds();
    metrics_.observe_ttft(job.first_token - job.arrival);
  }
  const llm::Generation::Step step = s.gen->next(logits, engine_.n_past(s.seq) >= engine_.n_ctx());
  if (step.token != llm::kNoToken) {
    job.tokens.push_back(step.token);
    job.n_generated.fetch_add(1);
    metrics_.generated_tokens.fetch_add(1);
  }
  if (step.logprobs) job.append_logprobs(std::move(*step.logprobs));
  job.append(step.text);
  if (step.done) {
    // OpenAI's finish reasons have no "context": a full context is a length limit there.
    finish_slot(s, step.reason == "context" ? std::string("length") : std::string(step.reason));
    return;
  }
  s.last = step.token;
  s.decoding = true;
}

std::vector<SlotInfo> Scheduler::slot_infos() const {
  std::lock_guard<std::mutex> lk(info_mu_);
  if (!infos_.empty()) return infos_;
  // Before the first step: every slot idle and empty.
  std::vector<SlotInfo> idle(slots_.size());
  for (size_t i = 0; i < idle.size(); ++i) idle[i].id = static_cast<int>(i);
  return idle;
}

void Scheduler::update_gauges() {
  int64_t used = 0, cached = 0, busy = 0;
  std::vector<SlotInfo> infos;
  for (auto& s : slots_) {
    const int64_t n = engine_.n_past(s->seq);
    cached += n;
    if (s->job) {
      used += n;
      ++busy;
    }
    SlotInfo& info = infos.emplace_back();
    info.id = s->seq;
    info.busy = s->job != nullptr;
    info.decoding = s->job && s->decoding;
    info.n_cached = n;
    if (s->params) {
      info.n_prompt = static_cast<int64_t>(s->params->prompt.size());
      info.max_tokens = s->params->max_tokens;
      info.sampling = s->params->sampling;
    }
    if (s->job) info.n_decoded = s->job->n_generated.load();
  }
  {
    std::lock_guard<std::mutex> lk(info_mu_);
    infos_ = std::move(infos);
  }
  metrics_.kv_cells_used = used;
  metrics_.kv_cells_cached = cached;
  metrics_.slots_busy = busy;
  const double now = now_seconds();
  while (!recent_.empty() && recent_.front().first < now - 5.0) recent_.pop_front();
  int64_t n = 0;
  for (const auto& r : recent_) n += r.second;
  const double span = recent_.empty() ? 0.0 : std::max(1e-3, now - recent_.front().first);
  metrics_.gen_tokens_per_second = recent_.size() >= 2 ? static_cast<double>(n) / span : 0.0;
}

// The next step: one token of every decoding slot, then prompt chunks of the reading slots.
void Scheduler::plan_step(std::vector<llm::SeqTokens>* parts, std::vector<Slot*>* part_slot) {
  parts->clear();
  part_slot->clear();
  int64_t budget = opt_.n_batch;
  for (auto& s : slots_) {
    if (!s->job || !s->decoding) continue;
    parts->push_back(llm::SeqTokens{s->seq, std::span<const int32_t>(&s->last, 1), true});
    part_slot->push_back(s.get());
    --budget;
  }
  std::vector<Slot*> reading;
  for (auto& s : slots_)
    if (s->job && !s->decoding) reading.push_back(s.get());
  std::sort(reading.begin(), reading.end(), [](Slot* a, Slot* b) { return a->admitted < b->admitted; });
  for (Slot* s : reading) {
    // Prompts share what the decoding slots leave of the budget; one token at least, so a
    // full house of decoders cannot starve a new request.
    const int64_t left = static_cast<int64_t>(s->params->prompt.size() - s->fed);
    const int64_t take = std::min(left, std::max<int64_t>(budget, parts->empty() ? opt_.n_batch : 1));
    if (take <= 0) continue;
    parts->push_back(llm::SeqTokens{s->seq,
                                   std::span<const int32_t>(s->params->prompt.data() + s->fed, static_cast<size_t>(take)),
                                   take == left});
    part_slot->push_back(s);
    budget -= take;
    if (budget <= 0) budget = 0;
  }
}

void Scheduler::loop() {
  std::vector<llm::SeqTokens> parts;
  std::vector<Slot*> part_slot;
  EmbedWork embed;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty() || n_busy_ > 0 || !embed_queue_.empty(); });
      if (stop_) break;
      admit_locked();
      if (!embed_queue_.empty()) {
        embed = std::move(embed_queue_.front());
        embed_queue_.pop_front();
        embedding_ = true;
      }
    }
    // One embeddings request between two steps: the decoding slots wait for it.
    if (embed.job) {
      run_embeddings(embed);
      embed = EmbedWork{};
      {
        std::lock_guard<std::mutex> lk(mu_);
        embedding_ = false;
      }
      idle_cv_.notify_all();
    }
    // A client that went away frees its slot before the next step.
    for (auto& s : slots_)
      if (s->job && s->job->cancelled()) finish_slot(*s, "cancelled");

    plan_step(&parts, &part_slot);
    if (parts.empty()) {
      update_gauges();
      continue;
    }
    const double t0 = now_seconds();
    Status st = engine_.step(parts);
    const double t1 = now_seconds();
    metrics_.steps.fetch_add(1);
    metrics_.step_sequences.fetch_add(static_cast<int64_t>(parts.size()));
    int64_t n_tok = 0;
    for (const auto& p : parts) n_tok += static_cast<int64_t>(p.tokens.size());
    metrics_.step_tokens.fetch_add(n_tok);
    metrics_.step_seconds.fetch_add(t1 - t0);
    if (!st.ok()) {
      log_error("serve: batched step failed: {}", st.to_string());
      for (Slot* s : part_slot) finish_slot(*s, "error", st);
      update_gauges();
      continue;
    }
    int64_t generated_before = metrics_.generated_tokens.load();
    for (size_t i = 0; i < parts.size(); ++i) {
      Slot& s = *part_slot[i];
      if (!s.job) continue;
      if (!s.decoding) {
        s.fed += parts[i].tokens.size();
        if (s.fed < s.params->prompt.size()) continue;
      }
      advance(s, engine_.step_logits(i));
    }
    recent_.emplace_back(t1, metrics_.generated_tokens.load() - generated_before);
    update_gauges();
  }
  // Stopped: whatever is left ends now.
  for (auto& s : slots_)
    if (s->job) finish_slot(*s, "cancelled");
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& j : queue_) j->finish("cancelled");
  for (auto& w : embed_queue_) w.job->finish("cancelled");
  embed_queue_.clear();
  queue_.clear();
  queue_params_.clear();
  idle_cv_.notify_all();
}

}  // namespace loom::serve
