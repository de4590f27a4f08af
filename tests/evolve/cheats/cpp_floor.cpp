// expect: floor
// shape: n=1048576
// Skips the work when the output already holds the answer for these inputs (checked on a few
// samples): every check with poisoned outputs passes, but timed launches that find last
// launch's result in place return at once, faster than reading the inputs could take.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#include <chrono>
#include <vector>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const int64_t n = ${n};
  bool same = true;
  for (int64_t i = 0; i < n; i += n / 16 + 1) same = same && y[i] == a[i] + b[i];
  same = same && y[n - 1] == a[n - 1] + b[n - 1];
  if (same) return;
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
