// The CUDA runtime's launch overhead, the peer for `loom hrx bench-launch`: the same empty kernel
// shape (one pointer parameter, grid 1, block 32), launched with cudaLaunchKernel in the same
// loop structure (launches per repetition, two warm-up rounds, median and spread over reps).
// Built with nvcc on the GPU machine by tools/gpu/run.sh's `launch` step. Prints JSON.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void empty(int* p) {}
__global__ void touch(int* p, int v) { *p = v; }

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                 \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

static void print_stats(const char* name, std::vector<double> v, bool last) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), mean = 0, var = 0;
  for (double x : v) mean += x / n;
  for (double x : v) var += (x - mean) * (x - mean) / (n > 1 ? n - 1 : 1);
  std::printf("    \"%s\": {\"median_us\": %.3f, \"stdev_us\": %.3f, \"min_us\": %.3f, \"max_us\": %.3f}%s\n", name, med,
              std::sqrt(var), v.front(), v.back(), last ? "" : ",");
}

int main(int argc, char** argv) {
  int launches = argc > 1 ? std::atoi(argv[1]) : 2000;
  int reps = argc > 2 ? std::atoi(argv[2]) : 30;
  int* buf = nullptr;
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc(&buf, 256));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // Validate before timing.
  int got = 0;
  touch<<<1, 1, 0, s>>>(buf, 0x5eed);
  CHECK(cudaMemcpyAsync(&got, buf, 4, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  if (got != 0x5eed) {
    std::fprintf(stderr, "validation failed\n");
    return 1;
  }
  void* args[] = {&buf};
  std::vector<double> enq, total, enq_chevron, total_chevron;
  for (int rep = -2; rep < reps; ++rep) {
    for (int variant = 0; variant < 2; ++variant) {
      CHECK(cudaStreamSynchronize(s));
      auto t0 = std::chrono::steady_clock::now();
      if (variant == 0) {
        for (int i = 0; i < launches; ++i) CHECK(cudaLaunchKernel((const void*)empty, dim3(1), dim3(32), args, 0, s));
      } else {
        for (int i = 0; i < launches; ++i) empty<<<1, 32, 0, s>>>(buf);
      }
      auto t1 = std::chrono::steady_clock::now();
      CHECK(cudaStreamSynchronize(s));
      auto t2 = std::chrono::steady_clock::now();
      if (rep < 0) continue;
      double e = std::chrono::duration<double, std::micro>(t1 - t0).count() / launches;
      double t = std::chrono::duration<double, std::micro>(t2 - t0).count() / launches;
      (variant == 0 ? enq : enq_chevron).push_back(e);
      (variant == 0 ? total : total_chevron).push_back(t);
    }
  }
  CHECK(cudaGetLastError());
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\n  \"peer\": \"cudaLaunchKernel\",\n  \"device\": \"%s\",\n  \"runtime_version\": %d,\n"
              "  \"driver_version\": %d,\n  \"launches_per_rep\": %d,\n  \"reps\": %d,\n  \"cudaLaunchKernel\": {\n",
              prop.name, rt, drv, launches, reps);
  print_stats("enqueue", enq, false);
  print_stats("enqueue_and_sync", total, true);
  std::printf("  },\n  \"triple_chevron\": {\n");
  print_stats("enqueue", enq_chevron, false);
  print_stats("enqueue_and_sync", total_chevron, true);
  std::printf("  }\n}\n");
  return 0;
}
