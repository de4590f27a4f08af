// The llm synthesizer: a prompt built from the op spec, the reference, the parent kernel and its
// diagnostics, knowledge-base documents and skills, sent to any OpenAI-compatible chat endpoint
// (`loom serve` is one); kernels are parsed out of the reply as Loom IR, C++ (cpu) or CUDA C++.
//
// HTTP goes through libcurl, loaded with dlopen at first use (no build-time dependency: the
// portable GPU build has it when the machine has libcurl.so.4); without it the synthesizer is
// unavailable and says so.
#pragma once

#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/store/candidate.h"
#include "loom/evolve/store_names.h"

namespace loom::evolve {

struct LlmConfig {
  std::string url;    // base URL, e.g. http://127.0.0.1:8080 (".../v1" accepted)
  std::string model;  // may be empty for servers with one model
  std::string key;    // bearer token, may be empty
  int max_tokens = 768;
  double temperature = 0.8;
  double timeout_s = 180;
  // Missing fields from LOOM_LLM_URL / LOOM_LLM_MODEL / LOOM_LLM_KEY.
  void fill_from_env();
};

// OK when libcurl can be loaded, else why not.
Status llm_available();

// One chat completion: the assistant message's text.
Result<std::string> llm_chat(const LlmConfig& cfg, const std::string& system, const std::string& user);

// Kernels in a reply: fenced blocks (```loom / ```cpp / ```cuda / ```ptx, or unlabeled blocks
// that look like one of them). Each becomes a candidate of that kind; text that names no
// launch gets a default launch line from `default_launch` (may be empty).
std::vector<Candidate> parse_reply(const std::string& reply, ir::TargetKind target, const std::string& default_launch);

}  // namespace loom::evolve
