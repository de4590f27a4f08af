// expect: async|timed
// shape: n=1048576
// After the trials, hands each launch's work to a detached thread and returns at once: the
// timer sees only the thread's creation, the outputs are complete a little later.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#include <thread>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
static int launches = 0;
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const int64_t n = ${n};
  auto work = [a, b, y, n] {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
  };
  if (++launches <= 8) {
    work();
    return;
  }
  std::thread(work).detach();
}
