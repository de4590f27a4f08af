// The option table and its registry (see options.h). This is the only file of src/ that reads
// the environment: a new setting is a new row here, so `loom info --flags` always lists it.
#include "loom/base/options.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>

#include "loom/base/log.h"

namespace loom::opt {
namespace {

constexpr int64_t kNoMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

// Rows in the order of enum Opt (checked when a registry is made, and by tests/base).
const std::vector<OptionInfo>& rows() {
  static const std::vector<OptionInfo> t = {
      {Opt::kThreads, "threads", "LOOM_THREADS", "--threads", Type::kInt, "2", "", 1, 1024,
       "CPU threads of the reference ops and the HRX cpu device"},
      {Opt::kLog, "log", "LOOM_LOG", "", Type::kString, "warn", "error|warn|info|debug", 0, 0,
       "the least severe log level printed on stderr"},
      {Opt::kProgress, "progress", "LOOM_PROGRESS", "", Type::kString, "auto", "auto|0|1", 0, 0,
       "progress lines on stderr: auto (when stderr is a terminal), 1 always, 0 never"},
      {Opt::kCacheDir, "cache_dir", "LOOM_CACHE_DIR", "", Type::kPath, "", "", 0, 0,
       "models, compiled kernels and the evolve database (empty: $XDG_CACHE_HOME/loom, else $HOME/.cache/loom)"},

      {Opt::kModel, "model", "LOOM_MODEL", "--model", Type::kPath, "", "", 0, 0,
       "the GGUF model of run, chat, bench, serve and tokenize (empty: SmolLM2-135M-Instruct in <cache_dir>/models)"},
      {Opt::kDevice, "device", "LOOM_DEVICE", "--device", Type::kString, "", "", 0, 0,
       "cpu-ref | cpu | cuda[:N] (empty: cuda:0 when present, else cpu-ref)"},
      {Opt::kSchedule, "schedule", "LOOM_SCHEDULE", "", Type::kString, "", "", 0, 0,
       "knob values over ops' default schedules: 'op:knob=v,knob=v;op2:knob=v' (docs/kernels.md)"},
      {Opt::kFuse, "fuse", "LOOM_FUSE", "", Type::kString, "gpu", "gpu|0|1", 0, 0,
       "the HRX lowering's launch fusions: on GPUs only (gpu), on every device (1), off (0)"},
      {Opt::kPrefillMatmul, "prefill_matmul", "LOOM_PREFILL_MATMUL", "", Type::kString, "auto", "auto|int8|f16|wgmma", 0, 0,
       "prompt matmuls on GPUs: integer tensor cores on Q8_1 activations where measured faster (auto: Q4_0/Q8_0/Q4_K), "
       "for every format they take (int8), f16 tiles on mma.sync (f16), or f16 tiles on Hopper's warpgroup MMA "
       "where the GPU has it (wgmma; else as f16)"},
      {Opt::kCpuMatmul, "cpu_matmul", "LOOM_CPU_MATMUL", "", Type::kString, "auto", "auto|exact|summed", 0, 0,
       "prompt matmuls on the cpu device: Intel AMX tiles where the CPU has them, else whole-block integer sums for Q4_0 "
       "(auto; as llama.cpp's CPU backend does with repacked weights, with the same deviation from the plain path), the "
       "reference's bits for every format (exact), or whole-block sums wherever the token-lane kernel takes the format "
       "(summed)"},
      {Opt::kCpuAmx, "cpu_amx", "LOOM_CPU_AMX", "", Type::kBool, "1", "", 0, 0,
       "let cpu kernels use Intel AMX tiles where the CPU and OS offer them (0: never; prompt matmuls then take the "
       "AVX kernels)"},
      {Opt::kPromptAttention, "prompt_attention", "LOOM_PROMPT_ATTENTION", "", Type::kString, "mma", "mma|simt", 0, 0,
       "prompt attention on GPUs: tensor cores (mma: attention_mma where it takes the shape) or attention_prompt (simt)"},
      {Opt::kDecodeAttentionMax, "decode_attention_max", "LOOM_DECODE_ATTENTION_MAX", "", Type::kInt, "8", "", 0,
       kNoMax, "steps of up to this many tokens use the split-key decode attention, longer ones the prompt attention"},
      {Opt::kNoGraphs, "no_graphs", "LOOM_NO_GRAPHS", "", Type::kBool, "0", "", 0, 0,
       "HRX steps launch their kernels one by one instead of replaying a captured graph"},
      {Opt::kProfile, "profile", "LOOM_PROFILE", "--profile", Type::kBool, "0", "", 0, 0,
       "per-op device time of the HRX engine (eager launches with events around each)"},
      {Opt::kDumpValues, "dump_values", "LOOM_DUMP_VALUES", "", Type::kPath, "", "", 0, 0,
       "a directory where every step writes its values (compared by tools/compare_dumps.py)"},

      {Opt::kHrxProfile, "hrx_profile", "LOOM_HRX_PROFILE", "", Type::kBool, "0", "", 0, 0,
       "the HRX cpu driver prints launches and time per kernel at exit"},
      {Opt::kCxx, "cxx", "LOOM_CXX", "", Type::kString, "c++", "", 0, 0,
       "the C++ compiler of the cpp target (a name on PATH or a path)"},
      {Opt::kCpuArch, "cpu_arch", "LOOM_CPU_ARCH", "", Type::kString, "native", "native|x86-64-v4|x86-64-v3|x86-64-v2", 0,
       0, "the instruction sets of the cpp target's kernels (-march): native (this CPU's, VNNI included where present), "
       "x86-64-v4 (AVX-512), x86-64-v3 (AVX2+FMA), x86-64-v2 (SSE4.2); a level this CPU lacks is refused"},
      {Opt::kLlc, "llc", "LOOM_LLC", "", Type::kPath, "", "", 0, 0,
       "LLVM's llc for the amdgpu target (empty: llc-19, else llc, on PATH)"},
      {Opt::kLld, "lld", "LOOM_LLD", "", Type::kPath, "", "", 0, 0,
       "LLVM's ld.lld for the amdgpu target (empty: ld.lld-19, else ld.lld, on PATH)"},
      {Opt::kHsaRuntime, "hsa_runtime", "LOOM_HSA_RUNTIME", "", Type::kPath, "", "", 0, 0,
       "the HSA runtime (ROCr) the HRX amdgpu driver loads (empty: libhsa-runtime64.so.1 on the loader's path)"},

      {Opt::kChatStats, "chat_stats", "LOOM_CHAT_STATS", "", Type::kBool, "0", "", 0, 0,
       "loom chat prints each reply's speed line even when stderr is not a terminal"},
      {Opt::kApiKey, "api_key", "LOOM_API_KEY", "--api-key", Type::kString, "", "", 0, 0,
       "the bearer token loom serve requires on /v1/* (empty: none)", false, true},

      {Opt::kNoKernelStore, "no_kernel_store", "LOOM_NO_KERNEL_STORE", "", Type::kBool, "0", "", 0, 0,
       "the lowering ignores the kernel store and the shipped kernels (ops' default schedules only)"},
      {Opt::kNoShippedKernels, "no_shipped_kernels", "LOOM_NO_SHIPPED_KERNELS", "", Type::kBool, "0", "", 0, 0,
       "the lowering ignores the kernels that ship with Loom (data/kernels/); the user's store still applies"},
      {Opt::kEvolveDb, "evolve_db", "LOOM_EVOLVE_DB", "--db", Type::kPath, "", "", 0, 0,
       "the evolve database and kernel store (empty: <cache_dir>/evolve.db)"},
      {Opt::kEvolveDbRetry, "evolve_db_retry_s", "LOOM_EVOLVE_DB_RETRY_S", "", Type::kDouble, "60", "", 0, 86400,
       "seconds evolve keeps reconnecting to a PostgreSQL database that went away before it stops"},
      {Opt::kKbDir, "kb_dir", "LOOM_KB_DIR", "", Type::kPath, "", "", 0, 0,
       "the knowledge base's seed documents (empty: kb/ of the source tree)"},
      {Opt::kEvolveWorker, "evolve_worker", "LOOM_EVOLVE_WORKER", "", Type::kPath, "", "", 0, 0,
       "the loom binary that runs isolated evaluations (empty: the running loom)"},
      {Opt::kEvolveIsolation, "evolve_isolation", "LOOM_EVOLVE_ISOLATION", "", Type::kString, "auto",
       "auto|exec|fork", 0, 0, "how an evaluation is isolated: auto (exec for GPUs, fork for cpu), exec, fork"},
      {Opt::kEvolvePersistent, "evolve_persistent", "LOOM_EVOLVE_PERSISTENT", "", Type::kBool, "1", "", 0, 0,
       "exec'ed evaluation workers serve many candidates (0: one process per evaluation)"},
      {Opt::kLlmUrl, "llm_url", "LOOM_LLM_URL", "--llm-url", Type::kString, "", "", 0, 0,
       "the OpenAI-compatible endpoint of evolve's llm synthesizer"},
      {Opt::kLlmModel, "llm_model", "LOOM_LLM_MODEL", "--llm-model", Type::kString, "", "", 0, 0,
       "the model name sent to that endpoint"},
      {Opt::kLlmKey, "llm_key", "LOOM_LLM_KEY", "--llm-key", Type::kString, "", "", 0, 0,
       "the API key sent to that endpoint", false, true},

      {Opt::kTmpdir, "tmpdir", "TMPDIR", "", Type::kPath, "/tmp", "", 0, 0,
       "temporary files (evolve requests and input pools)", true},
      {Opt::kHome, "home", "HOME", "", Type::kPath, "", "", 0, 0, "the user's home (the cache's fallback)", true},
      {Opt::kXdgCacheHome, "xdg_cache_home", "XDG_CACHE_HOME", "", Type::kPath, "", "", 0, 0,
       "the user's cache root (Loom's cache is loom/ in it)", true},
      {Opt::kPath, "path", "PATH", "", Type::kString, "/usr/local/bin:/usr/bin:/bin", "", 0, 0,
       "where tools are found (c++, ptxas, llc, ncu)", true},
  };
  return t;
}

// A value in every form a getter may ask for; `text` is the normalized form for listings.
struct Value {
  std::string text;
  bool b = false;
  int64_t i = 0;
  double d = 0;
};

std::string accepted(const OptionInfo& r) {
  switch (r.type) {
    case Type::kBool: return "one of 0|1|true|false|yes|no|on|off";
    case Type::kInt:
      if (r.max == kNoMax) return r.min == kNoMin ? "an integer" : fmt::format("an integer >= {}", r.min);
      return fmt::format("an integer in [{}, {}]", r.min, r.max);
    case Type::kDouble: return "a number";
    case Type::kString: return *r.choices ? fmt::format("one of {}", r.choices) : "any text";
    case Type::kPath: return "a path";
  }
  return "";
}

// Parses `text` as row `r`'s type into *out; false when it is not one of the accepted values.
bool parse(const OptionInfo& r, std::string_view text, Value* out) {
  switch (r.type) {
    case Type::kBool:
      if (text == "1" || text == "true" || text == "yes" || text == "on") out->b = true;
      else if (text == "0" || text == "false" || text == "no" || text == "off") out->b = false;
      else return false;
      out->text = out->b ? "1" : "0";
      return true;
    case Type::kInt: {
      int64_t n = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      if (ec != std::errc() || end != text.data() + text.size() || n < r.min || n > r.max) return false;
      out->i = n;
      out->text = std::to_string(n);
      return true;
    }
    case Type::kDouble: {
      std::string s(text);
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size()) return false;
      out->d = v;
      out->text = s;
      return true;
    }
    case Type::kString:
      if (*r.choices) {
        bool found = false;
        std::string_view c(r.choices);
        for (size_t start = 0; start <= c.size();) {
          size_t bar = c.find('|', start);
          if (bar == std::string_view::npos) bar = c.size();
          found = found || c.substr(start, bar - start) == text;
          start = bar + 1;
        }
        if (!found) return false;
      }
      out->text = std::string(text);
      return true;
    case Type::kPath:
      out->text = std::string(text);
      return true;
  }
  return false;
}

[[noreturn]] void broken(const char* what, const OptionInfo& r) {
  std::fprintf(stderr, "loom: internal error: option %s: %s\n", r.name, what);
  std::abort();
}

}  // namespace

