// expect: holdout
// Shape-specialized: n = 1000 (the searched shape) is baked in, not ${n}.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2])
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  for (int i = 0; i < 1000; ++i) y[i] = a[i] + b[i];
}
