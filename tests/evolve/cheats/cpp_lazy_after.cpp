// expect: timed
// Honest for the first 8 launches, then computes only every other element: half the work in
// every timed launch.
// launch add_cpp grid=1,1,1 block=1,1,1 args=0,1,2
#define ARGS const float* a = *static_cast<float* const*>(args[0]); const float* b = *static_cast<float* const*>(args[1]); float* y = *static_cast<float* const*>(args[2]); (void)a; (void)b; (void)y
static int launches = 0;
extern "C" void add_cpp(void* const* args, const LoomLaunchDims* d) {
  ARGS;
  const int64_t step = ++launches > 8 ? 2 : 1;
  for (int64_t i = 0; i < ${n}; i += step) y[i] = a[i] + b[i];
}
