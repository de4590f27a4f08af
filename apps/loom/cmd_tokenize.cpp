// `loom tokenize` / `loom detokenize`: text on stdin -> token ids as JSON, and back, with the
// model's own tokenizer (the same ids llama.cpp gives).
//
// Defaults mirror llama-cpp-python's Llama.tokenize(text, add_bos=True, special=True): the model
// adds its BOS/EOS as its metadata says, and special tokens written in the text are matched.
// --no-bos turns off BOS/EOS, --no-special matches only user-defined tokens. detokenize drops the
// BOS/EOS the model adds by itself, renders other special tokens as their text and keeps every
// byte (no clean-up), so `loom tokenize | loom detokenize` gives the input back.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "option_flags.h"
#include "loom/engine/model_path.h"
#include "loom/gguf/gguf.h"
#include "loom/text/tokenizer.h"

namespace loom::cli {
namespace {

using llm::TokenId;
using nlohmann::json;

std::string read_all_stdin() {
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), stdin)) > 0) data.append(buf, n);
  return data;
}

void write_stdout(std::string_view s) { std::fwrite(s.data(), 1, s.size(), stdout); }

Result<llm::Tokenizer> load_tokenizer(const std::string& model) {
  LOOM_ASSIGN_OR_RETURN(std::string path, llm::resolve_model_path(model));
  LOOM_ASSIGN_OR_RETURN(llm::GgufFile file, llm::GgufFile::open(path));
  return llm::Tokenizer::from_gguf(file);
}

// One --jsonl input line: a JSON string (UTF-8 text) or an array of byte values (raw bytes).
Result<std::string> parse_text_line(const std::string& line, size_t line_no) {
  json j = json::parse(line, nullptr, false);
  if (j.is_string()) return j.get<std::string>();
  if (j.is_array()) {
    std::string bytes;
    for (const auto& b : j) {
      if (!b.is_number_integer() || b.get<int64_t>() < 0 || b.get<int64_t>() > 255)
        return invalid_argument("stdin line {}: byte arrays hold integers 0..255", line_no);
      bytes.push_back(static_cast<char>(b.get<int64_t>()));
    }
    return bytes;
  }
  return invalid_argument("stdin line {}: expected a JSON string or an array of byte values", line_no);
}

Result<std::vector<TokenId>> parse_ids(const std::string& text, std::string_view where) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_array()) return invalid_argument("{}: expected a JSON array of token ids", where);
  std::vector<TokenId> ids;
  ids.reserve(j.size());
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
      return invalid_argument("{}: token ids must be integers", where);
    ids.push_back(static_cast<TokenId>(v.get<int64_t>()));
  }
  return ids;
}

