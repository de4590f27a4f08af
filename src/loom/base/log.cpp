// Logging and progress output.
#include "loom/base/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace loom {
namespace {
LogLevel level_from_env() {
  const char* v = std::getenv("LOOM_LOG");
  if (!v) return LogLevel::kWarn;
  if (!std::strcmp(v, "error")) return LogLevel::kError;
  if (!std::strcmp(v, "info")) return LogLevel::kInfo;
  if (!std::strcmp(v, "debug")) return LogLevel::kDebug;
  return LogLevel::kWarn;
}
std::atomic<int> g_level{static_cast<int>(level_from_env())};
std::mutex g_mutex;

long long now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }
void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }

void log_line(LogLevel level, std::string_view message) {
  static const char* kNames[] = {"error", "warn", "info", "debug"};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "loom %s: %.*s\n", kNames[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

Progress::Progress(std::string_view label, double total, std::string_view unit)
    : label_(label), unit_(unit), total_(total) {
  const char* force = std::getenv("LOOM_PROGRESS");
  enabled_ = force ? std::strcmp(force, "0") != 0 : isatty(STDERR_FILENO) == 1;
}

Progress::~Progress() { finish(); }

void Progress::update(double done) {
  done_ = done;
  if (!enabled_) return;
  long long t = now_ms();
  if (last_draw_ms_ >= 0 && t - last_draw_ms_ < 100) return;
  last_draw_ms_ = t;
  draw(false);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  done_ = total_;
  draw(true);
}

void Progress::draw(bool final_draw) {
  double frac = total_ > 0 ? done_ / total_ : 1.0;
  if (frac > 1) frac = 1;
  constexpr int kWidth = 30;
  int filled = static_cast<int>(frac * kWidth);
  std::string bar(filled, '#');
  bar.append(kWidth - filled, '.');
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "\r%s [%s] %3d%% %.0f/%.0f%s%s", label_.c_str(), bar.c_str(),
               static_cast<int>(frac * 100), done_, total_, unit_.empty() ? "" : " ",
               unit_.c_str());
  if (final_draw) std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace loom
