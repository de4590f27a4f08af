// What a candidate's code may not change in the evaluator's process (see process_watch.h).
#include "loom/evolve/process_watch.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cfenv>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace loom::evolve {
namespace {

// Threads of this process (the entries of /proc/self/task); 0 when it cannot be read.
int live_threads() {
  DIR* d = opendir("/proc/self/task");
  if (!d) return 0;
  int n = 0;
  while (const dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

#if defined(__x86_64__)
uint32_t read_mxcsr() {
  uint32_t v = 0;
  __asm__ volatile("stmxcsr %0" : "=m"(v));
  return v & ~0x3Fu;  // without the sticky exception flags, which arithmetic sets
}
void write_mxcsr(uint32_t v) { __asm__ volatile("ldmxcsr %0" : : "m"(v)); }
uint16_t read_x87() {
  uint16_t v = 0;
  __asm__ volatile("fnstcw %0" : "=m"(v));
  return v;
}
void write_x87(uint16_t v) { __asm__ volatile("fldcw %0" : : "m"(v)); }
#else
uint32_t read_mxcsr() { return static_cast<uint32_t>(fegetround()); }
void write_mxcsr(uint32_t v) { fesetround(static_cast<int>(v)); }
uint16_t read_x87() { return 0; }
void write_x87(uint16_t) {}
#endif

// Whether this process has a child, running or not yet reaped (looks, reaps nothing).
bool has_children() {
  siginfo_t si{};
  return waitid(P_ALL, 0, &si, WEXITED | WSTOPPED | WCONTINUED | WNOHANG | WNOWAIT) == 0;
}

bool itimer_armed() {
  for (int which : {ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF}) {
    itimerval t{};
    if (getitimer(which, &t) == 0 && (t.it_value.tv_sec || t.it_value.tv_usec)) return true;
  }
  return false;
}

}  // namespace

// Resident bytes of this process (/proc/self/statm); 0 when it cannot be read.
uint64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(f >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

ProcessWatch watch_process(bool on) {
  ProcessWatch w;
  if (!on) return w;
  w.on = true;
  w.threads = live_threads();
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  w.children = has_children();
  w.mxcsr = read_mxcsr();
  w.x87 = read_x87();
  w.handlers.resize(NSIG);
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, nullptr, &w.handlers[static_cast<size_t>(sig)]);
  return w;
}

// A thread still alive after the launch returned is work the timer did not see; a changed
// state is put back before the verdict, since the judge's own code goes on running here.
std::string after_launch(const ProcessWatch& w) {
  if (!w.on) return {};
  if (w.threads > 0) {
    const int now = live_threads();
    if (now > w.threads)
      return fmt::format("async: {} thread(s) still running after the launch returned ({} before the first launch): work "
                         "outside the launch is not timed, so a kernel must finish it before returning",
                         now - w.threads, w.threads);
  }
  if (!w.children && has_children())
    return "async: a process of the kernel's own is running (or exited unreaped) after the launch returned: work "
           "outside the launch is not timed, so a kernel must finish it before returning";
  std::string what;
  const uint32_t mx = read_mxcsr();
  const uint16_t x87 = read_x87();
  if (mx != w.mxcsr) what = fmt::format("left the floating-point control register changed (MXCSR {:#x} -> {:#x}: rounding "
                                        "mode or flush-to-zero)", w.mxcsr, mx);
  else if (x87 != w.x87) what = fmt::format("left the x87 control word changed ({:#x} -> {:#x})", w.x87, x87);
  else if (itimer_armed()) what = "left an interval timer armed (a signal would run code after the launch returned)";
  for (int sig = 1; what.empty() && sig < NSIG; ++sig) {
    struct sigaction now {};
    if (sigaction(sig, nullptr, &now) != 0) continue;
    const struct sigaction& was = w.handlers[static_cast<size_t>(sig)];
    if (reinterpret_cast<void*>(now.sa_handler) != reinterpret_cast<void*>(was.sa_handler) ||
        (now.sa_flags & SA_SIGINFO) != (was.sa_flags & SA_SIGINFO))
      what = fmt::format("installed a handler for signal {} ({}): a handler can compute after the launch returned, or "
                         "when the judge first reads an output",
                         sig, strsignal(sig));
  }
  if (what.empty()) return {};
  // Back to the judge's state: timers off first (a pending signal must not reach a restored default).
  const itimerval off{};
  for (int which : {ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF}) setitimer(which, &off, nullptr);
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &w.handlers[static_cast<size_t>(sig)], nullptr);
  write_mxcsr(w.mxcsr | (read_mxcsr() & 0x3Fu));
  write_x87(w.x87);
  return "tamper: the kernel " + what + "; a kernel leaves the process as it found it";
}

}  // namespace loom::evolve
