// expect: tamper
// Honest on its first launch, then leaves the rounding mode at round-toward-zero: its later sums
// are rounded differently from IEEE's default, and so are the references the judge computes on
// the same thread afterwards, which therefore agree with it.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#include <cfenv>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  for (long long i = 0; i < ${n}; ++i) y[i] = a[i] + b[i];
  std::fesetround(FE_TOWARDZERO);
}
