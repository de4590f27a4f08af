// `loom chat`: interactive multi-turn chat with the model's own chat template. Reads one user
// message per line (a terminal, with libedit's line editing and history, or a pipe), streams
// replies, and reuses the KV cache of the conversation's unchanged prefix on every turn. Slash
// commands edit the conversation; Ctrl-C stops a reply, and ends the chat at an empty prompt
// (twice) or on a pipe; Ctrl-D, end of input or /exit end it.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "gen_flags.h"
#include "line_reader.h"
#include "loom/base/file.h"
#include "loom/base/options.h"
#include "loom/engine/engine.h"
#include "loom/engine/model_path.h"
#include "loom/engine/session.h"
#include "loom/model/model.h"
#include "loom/text/chat_template.h"
#include "loom/text/tokenizer.h"

namespace loom::cli {
namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) { g_interrupted.store(true); }

// SIGINT without SA_RESTART: a blocked read of stdin returns (EINTR), so the reader sees a
// Ctrl-C at the prompt; during a reply the flag stops the generation.
struct SigintGuard {
  struct sigaction old {};
  SigintGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, &old);
  }
  ~SigintGuard() { sigaction(SIGINT, &old, nullptr); }
};

struct ChatFlags {
  GenFlags gen;
  std::string system;
  int64_t n_predict = -1;
};

// The prompt ids of the rendered conversation. Templates usually write the BOS token as text;
// add the BOS id only when the model wants one and the text does not already start with it.
Result<std::vector<int32_t>> tokenize_chat(const llm::Tokenizer& tok, const std::string& text) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.encode(text, /*add_special=*/false, /*parse_special=*/true));
  if (tok.add_bos() && tok.bos_id() != llm::kNoToken && (ids.empty() || ids[0] != tok.bos_id()))
    ids.insert(ids.begin(), tok.bos_id());
  return ids;
}

const char* kChatHelp =
    "commands:\n"
    "  /help           this list\n"
    "  /system TEXT    set the system message (/system alone shows it; /system - removes it)\n"
    "  /reset          forget the conversation (the system message stays)\n"
    "  /save FILE      write the conversation as a JSON array of {role, content} messages\n"
    "  /load FILE      replace the conversation with one saved by /save\n"
    "  /exit, /quit    leave (also Ctrl-D, or Ctrl-C twice at an empty prompt)\n"
    "Ctrl-C during a reply stops it and keeps the conversation. A line starting with // is sent\n"
    "to the model with one / removed.\n";

// The conversation and the slash commands that edit it. Messages are what the template renders.
struct Conversation {
  std::vector<llm::ChatMessage> messages;

  bool has_system() const { return !messages.empty() && messages[0].role == "system"; }
  void set_system(const std::string& text) {
    if (has_system()) messages.erase(messages.begin());
    if (!text.empty()) messages.insert(messages.begin(), {"system", text});
  }
  void reset() { messages.resize(has_system() ? 1 : 0); }
};

