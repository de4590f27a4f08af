// Logging and progress output.
#include "loom/base/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "loom/base/options.h"

namespace loom {
namespace {
LogLevel level_from_option() {
  const std::string v = opt::get_string(opt::Opt::kLog);
  if (v == "error") return LogLevel::kError;
  if (v == "info") return LogLevel::kInfo;
  if (v == "debug") return LogLevel::kDebug;
  return LogLevel::kWarn;
}
// -1 until the first log_level(): the option is read then, not during static initialization.
std::atomic<int> g_level{-1};
std::mutex g_mutex;

long long now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace

LogLevel log_level() {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    int expected = -1;
    g_level.compare_exchange_strong(expected, static_cast<int>(level_from_option()));
    l = g_level.load(std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(l);
}
void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }

void log_line(LogLevel level, std::string_view message) {
  static const char* kNames[] = {"error", "warn", "info", "debug"};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "loom %s: %.*s\n", kNames[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

Progress::Progress(std::string_view label, double total, std::string_view unit)
    : label_(label), unit_(unit), total_(total) {
  const std::string mode = opt::get_string(opt::Opt::kProgress);
  enabled_ = mode == "auto" ? isatty(STDERR_FILENO) == 1 : mode == "1";
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
