// Checks the facts that Loom's wgmma lowering rests on, on the GPU, against a CPU product:
//   - the A fragment of wgmma.m64nNk16 with A in registers: warp w of the warpgroup holds rows
//     16w..16w+15 as mma.m16n8k16 does (a0: row g, k 2q..2q+1; a1: row g+8; a2: row g, k 2q+8..;
//     a3: row g+8, k 2q+8..; g = lane / 4, q = lane % 4);
//   - the accumulators: d[4j + i] is row 16w + g + 8 (i / 2), column 8j + 2q + i % 2;
//   - B (N x K, K-major, no swizzle) in shared memory as 8 x 8 core matrices (8 rows of 16
//     bytes, 128 contiguous bytes), core (n / 8, k / 8) at (n / 8) * SBO + (k / 8) * LBO bytes:
//     the descriptor's bits 16-29 hold LBO >> 4 (K direction), bits 32-45 SBO >> 4 (N direction),
//     and a k step of 16 moves the start address by 2 LBO.
// Variant 0 encodes the fields as above; variant 1 swaps them (the other reading of the PTX
// text). Exactly one should match. Also times m64n128k16 with A in registers (issue rate).
// Build and run there: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/wg tools/gpu/microbench/wgmma_layout.cu && /tmp/wg
#include <cuda_fp16.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

constexpr int M = 64, N = 64, K = 64;
constexpr int LBO = 128, SBO = 2 * 128 * (K / 16);  // K cores adjacent; N groups after all K cores

__device__ uint64_t desc(uint32_t addr, int variant) {
  uint64_t lbo = LBO >> 4, sbo = SBO >> 4;
  if (variant) { uint64_t t = lbo; lbo = sbo; sbo = t; }
  return (uint64_t)((addr >> 4) & 0x3FFF) | (lbo << 16) | (sbo << 32);
}

__device__ uint32_t pack(__half a, __half b) {
  return (uint32_t)__half_as_ushort(a) | ((uint32_t)__half_as_ushort(b) << 16);
}

// y[M][N] = A[M][K] . B[N][K]^T
__global__ void wg(const __half* A, const __half* B, float* y, int variant) {
  __shared__ alignas(128) __half bs[N * K];
  const int t = threadIdx.x, w = t / 32, l = t % 32, g = l / 4, q = l % 4;
  for (int i = t; i < N * K; i += 128) {
    int n = i / K, k = i % K;
    int off = (n / 8) * SBO + (k / 8) * LBO + (n % 8) * 16 + (k % 8) * 2;
    bs[off / 2] = B[i];
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  const uint32_t base = (uint32_t)__cvta_generic_to_shared(bs);
  for (int ks = 0; ks < K / 16; ++ks) {
    const __half* a = A + (16 * w + g) * K + 16 * ks + 2 * q;
    uint32_t a0 = pack(a[0], a[1]), a1 = pack(a[8 * K], a[8 * K + 1]);
    uint32_t a2 = pack(a[8], a[9]), a3 = pack(a[8 * K + 8], a[8 * K + 9]);
    uint64_t dsc = desc(base + ks * 2 * LBO, variant);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "{%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(dsc));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  }
  for (int j = 0; j < N / 8; ++j)
    for (int i = 0; i < 4; ++i) {
      int r = 16 * w + g + 8 * (i / 2), c = 8 * j + 2 * q + i % 2;
      y[r * N + c] = d[4 * j + i];
    }
}

// Issue rate: m64n128k16, A in registers, B 128 x 16 in shared memory, `iters` per warpgroup.
__global__ void rate(float* sink, int iters) {
  __shared__ alignas(128) __half bs[128 * 16];
  for (int i = threadIdx.x; i < 128 * 16; i += blockDim.x) bs[i] = __float2half(0.001f * (i % 7));
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  float d[64];
  for (int i = 0; i < 64; ++i) d[i] = 0.f;
  uint32_t a = pack(__float2half(0.5f), __float2half(0.25f));
  const uint64_t dsc = (uint64_t)((((uint32_t)__cvta_generic_to_shared(bs)) >> 4) & 0x3FFF) | ((uint64_t)(128 >> 4) << 16) |
                       ((uint64_t)(256 >> 4) << 32);
  for (int it = 0; it < iters; ++it) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
        "{%64,%64,%64,%64}, %65, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a), "l"(dsc));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  float s = 0.f;
  for (int i = 0; i < 64; ++i) s += d[i];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

int main() {
  std::vector<__half> A(M * K), B(N * K);
  std::vector<float> ref(M * N, 0.f), got(M * N);
  srand(7);
  for (auto& v : A) v = __float2half((rand() % 17 - 8) / 8.0f);
  for (auto& v : B) v = __float2half((rand() % 13 - 6) / 4.0f);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) ref[m * N + n] += __half2float(A[m * K + k]) * __half2float(B[n * K + k]);
  __half *dA, *dB;
  float* dy;
  CK(cudaMalloc(&dA, A.size() * 2));
  CK(cudaMalloc(&dB, B.size() * 2));
  CK(cudaMalloc(&dy, got.size() * 4));
  CK(cudaMemcpy(dA, A.data(), A.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, B.data(), B.size() * 2, cudaMemcpyHostToDevice));
  for (int variant = 0; variant < 2; ++variant) {
    CK(cudaMemset(dy, 0, got.size() * 4));
    wg<<<1, 128>>>(dA, dB, dy, variant);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got.data(), dy, got.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < M * N; ++i) {
      double e = std::fabs(got[i] - ref[i]);
      if (e > 1e-3) ++bad;
      worst = std::fmax(worst, e);
    }
    printf("{\"test\": \"wgmma_layout\", \"variant\": %d, \"mismatches\": %d, \"max_abs_diff\": %g, \"y0\": %g, \"ref0\": %g}\n",
           variant, bad, worst, got[0], ref[0]);
  }
  // Rate: one CTA of 1, 2 or 3 warpgroups per SM, 132 SMs worth of CTAs.
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  float* sink;
  CK(cudaMalloc(&sink, (size_t)sms * 384 * 4));
  for (int wgs : {1, 2, 3}) {
    const int iters = 20000;
    rate<<<sms, 128 * wgs>>>(sink, 100);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0));
    rate<<<sms, 128 * wgs>>>(sink, iters);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    double flop = 2.0 * 64 * 128 * 16 * iters * wgs * sms;
    printf("{\"test\": \"wgmma_rate_m64n128k16_rs\", \"warpgroups_per_sm\": %d, \"ms\": %.3f, \"tflops\": %.1f}\n", wgs, ms,
           flop / ms / 1e9);
  }
  return 0;
}
