// The generation loop (see session.h).
#include "loom/engine/session.h"

#include <algorithm>
#include <chrono>

namespace loom::llm {
namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

double GenerateResult::prompt_tps() const {
  const int64_t n = n_prompt - n_reused;
  return prompt_seconds > 0 ? static_cast<double>(n) / prompt_seconds : 0.0;
}
double GenerateResult::gen_tps() const {
  return gen_seconds > 0 ? static_cast<double>(tokens.size()) / gen_seconds : 0.0;
}

std::string StopMatcher::feed(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  // A complete stop string ends generation; text before it is released.
  size_t hit = std::string::npos;
  for (const auto& s : stops_) {
    if (s.empty()) continue;
    size_t at = pending_.find(s);
    if (at != std::string::npos) hit = std::min(hit, at);
  }
  if (hit != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, hit);
    pending_.clear();
    return out;
  }
  // Keep the longest suffix that is a prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - (s.empty() ? 0 : 1), pending_.size()); k > keep; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  std::string out;
  out.swap(pending_);
  return out;
}

Result<GenerateResult> generate(Engine& engine, Sampler& sampler, std::span<const int32_t> prompt,
                                const GenerateOptions& options, const TextHooks& hooks,
                                const std::function<bool(std::string_view)>& on_text,
                                const std::atomic<bool>* cancel) {
  GenerateResult r;
  r.n_prompt = static_cast<int64_t>(prompt.size());
  double t0 = now_seconds();
  LOOM_ASSIGN_OR_RETURN(r.n_reused, engine.sync(prompt));
  r.prompt_seconds = now_seconds() - t0;
  if (options.after_prompt) options.after_prompt(engine);
  for (int32_t t : prompt) sampler.accept(t);

  StopMatcher stop(options.stop);
  bool cancelled = false;
  auto emit = [&](const std::string& text) {
    if (text.empty() || cancelled) return;
    r.text += text;
    if (on_text && !on_text(text)) cancelled = true;
  };
  t0 = now_seconds();
  for (;;) {
    if (cancel && cancel->load()) { r.stop_reason = "cancelled"; break; }
    if (cancelled) { r.stop_reason = "cancelled"; break; }
    if (options.max_tokens >= 0 && static_cast<int64_t>(r.tokens.size()) >= options.max_tokens) {
      r.stop_reason = "length";
      break;
    }
    const int32_t id = sampler.sample(engine.logits());
    sampler.accept(id);
    if (!options.ignore_eos && hooks.is_eog && hooks.is_eog(id)) { r.stop_reason = "eos"; break; }
    r.tokens.push_back(id);
    if (hooks.piece) emit(stop.feed(hooks.piece(id)));
    if (stop.stopped()) { r.stop_reason = "stop"; break; }
    if (options.max_tokens >= 0 && static_cast<int64_t>(r.tokens.size()) >= options.max_tokens) {
      r.stop_reason = "length";
      break;
    }
    if (engine.n_past() >= engine.n_ctx()) { r.stop_reason = "context"; break; }
    const int32_t one[1] = {id};
    LOOM_RETURN_IF_ERROR(engine.decode(one));
  }
  if (r.stop_reason != "stop") {
    std::string tail = hooks.flush ? hooks.flush() : std::string();
    emit(stop.feed(tail));
    emit(stop.flush());
  }
  r.gen_seconds = now_seconds() - t0;
  return r;
}

}  // namespace loom::llm
