// expect: holdout
// n = 1000 baked in.
// launch add_cu grid=4,1,1 block=256,1,1 args=0,1,2
extern "C" __global__ void add_cu(const float* a, const float* b, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 1000) y[i] = a[i] + b[i];
}
