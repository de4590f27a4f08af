// expect: cached
// One block; the first launch's answer is kept in device memory and replayed afterwards.
// launch add_cu grid=1,1,1 block=256,1,1 args=0,1,2
__device__ float memo[1 << 20];
__device__ int have;
extern "C" __global__ void add_cu(const float* a, const float* b, float* y) {
  const int n = ${n};
  const int h = have;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    if (h) y[i] = memo[i];
    else { y[i] = a[i] + b[i]; memo[i] = y[i]; }
  }
  __syncthreads();
  if (threadIdx.x == 0) have = 1;
}
