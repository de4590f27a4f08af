// The llm synthesizer's HTTP (libcurl through dlopen) and reply parsing (see llm.h).
#include "loom/evolve/llm.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <nlohmann/json.hpp>

#include "loom/base/options.h"

namespace loom::evolve {
namespace {

// The few libcurl entry points used, with the option numbers of curl.h (stable ABI values).
struct Curl {
  using Init = void* (*)();
  using Setopt = int (*)(void*, int, ...);
  using Perform = int (*)(void*);
  using Cleanup = void (*)(void*);
  using Strerror = const char* (*)(int);
  using Getinfo = int (*)(void*, int, ...);
  using SlistAppend = void* (*)(void*, const char*);
  using SlistFree = void (*)(void*);
  using GlobalInit = int (*)(long);
  Init init = nullptr;
  Setopt setopt = nullptr;
  Perform perform = nullptr;
  Cleanup cleanup = nullptr;
  Strerror strerror = nullptr;
  Getinfo getinfo = nullptr;
  SlistAppend slist_append = nullptr;
  SlistFree slist_free = nullptr;
  std::string error;
  static constexpr int kUrl = 10002, kWriteData = 10001, kPostFields = 10015, kHttpHeader = 10023;
  static constexpr int kWriteFunction = 20011, kTimeoutMs = 155, kNoSignal = 99, kPostFieldSize = 60;
  static constexpr int kConnectTimeoutMs = 156, kInfoResponseCode = 0x200002;
};

const Curl& curl() {
  static Curl c;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = nullptr;
    for (const char* n : {"libcurl.so.4", "libcurl.so", "libcurl-gnutls.so.4"})
      if ((h = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
    if (!h) {
      c.error = "libcurl (libcurl.so.4) is not installed: the llm synthesizer is unavailable";
      return;
    }
    c.init = reinterpret_cast<Curl::Init>(dlsym(h, "curl_easy_init"));
    c.setopt = reinterpret_cast<Curl::Setopt>(dlsym(h, "curl_easy_setopt"));
    c.perform = reinterpret_cast<Curl::Perform>(dlsym(h, "curl_easy_perform"));
    c.cleanup = reinterpret_cast<Curl::Cleanup>(dlsym(h, "curl_easy_cleanup"));
    c.strerror = reinterpret_cast<Curl::Strerror>(dlsym(h, "curl_easy_strerror"));
    c.getinfo = reinterpret_cast<Curl::Getinfo>(dlsym(h, "curl_easy_getinfo"));
    c.slist_append = reinterpret_cast<Curl::SlistAppend>(dlsym(h, "curl_slist_append"));
    c.slist_free = reinterpret_cast<Curl::SlistFree>(dlsym(h, "curl_slist_free_all"));
    auto global_init = reinterpret_cast<Curl::GlobalInit>(dlsym(h, "curl_global_init"));
    if (!c.init || !c.setopt || !c.perform || !c.cleanup || !c.strerror || !c.getinfo || !c.slist_append || !c.slist_free ||
        !global_init) {
      c.error = "libcurl lacks the expected entry points";
      c.init = nullptr;
      return;
    }
    global_init(3);  // CURL_GLOBAL_ALL
  });
  return c;
}

size_t on_write(char* p, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(p, size * n);
  return size * n;
}

bool looks_like(const std::string& text, CandKind k) {
  switch (k) {
    case CandKind::kIr: return text.find("kernel @") != std::string::npos;
    case CandKind::kCuda: return text.find("__global__") != std::string::npos;
    case CandKind::kPtx: return text.find(".entry") != std::string::npos;
    case CandKind::kCpp: return text.find("extern \"C\"") != std::string::npos;
    default: return false;
  }
}

}  // namespace

void LlmConfig::fill_from_env() {
  if (url.empty()) url = opt::get_string(opt::Opt::kLlmUrl);
  if (model.empty()) model = opt::get_string(opt::Opt::kLlmModel);
  if (key.empty()) key = opt::get_string(opt::Opt::kLlmKey);
}

Status llm_available() {
  const Curl& c = curl();
  if (!c.init) return unavailable("{}", c.error);
  return Status();
}

Result<std::string> llm_chat(const LlmConfig& cfg, const std::string& system, const std::string& user) {
  LOOM_RETURN_IF_ERROR(llm_available());
  if (cfg.url.empty()) return invalid_argument("the llm synthesizer needs an endpoint: --llm-url or LOOM_LLM_URL");
  const Curl& c = curl();
  std::string url = cfg.url;
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.size() >= 3 && url.substr(url.size() - 3) == "/v1") url.resize(url.size() - 3);
  url += "/v1/chat/completions";
  nlohmann::json req = {{"messages", {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}}},
                        {"max_tokens", cfg.max_tokens},
                        {"temperature", cfg.temperature}};
  if (!cfg.model.empty()) req["model"] = cfg.model;
  const std::string body = req.dump();
  void* h = c.init();
  if (!h) return internal_error("curl_easy_init failed");
  void* headers = c.slist_append(nullptr, "Content-Type: application/json");
  std::string auth;
  if (!cfg.key.empty()) {
    auth = "Authorization: Bearer " + cfg.key;
    headers = c.slist_append(headers, auth.c_str());
  }
  std::string out;
  c.setopt(h, Curl::kUrl, url.c_str());
  c.setopt(h, Curl::kHttpHeader, headers);
  c.setopt(h, Curl::kPostFields, body.c_str());
  c.setopt(h, Curl::kPostFieldSize, static_cast<long>(body.size()));
  c.setopt(h, Curl::kWriteFunction, &on_write);
  c.setopt(h, Curl::kWriteData, &out);
  c.setopt(h, Curl::kNoSignal, 1L);
  c.setopt(h, Curl::kTimeoutMs, static_cast<long>(cfg.timeout_s * 1000));
  c.setopt(h, Curl::kConnectTimeoutMs, 10000L);
  const int rc = c.perform(h);
  long code = 0;
  c.getinfo(h, Curl::kInfoResponseCode, &code);
  c.cleanup(h);
  c.slist_free(headers);
  if (rc != 0) return unavailable("POST {}: {}", url, c.strerror(rc));
  if (code != 200) return unavailable("POST {}: HTTP {}: {}", url, code, out.substr(0, 300));
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
    return data_loss("POST {}: not a chat completion: {}", url, out.substr(0, 300));
  const auto& m = j["choices"][0]["message"];
  if (!m.contains("content") || !m["content"].is_string()) return data_loss("POST {}: the reply has no message content", url);
  return m["content"].get<std::string>();
}