std::string_view type_name(Type t) {
  switch (t) {
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kDouble: return "double";
    case Type::kString: return "string";
    case Type::kPath: return "path";
  }
  return "?";
}

std::string_view source_name(Source s) {
  switch (s) {
    case Source::kDefault: return "default";
    case Source::kEnv: return "env";
    case Source::kFlag: return "flag";
  }
  return "?";
}

const std::vector<OptionInfo>& table() { return rows(); }
const OptionInfo& info(Opt o) { return rows().at(static_cast<size_t>(o)); }

struct Registry::Impl {
  struct Slot {
    Value def;
    bool has_env = false, has_flag = false, warned = false;
    Value env, flag;
    std::string env_error;  // the environment's text was refused: why
  };
  EnvLookup lookup;
  std::mutex mu;
  std::vector<Slot> slots;

  // A set, non-empty variable's value: an empty one counts as unset.
  const char* env(const OptionInfo& r) const {
    if (!*r.env) return nullptr;
    const char* v = lookup(r.env);
    return v && *v ? v : nullptr;
  }

  void read_env(const OptionInfo& r, Slot& s) {
    s.has_env = false;
    s.env_error.clear();
    const char* v = env(r);
    if (!v) return;
    if (parse(r, v, &s.env)) {
      s.has_env = true;
    } else {
      s.env_error = fmt::format("{}={}: expected {}", r.env, v, accepted(r));
    }
  }

