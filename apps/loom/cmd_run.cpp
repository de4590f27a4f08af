// `loom run`: complete a raw prompt (no chat template) with a model on the CPU, streaming only
// the generated text to stdout and the speed to stderr.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "gen_flags.h"
#include "loom/base/file.h"
#include "loom/engine/engine.h"
#include "loom/engine/model_path.h"
#include "loom/engine/session.h"
#include "loom/exec/hrx_backend.h"
#include "loom/model/model.h"
#include "loom/text/tokenizer.h"

namespace loom::cli {
namespace {

struct RunFlags {
  GenFlags gen;
  std::string prompt, prompt_file, prompt_ids;
  int64_t n_predict = 256;
  bool json = false, dump_program = false;
  int64_t dump_tokens = 1;
  std::string dump_logits;
};

Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return invalid_argument("--prompt-ids wants a JSON array of token ids");
  std::vector<int32_t> ids;
  for (const auto& x : j) {
    if (!x.is_number_integer()) return invalid_argument("--prompt-ids: {} is not a token id", x.dump());
    ids.push_back(x.get<int32_t>());
  }
  return ids;
}

Status run(const RunFlags& f) {
  LOOM_RETURN_IF_ERROR(f.gen.sampling().validate());
  int given = !f.prompt.empty() + !f.prompt_file.empty() + !f.prompt_ids.empty();
  if (given != 1 && !f.dump_program)
    return invalid_argument("give exactly one of -p PROMPT, -f FILE or --prompt-ids JSON");
  LOOM_ASSIGN_OR_RETURN(std::string path, llm::resolve_model_path(f.gen.model));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Model> model, llm::Model::load(path, !f.json));
  LOOM_ASSIGN_OR_RETURN(llm::Tokenizer tok, llm::Tokenizer::from_gguf(model->gguf()));
  if (f.dump_program) {
    LOOM_ASSIGN_OR_RETURN(llm::Program p, exec::device_program(*model, f.gen.device, f.dump_tokens, 1));
    std::fputs(p.to_string(model->weight_names()).c_str(), stdout);
    return Status();
  }

  std::vector<int32_t> prompt;
  if (!f.prompt_ids.empty()) {
    LOOM_ASSIGN_OR_RETURN(prompt, parse_ids(f.prompt_ids));
  } else {
    std::string text = f.prompt;
    if (!f.prompt_file.empty()) {
      LOOM_ASSIGN_OR_RETURN(text, read_file(f.prompt_file));
    }
    // As llama.cpp completes a raw prompt: BOS/EOS as the model's metadata says, special tokens
    // written in the text are parsed.
    LOOM_ASSIGN_OR_RETURN(prompt, tok.encode(text, /*add_special=*/true, /*parse_special=*/true));
  }
  if (prompt.empty()) return invalid_argument("the prompt is empty (no tokens to start from)");

  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Engine> engine, llm::Engine::create(*model, f.gen.engine()));
  const int64_t need = static_cast<int64_t>(prompt.size()) + std::max<int64_t>(f.n_predict, 0);
  if (static_cast<int64_t>(prompt.size()) >= engine->n_ctx() || need > engine->n_ctx())
    return resource_exhausted("prompt of {} tokens + {} to generate exceeds the context of {} tokens (-c; the model "
                              "allows up to {})", prompt.size(), std::max<int64_t>(f.n_predict, 0), engine->n_ctx(),
                              model->config().n_ctx_train);

  llm::Sampler sampler(f.gen.sampling(engine->n_ctx()), model->config().n_vocab);
  llm::GenerateOptions opts = f.gen.generate_options();
  opts.max_tokens = f.n_predict;
  opts.render_special = true;  // a raw completion shows control tokens (with --ignore-eos, the EOS text)
  Status dump_status;
  if (!f.dump_logits.empty()) {
    opts.after_prompt = [&](const llm::Engine& e) {
      std::string_view bytes(reinterpret_cast<const char*>(e.logits()), static_cast<size_t>(e.n_vocab()) * sizeof(float));
      dump_status = write_file(f.dump_logits, bytes);
    };
  }
  auto on_text = [&](std::string_view text) {
    if (!f.json) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  LOOM_ASSIGN_OR_RETURN(llm::GenerateResult r, llm::generate(*engine, tok, sampler, prompt, opts, on_text));
  LOOM_RETURN_IF_ERROR(dump_status);
  if (f.json) {
    nlohmann::json j;
    j["prompt_tokens"] = prompt;
    j["tokens"] = r.tokens;
    j["text"] = r.text;
    j["stop_reason"] = r.stop_reason;
    j["seed"] = sampler.seed();
    j["prompt_tokens_per_second"] = r.prompt_tps();
    j["generation_tokens_per_second"] = r.gen_tps();
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fputc('\n', stdout);
  }
  print_speed(r);
  return Status();
}

}  // namespace

LOOM_COMMAND(kRun, "run", "complete a raw prompt with a model (no chat template)", [](CLI::App& app) -> Action {
  auto f = std::make_shared<RunFlags>();
  add_gen_flags(app, f->gen);
  app.add_option("-p,--prompt", f->prompt, "prompt text");
  app.add_option("-f,--file", f->prompt_file, "read the prompt from a file");
  app.add_option("-n,--n-predict", f->n_predict, "tokens to generate (-1: until end of text or full context)")
      ->capture_default_str()->check(int_at_least(-1, " (-1: no limit)"));
  app.add_option("--prompt-ids", f->prompt_ids, "prompt as a JSON array of token ids (testing)")->group("Advanced");
  app.add_flag("--json", f->json, "print prompt and generated ids, text and speed as JSON")->group("Advanced");
  app.add_option("--dump-logits", f->dump_logits, "write the last prompt token's logits (float32) to FILE")
      ->group("Advanced");
  app.add_flag("--dump-program", f->dump_program,
               "print the step Program as --device runs it (fused for cpu and cuda; no device needed) and exit")
      ->group("Advanced");
  app.add_option("--dump-tokens", f->dump_tokens, "tokens of the step --dump-program prints (default 1: a decode step)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->group("Advanced");
  return [f] {
    f->gen.resolve_device();
    Status s = run(*f);
    return s.ok() ? 0 : report(s);
  };
});

}  // namespace loom::cli