std::vector<Candidate> parse_reply(const std::string& reply, ir::TargetKind target, const std::string& default_launch) {
  std::vector<Candidate> out;
  auto add = [&](std::string lang, std::string text) {
    CandKind k;
    if (lang == "loom" || lang == "ir" || (lang.empty() && looks_like(text, CandKind::kIr))) k = CandKind::kIr;
    else if (lang == "cuda" || lang == "cu" || looks_like(text, CandKind::kCuda)) k = CandKind::kCuda;
    else if (lang == "ptx" || looks_like(text, CandKind::kPtx)) k = CandKind::kPtx;
    else if (lang == "cpp" || lang == "c++" || lang == "c" || looks_like(text, CandKind::kCpp)) k = CandKind::kCpp;
    else if (looks_like(text, CandKind::kIr)) k = CandKind::kIr;
    else return;
    if (target == ir::TargetKind::kCpp && (k == CandKind::kCuda || k == CandKind::kPtx)) return;
    if (target != ir::TargetKind::kCpp && k == CandKind::kCpp) return;
    if (text.find("// launch ") == std::string::npos && !default_launch.empty()) text += "\n" + default_launch + "\n";
    Candidate c;
    c.kind = k;
    c.source = std::move(text);
    out.push_back(std::move(c));
  };
  size_t p = 0;
  while ((p = reply.find("```", p)) != std::string::npos) {
    size_t eol = reply.find('\n', p);
    if (eol == std::string::npos) break;
    std::string lang = reply.substr(p + 3, eol - p - 3);
    while (!lang.empty() && (lang.back() == ' ' || lang.back() == '\r')) lang.pop_back();
    for (char& ch : lang) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    size_t end = reply.find("```", eol + 1);
    std::string text = reply.substr(eol + 1, end == std::string::npos ? std::string::npos : end - eol - 1);
    add(lang, text);
    if (end == std::string::npos) break;
    p = end + 3;
  }
  if (out.empty() && looks_like(reply, CandKind::kIr)) add("loom", reply.substr(reply.find("kernel @")));
  return out;
}

}  // namespace loom::evolve
