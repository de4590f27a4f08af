// expect: timed
// shape: n=1048576
// After the trials, each launch finishes the previous launch's outputs and leaves its own for
// the next one: a loop of back-to-back launches still ends with every output written, but
// no launch's outputs are complete when it returns.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
static int launches = 0;
static const float* pa = nullptr;
static const float* pb = nullptr;
static float* py = nullptr;
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const int64_t n = ${n};
  if (++launches <= 8) {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
    return;
  }
  if (py)
    for (int64_t i = n / 2; i < n; ++i) py[i] = pa[i] + pb[i];
  for (int64_t i = 0; i < n / 2; ++i) y[i] = a[i] + b[i];
  pa = a;
  pb = b;
  py = y;
}