std::string format_tokens(const llm::Tokenizer& tok, const std::vector<TokenId>& ids, bool as_text) {
  json out = json::array();
  for (TokenId id : ids) {
    if (as_text) out.push_back(std::string(tok.token_to_piece(id, true)));
    else out.push_back(id);
  }
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

struct TokenizeArgs {
  std::string model;
  bool no_bos = false, no_special = false, text = false, jsonl = false, info = false;
};

json vocab_info(const llm::Tokenizer& tok) {
  return json{{"model", tok.model_name()},
              {"pre", tok.pre_name()},
              {"vocab_size", tok.vocab_size()},
              {"bos", tok.bos_id()},
              {"eos", tok.eos_id()},
              {"eot", tok.eot_id()},
              {"unk", tok.unk_id()},
              {"pad", tok.pad_id()},
              {"add_bos", tok.add_bos()},
              {"add_eos", tok.add_eos()},
              {"add_space_prefix", tok.add_space_prefix()},
              {"eog", tok.eog_ids()}};
}

int run_tokenize(const TokenizeArgs& a) {
  auto tok = load_tokenizer(a.model);
  if (!tok.ok()) return report(tok.status());
  if (a.info) {
    write_stdout(vocab_info(*tok).dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
    return 0;
  }
  const bool add_special = !a.no_bos, parse_special = !a.no_special;
  if (!a.jsonl) {
    auto ids = tok->encode(read_all_stdin(), add_special, parse_special);
    if (!ids.ok()) return report(ids.status());
    write_stdout(format_tokens(*tok, *ids, a.text) + "\n");
    return 0;
  }
  std::string line;
  size_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (line.empty()) continue;
    auto text = parse_text_line(line, line_no);
    if (!text.ok()) return report(text.status());
    auto ids = tok->encode(*text, add_special, parse_special);
    if (!ids.ok()) return report(Status(ids.status()).with_context(fmt::format("stdin line {}", line_no)));
    write_stdout(format_tokens(*tok, *ids, a.text) + "\n");
  }
  return 0;
}

struct DetokenizeArgs {
  std::string model;
  bool no_special = false, keep_special = false, clean_spaces = false, jsonl = false;
};

int run_detokenize(const DetokenizeArgs& a) {
  auto tok = load_tokenizer(a.model);
  if (!tok.ok()) return report(tok.status());
  llm::DecodeOptions opts;
  opts.render_special = !a.no_special;
  opts.remove_special = !a.keep_special;
  opts.clean_spaces = a.clean_spaces;
  if (!a.jsonl) {
    auto ids = parse_ids(read_all_stdin(), "stdin");
    if (!ids.ok()) return report(ids.status());
    auto bytes = tok->decode(*ids, opts);
    if (!bytes.ok()) return report(bytes.status());
    write_stdout(*bytes);
    return 0;
  }
  std::string line;
  size_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (line.empty()) continue;
    auto ids = parse_ids(line, fmt::format("stdin line {}", line_no));
    if (!ids.ok()) return report(ids.status());
    auto bytes = tok->decode(*ids, opts);
    if (!bytes.ok()) return report(Status(bytes.status()).with_context(fmt::format("stdin line {}", line_no)));
    json out = json::array();
    for (unsigned char c : *bytes) out.push_back(c);
    write_stdout(out.dump() + "\n");
  }
  return 0;
}

LOOM_COMMAND(kTokenize, "tokenize",
             "Print the token ids of stdin as a JSON array (BOS/EOS as the model says, special tokens parsed)",
             [](CLI::App& sub) -> Action {
               auto a = std::make_shared<TokenizeArgs>();
               bind_option(sub.add_option("-m,--model", a->model, "GGUF file or a known model name (smollm2, gemma3); default: $LOOM_MODEL or the SmolLM2 model in the cache"),
                           opt::Opt::kModel);
               sub.add_flag("--no-bos", a->no_bos, "do not add the BOS/EOS tokens the model asks for");
               sub.add_flag("--no-special", a->no_special, "treat control tokens written in the text as plain text");
               sub.add_flag("--text", a->text, "print the tokens' text pieces instead of ids");
               sub.add_flag("--jsonl", a->jsonl,
                            "one input per line (a JSON string, or an array of byte values); one JSON array out per line");
               sub.add_flag("--info", a->info, "print the vocabulary's special ids and flags as JSON (reads no input)");
               return [a] { return run_tokenize(*a); };
             });

LOOM_COMMAND(kDetokenize, "detokenize", "Read a JSON array of token ids on stdin and write the exact bytes they stand for",
             [](CLI::App& sub) -> Action {
               auto a = std::make_shared<DetokenizeArgs>();
               bind_option(sub.add_option("-m,--model", a->model, "GGUF file or a known model name (smollm2, gemma3); default: $LOOM_MODEL or the SmolLM2 model in the cache"),
                           opt::Opt::kModel);
               sub.add_flag("--no-special", a->no_special, "render control tokens as nothing");
               sub.add_flag("--keep-special", a->keep_special, "keep a leading BOS / trailing EOS that the model adds by itself");
               sub.add_flag("--clean-spaces", a->clean_spaces,
                            "apply the model's clean_up_tokenization_spaces (as llama_detokenize does)");
               sub.add_flag("--jsonl", a->jsonl, "one id array per line; one JSON array of byte values out per line");
               return [a] { return run_detokenize(*a); };
             });

}  // namespace
}  // namespace loom::cli
