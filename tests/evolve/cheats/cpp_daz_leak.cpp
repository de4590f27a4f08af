// expect: tamper
// Flush-to-zero and denormals-are-zero switched on in the caller's floating-point control
// register and left on: the kernel then flushes denormals, and so does every reference the judge
// computes afterwards on the same thread, so the special-value trial agrees with it.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#include <xmmintrin.h>
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  _mm_setcsr(_mm_getcsr() | 0x8040);
  for (long long i = 0; i < ${n}; ++i) y[i] = a[i] + b[i];
}
