// The generation loop (see session.h).
#include "loom/engine/session.h"

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

Result<GenerateResult> generate(Engine& engine, const Tokenizer& tokenizer, Sampler& sampler,
                                std::span<const int32_t> prompt, const GenerateOptions& options,
                                const std::function<bool(std::string_view)>& on_text,
                                const std::atomic<bool>* cancel) {
  GenerateResult r;
  r.n_prompt = static_cast<int64_t>(prompt.size());
  double t0 = now_seconds();
  LOOM_ASSIGN_OR_RETURN(r.n_reused, engine.sync(prompt));
  r.prompt_seconds = now_seconds() - t0;
  if (options.after_prompt) options.after_prompt(engine);

  Generation gen(tokenizer, sampler, options);
  gen.accept_prompt(prompt);
  bool listening = true;  // false once on_text declined: it is not called again
  auto emit = [&](const std::string& text) {
    if (text.empty() || !listening) return;
    r.text += text;
    if (on_text && !on_text(text)) listening = false;
  };
  t0 = now_seconds();
  while (!gen.done()) {
    if (cancel && cancel->load()) {
      gen.cancel();
      break;
    }
    const Generation::Step step = gen.next(engine.logits(), engine.n_past() >= engine.n_ctx());
    emit(step.text);
    if (!listening) gen.cancel();
    if (gen.done()) break;
    const int32_t one[1] = {step.token};
    LOOM_RETURN_IF_ERROR(engine.decode(one));
  }
  emit(gen.finish());
  r.tokens = gen.tokens();
  r.stop_reason = std::string(gen.reason());
  r.gen_seconds = now_seconds() - t0;
  return r;
}

}  // namespace loom::llm