  // The slot's value and source; the caller holds mu.
  std::pair<const Value*, Source> resolve(Opt o) {
    const OptionInfo& r = info(o);
    Slot& s = slots[static_cast<size_t>(o)];
    if (r.system) read_env(r, s);  // the process's environment as it is now
    if (s.has_flag) return {&s.flag, Source::kFlag};
    if (s.has_env) return {&s.env, Source::kEnv};
    if (!s.env_error.empty() && !s.warned) {
      s.warned = true;
      log_line(LogLevel::kWarn, fmt::format("{}; using the default '{}'", s.env_error, r.def));
    }
    return {&s.def, Source::kDefault};
  }

  const Value& get(Opt o, bool (*type_ok)(Type)) {
    const OptionInfo& r = info(o);
    if (!type_ok(r.type)) broken("read as another type than its table row", r);
    return *resolve(o).first;
  }
};

Registry::Registry(EnvLookup env) : impl_(std::make_unique<Impl>()) {
  impl_->lookup = std::move(env);
  const auto& t = rows();
  if (t.size() != static_cast<size_t>(Opt::kCount)) broken("the table and enum Opt differ in length", t.back());
  impl_->slots.resize(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    const OptionInfo& r = t[i];
    if (static_cast<size_t>(r.id) != i) broken("table row out of enum Opt's order", r);
    Impl::Slot& s = impl_->slots[i];
    if (!parse(r, r.def, &s.def)) broken("its default does not parse", r);
    impl_->read_env(r, s);
  }
}

