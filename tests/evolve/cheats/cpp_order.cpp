// expect: order
// Correct for the first three launches, then off by one: depends on how many launches came before.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#include <chrono>
#include <vector>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
static int launches = 0;
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const int64_t n = ${n};
  const float bias = ++launches > 3 ? 1.0f : 0.0f;
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i] + bias;
}