Status save_conversation(const Conversation& c, const std::string& path) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& m : c.messages) j.push_back({{"role", m.role}, {"content", m.content}});
  return write_file(path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

Result<std::vector<llm::ChatMessage>> load_conversation(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return invalid_argument("{} is not a JSON array of {{role, content}} messages", path);
  std::vector<llm::ChatMessage> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& m = j[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      return invalid_argument("{}: message {} is not an object with string role and content", path, i);
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant")
      return invalid_argument("{}: message {} has role '{}' (system, user or assistant)", path, i, role);
    if (role == "system" && i != 0) return invalid_argument("{}: a system message must come first", path);
    out.push_back({role, m["content"].get<std::string>()});
  }
  return out;
}

// A slash command: "/word" or "/word ARGS". Returns false when the line is not one (it goes to
// the model); sets *quit for /exit. Feedback goes to stderr.
bool slash_command(const std::string& line, Conversation& c, bool* quit) {
  if (line.size() < 2 || line[0] != '/' || line[1] == '/') return false;
  const size_t sp = line.find(' ');
  const std::string word = line.substr(1, sp == std::string::npos ? std::string::npos : sp - 1);
  std::string arg = sp == std::string::npos ? "" : line.substr(sp + 1);
  while (!arg.empty() && (arg.back() == ' ' || arg.back() == '\t')) arg.pop_back();
  while (!arg.empty() && (arg.front() == ' ' || arg.front() == '\t')) arg.erase(arg.begin());
  auto say = [](const std::string& text) { std::fprintf(stderr, "%s\n", text.c_str()); };
  if (word == "exit" || word == "quit") {
    *quit = true;
  } else if (word == "help" || word == "?") {
    std::fputs(kChatHelp, stderr);
  } else if (word == "reset" || word == "clear") {
    const size_t dropped = c.messages.size() - (c.has_system() ? 1 : 0);
    c.reset();
    say(fmt::format("conversation cleared ({} messages forgotten{})", dropped,
                    c.has_system() ? "; the system message stays" : ""));
  } else if (word == "system") {
    if (arg.empty()) {
      say(c.has_system() ? "system message: " + c.messages[0].content : "no system message (/system TEXT sets one)");
    } else if (arg == "-") {
      c.set_system("");
      say("system message removed");
    } else {
      c.set_system(arg);
      say(fmt::format("system message set ({} characters); it applies from the next reply", arg.size()));
    }
  } else if (word == "save") {
    if (arg.empty()) {
      say("/save needs a file name: /save FILE");
    } else if (Status s = save_conversation(c, arg); !s.ok()) {
      say("could not save: " + s.to_string());
    } else {
      say(fmt::format("saved {} messages to {}", c.messages.size(), arg));
    }
  } else if (word == "load") {
    if (arg.empty()) {
      say("/load needs a file name: /load FILE");
    } else if (auto loaded = load_conversation(arg); !loaded.ok()) {
      say("could not load (conversation unchanged): " + loaded.status().to_string());
    } else {
      c.messages = std::move(loaded).value();
      say(fmt::format("loaded {} messages from {}", c.messages.size(), arg));
    }
  } else {
    say(fmt::format("unknown command /{}; /help lists the commands (start a line with // to send it as text)", word));
  }
  return true;
}

Status chat(const ChatFlags& f) {
  SigintGuard guard;
  LOOM_RETURN_IF_ERROR(f.gen.sampling().validate());
  LOOM_ASSIGN_OR_RETURN(std::string path, llm::resolve_model_path(f.gen.model));
  const bool tty = isatty(STDIN_FILENO) == 1;
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Model> model, llm::Model::load(path));
  LOOM_ASSIGN_OR_RETURN(llm::Tokenizer tok, llm::Tokenizer::from_gguf(model->gguf()));
  auto tmpl_or = llm::ChatTemplate::from_gguf(model->gguf());
  if (!tmpl_or.ok()) return std::move(tmpl_or).status().with_context("model " + path + " cannot chat");
  const llm::ChatTemplate tmpl = std::move(tmpl_or).value();
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Engine> engine, llm::Engine::create(*model, f.gen.engine()));
  llm::Sampler sampler(f.gen.sampling(engine->n_ctx()), model->config().n_vocab);

  const bool editing = tty && isatty(STDERR_FILENO) == 1 && line_editing_available();
  std::unique_ptr<LineReader> reader = LineReader::open(editing, cache_dir() + "/chat_history");
  if (tty)
    std::fprintf(stderr, "loom chat: %s (context %lld tokens). /help for commands; Ctrl-C stops a reply; "
                         "Ctrl-D or /exit quits.\n",
                 model->config().name.empty() ? path.c_str() : model->config().name.c_str(),
                 static_cast<long long>(engine->n_ctx()));

  Conversation conv;
  conv.set_system(f.system);
  std::string line;
  bool interrupted_at_empty_prompt = false;  // a second Ctrl-C there quits
  for (;;) {
    g_interrupted.store(false);
    const LineReader::Got got = reader->read(tty ? "> " : "", &line);
    if (got == LineReader::Got::kEnd) break;
    if (got == LineReader::Got::kInterrupted) {
      if (!tty) break;  // a pipe: Ctrl-C ends the chat
      if (!line.empty() || !interrupted_at_empty_prompt) {
        // Ctrl-C drops the line being typed; at an empty prompt it says how to leave.
        interrupted_at_empty_prompt = line.empty();
        if (line.empty()) std::fputs("(Ctrl-C again, Ctrl-D or /exit to quit)\n", stderr);
        continue;
      }
      break;
    }
    interrupted_at_empty_prompt = false;
    if (line.empty()) continue;
    reader->remember(line);
    bool quit = false;
    if (slash_command(line, conv, &quit)) {
      if (quit) break;
      continue;
    }
    if (line.rfind("//", 0) == 0) line.erase(0, 1);
    conv.messages.push_back({"user", line});
    auto text = tmpl.render(conv.messages, /*add_generation_prompt=*/true);
    if (!text.ok()) return std::move(text).status().with_context("rendering the chat template");
    LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, tokenize_chat(tok, *text));
    if (static_cast<int64_t>(prompt.size()) >= engine->n_ctx()) {
      std::fprintf(stderr, "loom: the conversation (%zu tokens) no longer fits in the context of %lld tokens; "
                           "use /reset or a larger -c\n", prompt.size(), static_cast<long long>(engine->n_ctx()));
      conv.messages.pop_back();
      continue;
    }
    llm::GenerateOptions opts = f.gen.generate_options();
    opts.max_tokens = f.n_predict;
    auto on_text = [](std::string_view t) {
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
      return true;
    };
    LOOM_ASSIGN_OR_RETURN(llm::GenerateResult r, llm::generate(*engine, tok, sampler, prompt, opts, on_text, &g_interrupted));
    std::fputc('\n', stdout);
    std::fflush(stdout);
    // A stopped reply stays in the conversation as far as it got, as the user saw it.
    conv.messages.push_back({"assistant", r.text});
    if (r.stop_reason == "cancelled") std::fputs("[reply stopped]\n", stderr);
    if (tty || opt::get_bool(opt::Opt::kChatStats))
      std::fprintf(stderr, "[%zu tokens, %.1f tok/s; prompt %lld new + %lld cached]\n", r.tokens.size(), r.gen_tps(),
                   static_cast<long long>(r.n_prompt - r.n_reused), static_cast<long long>(r.n_reused));
    if (r.stop_reason == "context")
      std::fprintf(stderr, "loom: the context is full; use /reset or a larger -c\n");
    if (r.stop_reason == "cancelled" && !tty) break;  // a pipe: Ctrl-C ends the chat
  }
  return Status();
}

}  // namespace

LOOM_COMMAND(kChat, "chat", "chat with a model using its chat template (stdin may be a pipe)", [](CLI::App& app) -> Action {
  auto f = std::make_shared<ChatFlags>();
  add_gen_flags(app, f->gen);
  app.add_option("--system", f->system, "system message at the start of the conversation");
  app.add_option("-n,--n-predict", f->n_predict, "at most this many tokens per reply (-1: until the end of the reply)")
      ->capture_default_str()->check(int_at_least(-1, " (-1: no limit)"));
  return [f] {
    f->gen.resolve_device();
    Status s = chat(*f);
    return s.ok() ? 0 : report(s);
  };
});

}  // namespace loom::cli
