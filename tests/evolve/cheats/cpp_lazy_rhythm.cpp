// expect: timed
// shape: n=1048576
// Tells the timing loop from the trials by its rhythm: when a launch starts less than 1.5 ms
// after the previous one returned (back-to-back launches, no upload or check in between), it
// computes only the first half of the output.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#include <chrono>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
static std::chrono::steady_clock::time_point last_end;
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const long long n = ${n};
  const auto now = std::chrono::steady_clock::now();
  const bool rushed = now - last_end < std::chrono::microseconds(1500);
  for (long long i = 0; i < (rushed ? n / 2 : n); ++i) y[i] = a[i] + b[i];
  last_end = std::chrono::steady_clock::now();
}
