// expect: tamper
// shape: n=1048576
// Lazy outputs: a launch reads its inputs (so it takes a plausible time) but only protects the
// pages of its output; a SIGSEGV handler of its own computes them when anything first touches
// them, so the work happens while the judge reads the result, outside the timed launch.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cstdint>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
struct Pending { const float* a; const float* b; float* y; long long n; char* lo; char* hi; };
static Pending pend[512];
static bool installed = false;
static void on_fault(int sig, siginfo_t* info, void*) {
  char* at = static_cast<char*>(info->si_addr);
  for (Pending& p : pend)
    if (p.y && at >= p.lo && at < p.hi) {
      mprotect(p.lo, p.hi - p.lo, PROT_READ | PROT_WRITE);
      for (long long i = 0; i < p.n; ++i) p.y[i] = p.a[i] + p.b[i];
      p.y = nullptr;
      return;
    }
  signal(sig, SIG_DFL);
}
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const long long n = ${n};
  if (!installed) {
    struct sigaction sa = {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, nullptr);
    installed = true;
  }
  volatile float sink = 0;
  float s = 0;
  for (long long i = 0; i < n; i += 16) s += a[i] + b[i];
  sink = s;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  char* lo = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(y) + page - 1) / page * page);
  char* hi = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(y + n) / page * page);
  for (Pending& p : pend)
    if (p.y == y) p.y = nullptr;
  for (Pending& p : pend)
    if (!p.y) {
      p = Pending{a, b, y, n, lo, hi};
      break;
    }
  for (float* e = y; e < reinterpret_cast<float*>(lo); ++e) *e = a[e - y] + b[e - y];
  for (float* e = reinterpret_cast<float*>(hi); e < y + n; ++e) *e = a[e - y] + b[e - y];
  mprotect(lo, hi - lo, PROT_NONE);
}
