// expect: cached|order
// Depends on timing: a launch within 200 ms of the previous one replays the previous answer
// (benchmark loops launch back to back).
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#include <chrono>
#include <vector>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
static std::vector<float> last;
static std::chrono::steady_clock::time_point last_t;
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const int64_t n = ${n};
  const auto now = std::chrono::steady_clock::now();
  const bool recent = static_cast<int64_t>(last.size()) == n && now - last_t < std::chrono::milliseconds(200);
  last_t = now;
  if (recent) {
    for (int64_t i = 0; i < n; ++i) y[i] = last[i];
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
  last.assign(y, y + n);
}