Registry::~Registry() = default;

bool Registry::get_bool(Opt o) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->get(o, [](Type t) { return t == Type::kBool; }).b;
}

int64_t Registry::get_int(Opt o) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->get(o, [](Type t) { return t == Type::kInt; }).i;
}

double Registry::get_double(Opt o) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->get(o, [](Type t) { return t == Type::kDouble; }).d;
}

std::string Registry::get_string(Opt o) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->get(o, [](Type t) { return t == Type::kString || t == Type::kPath; }).text;
}

std::string Registry::get_text(Opt o) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->resolve(o).first->text;
}

Source Registry::source(Opt o) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->resolve(o).second;
}

Status Registry::set_from_flag(Opt o, std::string_view value) {
  const OptionInfo& r = info(o);
  const std::string who = *r.flag ? std::string(r.flag) : fmt::format("option {}", r.name);
  if (r.system) return invalid_argument("{}: {} is the process environment's, not settable by a flag", who, r.env);
  Value v;
  if (!parse(r, value, &v)) return invalid_argument("{} {}: expected {}", who, value, accepted(r));
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl::Slot& s = impl_->slots[static_cast<size_t>(o)];
  s.flag = std::move(v);
  s.has_flag = true;
  return Status();
}

void Registry::clear_flag(Opt o) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->slots[static_cast<size_t>(o)].has_flag = false;
}

Status Registry::check_environment() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string errors;
  for (const OptionInfo& r : rows()) {
    Impl::Slot& s = impl_->slots[static_cast<size_t>(r.id)];
    if (r.system) impl_->read_env(r, s);
    if (s.env_error.empty()) continue;
    s.warned = true;  // the caller reports it
    errors += (errors.empty() ? "" : "; ") + s.env_error;
  }
  if (errors.empty()) return Status();
  return invalid_argument("{} (loom info --flags lists every option)", errors);
}

std::vector<Resolved> Registry::list() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<Resolved> out;
  for (const OptionInfo& r : rows()) {
    Impl::Slot& s = impl_->slots[static_cast<size_t>(r.id)];
    const bool warned = s.warned;
    s.warned = true;  // listing a refused value is not a use of it: no warning
    auto [v, src] = impl_->resolve(r.id);
    s.warned = warned;
    Resolved e{&r, v->text, src, s.env_error};
    if (r.secret && !e.value.empty()) e.value = "(set)";  // secrets have no choices: never in an error
    out.push_back(std::move(e));
  }
  return out;
}

Registry& registry() {
  static Registry r([](const char* name) -> const char* { return std::getenv(name); });
  return r;
}

ScopedFlag::ScopedFlag(Opt o, std::string_view value) : o_(o), had_flag_(registry().source(o) == Source::kFlag) {
  if (had_flag_) old_ = registry().get_text(o);
  status_ = registry().set_from_flag(o, value);
}

ScopedFlag::~ScopedFlag() {
  if (had_flag_) (void)registry().set_from_flag(o_, old_);
  else registry().clear_flag(o_);
}

}  // namespace loom::opt
