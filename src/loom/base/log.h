// Minimal leveled logging to stderr. Level comes from LOOM_LOG (error|warn|info|debug) or
// set_log_level(); thread-safe (one write per line).
#pragma once

#include <string_view>

#include <fmt/format.h>

namespace loom {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_line(LogLevel level, std::string_view message);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level <= log_level()) log_line(level, fmt::format(f, std::forward<Args>(args)...));
}
#define LOOM_LOG_FN(name, lvl)                                          \
  template <typename... Args>                                           \
  void name(fmt::format_string<Args...> f, Args&&... args) {            \
    log(LogLevel::lvl, f, std::forward<Args>(args)...);                 \
  }
LOOM_LOG_FN(log_error, kError)
LOOM_LOG_FN(log_warn, kWarn)
LOOM_LOG_FN(log_info, kInfo)
LOOM_LOG_FN(log_debug, kDebug)
#undef LOOM_LOG_FN

// A one-line progress indicator on stderr ("loading model  42% 40/96 MiB"). Draws only when
// stderr is a terminal (or LOOM_PROGRESS=1), at most every 100 ms; finish() ends the line.
class Progress {
 public:
  Progress(std::string_view label, double total, std::string_view unit = "");
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void update(double done);
  void finish();

 private:
  void draw(bool final_draw);
  std::string label_, unit_;
  double total_, done_ = 0;
  long long last_draw_ms_ = -1;
  bool enabled_, finished_ = false;
};

}  // namespace loom
