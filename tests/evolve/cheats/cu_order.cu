// expect: order
// One block; from the fourth launch on, adds 1 (a launch counter in device memory).
// launch add_cu grid=1,1,1 block=256,1,1 args=0,1,2
__device__ int launches;
extern "C" __global__ void add_cu(const float* a, const float* b, float* y) {
  const int n = ${n};
  const float bias = launches >= 3 ? 1.0f : 0.0f;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = a[i] + b[i] + bias;
  __syncthreads();
  if (threadIdx.x == 0) launches = launches + 1;
}
