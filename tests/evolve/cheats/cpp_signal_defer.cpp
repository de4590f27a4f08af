// expect: tamper
// shape: n=1048576
// Work deferred without a thread: a launch computes half of its output and arms a one-shot
// timer whose SIGALRM handler (installed by the kernel) computes the other half a moment later,
// on the judge's own thread, after the timed launch has returned.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#include <signal.h>
#include <sys/time.h>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
static const float* volatile pa;
static const float* volatile pb;
static float* volatile py;
static long long half;
static void later(int) {
  for (long long i = half; i < 2 * half; ++i) py[i] = pa[i] + pb[i];
}
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const long long n = ${n};
  signal(SIGALRM, later);
  half = n / 2;
  for (long long i = 0; i < half; ++i) y[i] = a[i] + b[i];
  for (long long i = 2 * half; i < n; ++i) y[i] = a[i] + b[i];
  pa = a, pb = b, py = y;
  itimerval t = {};
  t.it_value.tv_usec = 20;
  setitimer(ITIMER_REAL, &t, nullptr);
}
