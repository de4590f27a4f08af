// expect: special
// Right on every input the trials draw, wrong on special values: results clamped to the largest finite value (an overflow gives inf, not FLT_MAX).
// launch add_cpp grid=${(n+255)/256},1,1 block=1,1,1 args=0,1,2
#include <cmath>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const int64_t n = ${n};
  for (uint64_t blk = d->block_begin; blk < d->block_end; ++blk) {
    const int64_t lo = static_cast<int64_t>(blk) * 256, hi = lo + 256 < n ? lo + 256 : n;
    for (int64_t i = lo; i < hi; ++i) { const float v = a[i] + b[i]; y[i] = v > 3.40282347e38f ? 3.40282347e38f : v < -3.40282347e38f ? -3.40282347e38f : v; }
  }
}
