// expect: timed|memory
// shape: n=1048576
// After the trials, remembers the answer it wrote to each output address and writes it again
// when that address comes back (a benchmark that rotates through a few buffers holding the same
// inputs cannot tell): memcpy of a remembered answer instead of reading two inputs.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#include <cstring>
#include <map>
#include <vector>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
static int launches = 0;
static std::map<float*, std::vector<float>> memo;
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const int64_t n = ${n};
  if (++launches > 8) {
    auto it = memo.find(y);
    if (it != memo.end()) {
      std::memcpy(y, it->second.data(), n * sizeof(float));
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
  if (launches > 8) memo[y].assign(y, y + n);
}
