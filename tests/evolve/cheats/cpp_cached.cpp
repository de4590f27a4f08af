// expect: cached
// Computes once, then replays the first answer for every later launch.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#include <chrono>
#include <vector>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
static std::vector<float> memo;
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const int64_t n = ${n};
  if (static_cast<int64_t>(memo.size()) == n) {
    for (int64_t i = 0; i < n; ++i) y[i] = memo[i];
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
  memo.assign(y, y + n);
}
