// Weight-layout microbenchmark for matvec_gpu: does a warp's 16-byte load
// instruction touching 32 different 128-byte lines (lanes on units 144 B apart) cap the stream?
// Variants, each with the dp4a arithmetic against int8 activations staged in shared memory:
//   a: GGUF layout, a lane reads a unit of consecutive blocks (Q4_0: 8 blocks = 144 B; Q4_K: one
//      block) as nine 16-byte loads (matvec_gpu on GGUF rows);
//   b: planar rows: the 16-byte quant pieces of a row first (piece p of block i at (p*nb+i)*16),
//      then the block headers (Q4_0: f16 d; Q4_K: 16 B), lanes on consecutive blocks;
//   c: GGUF layout copied coalesced into shared memory per warp, then computed as in a.
// Timed with events over rotating weight copies (> 4x the L2). Build and run on the H200:
//   nvcc -O3 -arch=sm_90 -o /tmp/mvl tools/gpu/microbench/matvec_layout.cu && /tmp/mvl > out.jsonl
// `mvl ncu` launches each case once, for ncu (tools/gpu/microbench/run.sh).
#include <cuda_fp16.h>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

constexpr int kWarps = 8;
struct Fmt { int bb, be, xstride; };  // block bytes, block elements, staged x bytes per block (padded)
__host__ __device__ constexpr Fmt fmt_of(int k) { return k == 0 ? Fmt{18, 32, 48} : Fmt{144, 256, 272}; }

__device__ __forceinline__ uint32_t wd(const uint32_t* w, int o) {  // 32-bit word at even byte offset o
  return (o & 3) ? __funnelshift_r(w[o >> 2], w[(o >> 2) + 1], 16) : w[o >> 2];
}
__device__ __forceinline__ float h2f(uint32_t v) { return __half2float(__ushort_as_half((unsigned short)(v & 0xFFFF))); }

// Q4_0 block: 4 quant words q[], scale d; x block in shared (32 int8 at xs, then dx, sum).
__device__ __forceinline__ float q4_0_dot(const uint32_t* q, float d, const int* xw, float dx, int sx, float acc) {
  const int4 x0 = *reinterpret_cast<const int4*>(xw), x1 = *reinterpret_cast<const int4*>(xw + 4);
  const int xl[4] = {x0.x, x0.y, x0.z, x0.w}, xh[4] = {x1.x, x1.y, x1.z, x1.w};
  int s = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s = __dp4a((int)(q[i] & 0x0F0F0F0F), xl[i], s);
    s = __dp4a((int)((q[i] >> 4) & 0x0F0F0F0F), xh[i], s);
  }
  return fmaf(d * dx, (float)(s - 8 * sx), acc);
}
// Q4_K block: header words hd[4] (d, dmin, 12 scale bytes), piece p's 4 quant words at q + 4p.
__device__ __forceinline__ float q4_k_piece(const uint32_t* q, int p, const int* xw, int& dlo, int& dhi) {
  const int j = p >> 1, o = (p & 1) * 4;
  const int4 a = *reinterpret_cast<const int4*>(xw + 16 * j + o), b = *reinterpret_cast<const int4*>(xw + 16 * j + 8 + o);
  const int xa[4] = {a.x, a.y, a.z, a.w}, xb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    dlo = __dp4a((int)(q[k] & 0x0F0F0F0F), xa[k], dlo);
    dhi = __dp4a((int)((q[k] >> 4) & 0x0F0F0F0F), xb[k], dhi);
  }
  return 0.f;
}
__device__ __forceinline__ float q4_k_finish(const uint32_t* hd, const int* dl, const int* dh, float dx, const int* bs, float acc) {
  const uint8_t* s = reinterpret_cast<const uint8_t*>(hd + 1);
  int isum = 0, msum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    if (j < 4) { sc = s[j] & 63; mn = s[j + 4] & 63; }
    else { sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4); mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
    isum += sc * ((j & 1) ? dh[j >> 1] : dl[j >> 1]);
    msum += mn * (bs[2 * j] + bs[2 * j + 1]);
  }
  acc = fmaf(dx * h2f(hd[0]), (float)isum, acc);
  return fmaf(-dx * h2f(hd[0] >> 16), (float)msum, acc);
}

