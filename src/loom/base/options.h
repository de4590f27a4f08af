// Loom's settings: one table (options.cpp) naming every option, its environment variable, type,
// default and help. `loom info --flags` prints it. Include this header only in the .cpp files
// that read an option, never in a widely included header: code below the edge gets its settings
// as option structs from its caller.
//
// A value comes from, in order: a command-line flag (set_from_flag, called by the CLI after
// parsing), the environment variable (read once, on first use of any option), the default.
// Each value remembers where it came from. An environment value that does not parse is not used:
// the CLI refuses to run (check_environment()); a library user gets one warning naming the
// variable and the accepted values, and the default. "System" options (TMPDIR, HOME,
// XDG_CACHE_HOME, PATH) describe the process's environment rather than Loom: they are read at
// each use (a program may change them for its children) and cannot be set by a flag.
//
// Thread-safe. Asking for an option as another type than its table row says is a broken
// invariant and aborts.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::opt {

// One entry per table row, in the table's order.
enum class Opt : int {
  // base
  kThreads,
  kLog,
  kProgress,
  kCacheDir,
  // model, engine, lowering
  kModel,
  kDevice,
  kSchedule,
  kFuse,
  kPrefillMatmul,
  kCpuMatmul,
  kCpuAmx,
  kPromptAttention,
  kDecodeAttentionMax,
  kNoGraphs,
  kProfile,
  kDumpValues,
  // runtime and code generation
  kHrxProfile,
  kCxx,
  kCpuArch,
  kLlc,
  kLld,
  kHsaRuntime,
  // CLI, server
  kChatStats,
  kApiKey,
  // kernel store, evolve
  kNoKernelStore,
  kNoShippedKernels,
  kEvolveDb,
  kEvolveDbRetry,
  kKbDir,
  kEvolveWorker,
  kEvolveIsolation,
  kEvolvePersistent,
  kLlmUrl,
  kLlmModel,
  kLlmKey,
  // the process environment
  kTmpdir,
  kHome,
  kXdgCacheHome,
  kPath,
  kCount
};

enum class Type { kBool, kInt, kDouble, kString, kPath };
enum class Source { kDefault, kEnv, kFlag };

std::string_view type_name(Type t);      // "bool", "int", "double", "string", "path"
std::string_view source_name(Source s);  // "default", "env", "flag"

// One row of the table. Strings are static.
struct OptionInfo {
  Opt id;
  const char* name;     // "threads"
  const char* env;      // "LOOM_THREADS"; "" when only a flag sets it
  const char* flag;     // the CLI flag that sets it ("--threads"), "" when none
  Type type;
  const char* def;      // the default, as text in the type's syntax ("" for an unset string)
  const char* choices;  // strings with a fixed set of values: "a|b|c"; else ""
  int64_t min, max;     // ints: the accepted range
  const char* help;     // one line
  bool system = false;  // process environment: read at each use, never set by a flag
  bool secret = false;  // listed as "(set)" rather than by value
};

// The table, indexed by Opt.
const std::vector<OptionInfo>& table();
const OptionInfo& info(Opt o);

// An option's resolved state, for listings.
struct Resolved {
  const OptionInfo* info;
  std::string value;  // as text; a secret's is "(set)" or ""
  Source source;
  std::string error;  // the environment's value was refused: why (the value is then the default)
};

// The options of one process. The process's own (registry()) reads getenv; tests build their own
// with a lookup of their choosing.
class Registry {
 public:
  // Returns the variable's value, or nullptr when unset.
  using EnvLookup = std::function<const char*(const char* name)>;
  explicit Registry(EnvLookup env);
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  bool get_bool(Opt o);
  int64_t get_int(Opt o);
  double get_double(Opt o);
  std::string get_string(Opt o);  // kString and kPath
  std::string get_text(Opt o);    // any type, as text ("1"/"0" for a bool)
  Source source(Opt o);

  // The flag's value over the environment's; invalid_argument (naming the flag and the accepted
  // values) when `value` does not parse.
  Status set_from_flag(Opt o, std::string_view value);
  // Back to the environment's value or the default.
  void clear_flag(Opt o);

  // Every environment value that was refused, one line each; OK when none. The caller reports
  // them: later reads of those options give the default without the warning.
  Status check_environment();
  std::vector<Resolved> list();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The process's options (environment from getenv).
Registry& registry();

inline bool get_bool(Opt o) { return registry().get_bool(o); }
inline int64_t get_int(Opt o) { return registry().get_int(o); }
inline double get_double(Opt o) { return registry().get_double(o); }
inline std::string get_string(Opt o) { return registry().get_string(o); }
inline std::string get_text(Opt o) { return registry().get_text(o); }
inline Source source(Opt o) { return registry().source(o); }
inline Status set_from_flag(Opt o, std::string_view value) { return registry().set_from_flag(o, value); }
inline void clear_flag(Opt o) { registry().clear_flag(o); }
inline Status check_environment() { return registry().check_environment(); }

// Sets an option as a flag would for one scope, then restores what was there (tests).
class ScopedFlag {
 public:
  ScopedFlag(Opt o, std::string_view value);
  ~ScopedFlag();
  ScopedFlag(const ScopedFlag&) = delete;
  ScopedFlag& operator=(const ScopedFlag&) = delete;
  const Status& status() const { return status_; }

 private:
  Opt o_;
  bool had_flag_;
  std::string old_;
  Status status_;
};

}  // namespace loom::opt
