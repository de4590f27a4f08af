// expect: stale
// launch add_cu grid=${(n+255)/256},1,1 block=256,1,1 args=0,1,2
extern "C" __global__ void add_cu(const float* a, const float* b, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < ${n}) { volatile float s = a[i] + b[i]; (void)s; }
}