// x (global): per block int8 quants, then arrays dx[nb], sums[nb] (Q4_0) or bsums[nb*16] (Q4_K).
template <int K, int V>
__global__ void __launch_bounds__(32 * kWarps) mv(const uint8_t* __restrict__ W, const int8_t* __restrict__ xq,
                                                  const float* __restrict__ xd, const int* __restrict__ xs,
                                                  float* __restrict__ y, int rows, int nb, int lpr) {
  constexpr Fmt f = fmt_of(K);
  constexpr int ub = K == 0 ? 8 : 1;  // blocks per unit in variants a, c
  constexpr int unit = ub * f.bb;     // 144 bytes either way
  extern __shared__ __align__(16) uint8_t sm[];
  int* sx = reinterpret_cast<int*>(sm);                             // nb * xstride bytes
  float* sd = reinterpret_cast<float*>(sm + nb * f.xstride);        // nb
  int* ss = reinterpret_cast<int*>(sd + nb);                        // nb (Q4_0) or 16 nb
  uint8_t* wbuf = reinterpret_cast<uint8_t*>(ss + (K == 0 ? nb : 16 * nb));
  const int tid = threadIdx.x, warp = tid >> 5, l32 = tid & 31;
  for (int i = tid; i < nb * f.be / 16; i += blockDim.x) {
    const int blk = i / (f.be / 16), o = i % (f.be / 16);
    *reinterpret_cast<int4*>(sm + blk * f.xstride + o * 16) = reinterpret_cast<const int4*>(xq)[i];
  }
  for (int i = tid; i < nb; i += blockDim.x) sd[i] = xd[i];
  for (int i = tid; i < (K == 0 ? nb : 16 * nb); i += blockDim.x) ss[i] = xs[i];
  __syncthreads();
  const int rpw = 32 / lpr, lane = l32 % lpr;
  const int row = (blockIdx.x * kWarps + warp) * rpw + l32 / lpr;
  const int r = min(row, rows - 1);
  const size_t rb = (size_t)nb * f.bb;
  const uint8_t* wr = W + r * rb;
  float acc = 0.f;
  if (V == 1) {  // planar
#pragma unroll 2
    for (int blk = lane; blk < nb; blk += lpr) {
      const int* xw = reinterpret_cast<const int*>(sm + blk * f.xstride);
      if (K == 0) {
        const uint4 q4 = __ldg(reinterpret_cast<const uint4*>(wr + blk * 16));
        const uint32_t q[4] = {q4.x, q4.y, q4.z, q4.w};
        const float d = __half2float(__ldg(reinterpret_cast<const __half*>(wr + nb * 16) + blk));
        acc = q4_0_dot(q, d, xw, sd[blk], ss[blk], acc);
      } else {
        uint32_t q[32];
#pragma unroll
        for (int p = 0; p < 8; ++p) {
          const uint4 v = __ldg(reinterpret_cast<const uint4*>(wr + ((size_t)p * nb + blk) * 16));
          q[4 * p] = v.x, q[4 * p + 1] = v.y, q[4 * p + 2] = v.z, q[4 * p + 3] = v.w;
        }
        const uint4 h = __ldg(reinterpret_cast<const uint4*>(wr + (size_t)nb * 128 + blk * 16));
        const uint32_t hd[4] = {h.x, h.y, h.z, h.w};
        int dl[4] = {0, 0, 0, 0}, dh[4] = {0, 0, 0, 0};
#pragma unroll
        for (int p = 0; p < 8; ++p) q4_k_piece(q + 4 * p, p, xw, dl[p >> 1], dh[p >> 1]);
        acc = q4_k_finish(hd, dl, dh, sd[blk], ss + 16 * blk, acc);
      }
    }
  } else {
    const int units = nb / ub;
    uint8_t* wb = wbuf + warp * 32 * unit;  // variant c: the warp's rows' next lpr units each
    for (int u0 = 0; u0 < units; u0 += lpr) {
      uint32_t w[36];
      const int u = u0 + lane;
      if (V == 2) {
        const int per_row = lpr * unit / 16;
        __syncwarp();
        for (int c = l32; c < rpw * per_row; c += 32) {
          const int rr = min((blockIdx.x * kWarps + warp) * rpw + c / per_row, rows - 1);
          const int off = u0 * unit + (c % per_row) * 16;
          if (off < rb) *reinterpret_cast<uint4*>(wb + c * 16) = __ldg(reinterpret_cast<const uint4*>(W + rr * rb + off));
        }
        __syncwarp();
      }
      if (u < units) {
#pragma unroll
        for (int c = 0; c < 9; ++c) {
          const uint4 v = V == 2 ? *reinterpret_cast<const uint4*>(wb + ((l32 / lpr) * lpr + lane) * unit + c * 16)
                                 : __ldg(reinterpret_cast<const uint4*>(wr + (size_t)u * unit + c * 16));
          w[4 * c] = v.x, w[4 * c + 1] = v.y, w[4 * c + 2] = v.z, w[4 * c + 3] = v.w;
        }
        if (K == 0) {
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            const int blk = u * 8 + k;
            const uint32_t q[4] = {wd(w, 18 * k + 2), wd(w, 18 * k + 6), wd(w, 18 * k + 10), wd(w, 18 * k + 14)};
            acc = q4_0_dot(q, h2f(wd(w, 18 * k)), reinterpret_cast<const int*>(sm + blk * f.xstride), sd[blk], ss[blk], acc);
          }
        } else {
          int dl[4] = {0, 0, 0, 0}, dh[4] = {0, 0, 0, 0};
          const int* xw = reinterpret_cast<const int*>(sm + u * f.xstride);
#pragma unroll
          for (int p = 0; p < 8; ++p) q4_k_piece(w + 4 + 4 * p, p, xw, dl[p >> 1], dh[p >> 1]);
          acc = q4_k_finish(w, dl, dh, sd[u], ss + 16 * u, acc);
        }
      }
    }
  }
  for (int o = lpr / 2; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffff, acc, o);
  if (lane == 0 && row < rows) y[row] = acc;
}

