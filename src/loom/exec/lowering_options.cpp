// LoweringOptions::from_env (see lowering_options.h).
#include "loom/exec/lowering_options.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

namespace loom::exec {
namespace {

// The value of a set, non-empty variable; "" otherwise.
std::string_view env(const char* name) {
  const char* e = std::getenv(name);
  return e ? std::string_view(e) : std::string_view();
}

void unknown(std::vector<std::string>* w, const char* name, std::string_view v, std::string_view known) {
  if (w) w->push_back(fmt::format("{}={}: not one of {}; using the default", name, v, known));
}

// A 0/1 switch whose default is `def`.
bool flag(const char* name, bool def, std::vector<std::string>* w) {
  const std::string_view v = env(name);
  if (v.empty()) return def;
  if (v == "0") return false;
  if (v == "1") return true;
  unknown(w, name, v, "0, 1");
  return def;
}

}  // namespace

LoweringOptions LoweringOptions::from_env(std::vector<std::string>* w) {
  LoweringOptions o;
  o.gpu_fast_ops = flag("LOOM_GPU_FAST_OPS", o.gpu_fast_ops, w);
  o.gpu_batch_matvec = flag("LOOM_GPU_BATCH_MATVEC", o.gpu_batch_matvec, w);
  o.planar = flag("LOOM_PLANAR", o.planar, w);
  o.pdl_prompt = flag("LOOM_GPU_PDL_PROMPT", o.pdl_prompt, w);
  if (std::string_view v = env("LOOM_FUSE"); !v.empty()) {
    if (v == "0") o.fuse = Fuse::kOff;
    else if (v == "1") o.fuse = Fuse::kOn;
    else unknown(w, "LOOM_FUSE", v, "0, 1");
  }
  if (std::string_view v = env("LOOM_FUSE_NORM"); !v.empty()) {
    if (v == "q8") o.fuse_norm = FuseNorm::kQ8;
    else if (v == "q8_0") o.fuse_norm = FuseNorm::kQ8_0;
    else if (v == "add") o.fuse_norm = FuseNorm::kAdd;
    else if (v == "0") o.fuse_norm = FuseNorm::kOff;
    else unknown(w, "LOOM_FUSE_NORM", v, "q8, q8_0, add, 0");
  }
  if (std::string_view v = env("LOOM_FUSE_ATTN"); !v.empty()) {
    if (v == "0") o.fuse_attn = FuseAttn::kOff;
    else if (v == "1") o.fuse_attn = FuseAttn::kAll;
    else unknown(w, "LOOM_FUSE_ATTN", v, "0, 1");
  }
  if (std::string_view v = env("LOOM_DECODE_ATTENTION_MAX"); !v.empty()) {
    int64_t n = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec == std::errc() && end == v.data() + v.size() && n >= 0) o.decode_attention_max = n;
    else unknown(w, "LOOM_DECODE_ATTENTION_MAX", v, "a token count >= 0");
  }
  return o;
}

}  // namespace loom::exec
