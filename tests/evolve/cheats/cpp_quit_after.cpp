// expect: timed
// Honest for the first 8 launches (the trials), then returns without computing anything: the
// judge's outputs from the trials are right, every timed launch is free.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
static int launches = 0;
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  if (++launches > 8) return;
  for (int64_t i = 0; i < ${n}; ++i) y[i] = a[i] + b[i];
}
