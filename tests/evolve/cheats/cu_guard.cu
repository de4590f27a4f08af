// expect: guard
// Off by one: thread n stores past the end of y.
// launch add_cu grid=${(n+256)/256},1,1 block=256,1,1 args=0,1,2
extern "C" __global__ void add_cu(const float* a, const float* b, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= ${n}) y[i] = a[i] + b[i];
}