__global__ void read_sum(const uint4* __restrict__ p, size_t n, unsigned* out) {
  unsigned s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const uint4 v = __ldg(p + i);
    s ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (s == 0x12345678u) *out = s;
}

template <int K, int V>
float run(const uint8_t* W, size_t wbytes, int copies, const int8_t* xq, const float* xd, const int* xs, float* y,
          int rows, int nb, int lpr, int reps) {
  constexpr Fmt f = fmt_of(K);
  const size_t smem = nb * f.xstride + nb * 4 + (K == 0 ? nb : 16 * nb) * 4 + (V == 2 ? kWarps * 32 * 144 : 0);
  CK(cudaFuncSetAttribute(mv<K, V>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const int rpw = 32 / lpr, grid = (rows + rpw * kWarps - 1) / (rpw * kWarps);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  if (reps > 1)
    for (int i = 0; i < copies; ++i) mv<K, V><<<grid, 32 * kWarps, smem>>>(W + i * wbytes, xq, xd, xs, y, rows, nb, lpr);
  CK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i)
    mv<K, V><<<grid, 32 * kWarps, smem>>>(W + (i % copies) * wbytes, xq, xd, xs, y, rows, nb, lpr);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  CK(cudaGetLastError());
  float ms;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  return 1000.f * ms / reps;
}

int main(int argc, char** argv) {
  // "ncu": one launch of each case (for ncu's counters), no timing output of use.
  const bool once = argc > 1 && std::string(argv[1]) == "ncu";
  const size_t big = size_t{1} << 30;
  uint8_t *W, *B;
  CK(cudaMalloc(&W, big));
  CK(cudaMalloc(&B, big));
  // Random bytes (f16 scales included: the arithmetic's cost does not depend on the values).
  std::vector<uint32_t> h(big / 4 / 64);
  uint64_t s = 88172645463325252ull;
  for (auto& v : h) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; v = (uint32_t)s & 0x3BFF3BFF; }
  for (int i = 0; i < 64; ++i) CK(cudaMemcpy(W + i * (big / 64), h.data(), big / 64, cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float ms;
  CK(cudaMemcpy(B, W, big, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e0));
  for (int i = 0; i < 10; ++i) CK(cudaMemcpy(B, W, big, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  CK(cudaEventElapsedTime(&ms, e0, e1));
  const double copy = 2.0 * big * 10 / (ms * 1e-3) / 1e9;
  unsigned* dummy;
  CK(cudaMalloc(&dummy, 4));
  read_sum<<<132 * 8, 512>>>(reinterpret_cast<const uint4*>(W), big / 16, dummy);
  CK(cudaEventRecord(e0));
  for (int i = 0; i < 10; ++i) read_sum<<<132 * 8, 512>>>(reinterpret_cast<const uint4*>(W), big / 16, dummy);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  CK(cudaEventElapsedTime(&ms, e0, e1));
  const double rd = 1.0 * big * 10 / (ms * 1e-3) / 1e9;
  printf("{\"what\":\"ceiling\",\"copy_gbs\":%.1f,\"read_gbs\":%.1f}\n", copy, rd);
  int8_t* xq;
  float *xd, *y;
  int* xs;
  CK(cudaMalloc(&xq, 1 << 20));
  CK(cudaMalloc(&xd, 1 << 16));
  CK(cudaMalloc(&xs, 1 << 18));
  CK(cudaMalloc(&y, 1 << 20));
  CK(cudaMemset(xq, 3, 1 << 20));
  CK(cudaMemset(xd, 0, 1 << 16));
  CK(cudaMemset(xs, 0, 1 << 18));
  struct Sh { const char* name; int rows, n_in; } shapes[] = {
      {"down", 4096, 14336}, {"gate_up", 28672, 4096}, {"qkv", 6144, 4096}};
  const char* vn[] = {"a_gguf_units", "b_planar", "c_gguf_smem"};
  for (int K = 0; K < 2; ++K)
    for (const Sh& sh : shapes)
      for (int V = 0; V < 3; ++V) {
        const Fmt f = fmt_of(K);
        const int nb = sh.n_in / f.be;
        const size_t wbytes = (size_t)sh.rows * nb * f.bb;
        const int copies = (int)(big / wbytes);
        const int units = V == 1 ? nb : (K == 0 ? nb / 8 : nb);
        int lpr = 1;
        while (lpr < 32 && lpr < units) lpr *= 2;
        float us = 0;
        const int reps = once ? 1 : 200;
        if (K == 0 && V == 0) us = run<0, 0>(W, wbytes, copies, xq, xd, xs, y, sh.rows, nb, lpr, reps);
        if (K == 0 && V == 1) us = run<0, 1>(W, wbytes, copies, xq, xd, xs, y, sh.rows, nb, lpr, reps);
        if (K == 0 && V == 2) us = run<0, 2>(W, wbytes, copies, xq, xd, xs, y, sh.rows, nb, lpr, reps);
        if (K == 1 && V == 0) us = run<1, 0>(W, wbytes, copies, xq, xd, xs, y, sh.rows, nb, lpr, reps);
        if (K == 1 && V == 1) us = run<1, 1>(W, wbytes, copies, xq, xd, xs, y, sh.rows, nb, lpr, reps);
        if (K == 1 && V == 2) us = run<1, 2>(W, wbytes, copies, xq, xd, xs, y, sh.rows, nb, lpr, reps);
        const double gbs = wbytes / (us * 1e-6) / 1e9;
        printf("{\"what\":\"matvec\",\"wtype\":\"%s\",\"shape\":\"%s\",\"rows\":%d,\"n_in\":%d,\"variant\":\"%s\","
               "\"lpr\":%d,\"us\":%.2f,\"weight_gbs\":%.1f,\"of_read\":%.3f,\"of_copy\":%.3f}\n",
               K ? "q4_k" : "q4_0", sh.name, sh.rows, sh.n_in, vn[V], lpr, us, gbs, gbs / rd, gbs / copy);
      }
  return 0;
}
