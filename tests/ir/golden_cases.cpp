// Inputs, launch shapes and references of the golden kernels (see golden_cases.h). References
// are plain C++ computed in double (or exact integers); tolerances are per kernel.
#include "golden_cases.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "loom/codegen/emit_util.h"
#include "loom/ir/ir.h"

namespace loom::test {
namespace {

template <class T>
std::vector<uint8_t> to_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

template <class T>
std::vector<T> from_bytes(const std::vector<uint8_t>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

// Output buffers start as 0xFF bytes (a NaN for floats), so an unwritten element is caught.
std::vector<uint8_t> output(size_t bytes) { return std::vector<uint8_t>(bytes, 0xFF); }

KernelArg buf(int i) {
  KernelArg a;
  a.buffer = i;
  return a;
}

template <class T>
KernelArg scalar(T v) {
  KernelArg a;
  std::memcpy(a.scalar.data(), &v, sizeof(T));
  return a;
}

int uniform_int(std::mt19937& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

uint32_t blocks_for(uint64_t n, uint32_t per_block) { return static_cast<uint32_t>((n + per_block - 1) / per_block); }

// "" when every got[i] is within abs_tol + rel_tol * scale[i] of want[i].
std::string compare(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& scale,
                    double abs_tol, double rel_tol) {
  if (got.size() != want.size()) return fmt::format("size {} != {}", got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = abs_tol + rel_tol * scale[i];
    double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol))
      return fmt::format("element {}: got {}, want {} (error {:.3g} > tolerance {:.3g})", i, got[i], want[i], err, tol);
  }
  return "";
}

std::vector<double> magnitudes(const std::vector<double>& want) {
  std::vector<double> s(want.size());
  for (size_t i = 0; i < want.size(); ++i) s[i] = std::fabs(want[i]);
  return s;
}

GoldenRun vector_add(std::mt19937& rng) {
  int n = uniform_int(rng, 1000, 5000);
  auto a = random_floats(rng, n), b = random_floats(rng, n);
  GoldenRun run;
  run.buffers = {to_bytes(a), to_bytes(b), output(n * 4)};
  run.args = {buf(0), buf(1), buf(2), scalar<int32_t>(n)};
  run.block = {128, 1, 1};
  run.grid = {blocks_for(n, 128), 1, 1};
  run.check = [a, b](const std::vector<std::vector<uint8_t>>& out) {
    auto c = from_bytes<float>(out[2]);
    std::vector<double> want(a.size());
    for (size_t i = 0; i < a.size(); ++i) want[i] = static_cast<double>(a[i] + b[i]);  // f32 add is exact
    return compare(c, want, want, 0, 0);
  };
  return run;
}

GoldenRun reduce_rows(std::mt19937& rng) {
  int rows = uniform_int(rng, 50, 200), n = 4 * uniform_int(rng, 8, 100);
  auto x = random_floats(rng, static_cast<size_t>(rows) * n);
  GoldenRun run;
  run.buffers = {to_bytes(x), output(rows * 4)};
  run.args = {buf(0), buf(1), scalar<int32_t>(rows), scalar<int32_t>(n)};
  run.block = {64, 1, 1};
  run.grid = {blocks_for(rows, 64), 1, 1};
  run.check = [x, rows, n](const std::vector<std::vector<uint8_t>>& out) {
    std::vector<double> want(rows, 0.0), scale(rows, 0.0);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < n; ++j) {
        want[r] += x[static_cast<size_t>(r) * n + j];
        scale[r] += std::fabs(x[static_cast<size_t>(r) * n + j]);
      }
    return compare(from_bytes<float>(out[1]), want, scale, 1e-6, 1e-6);
  };
  return run;
}

GoldenRun softmax_rows(std::mt19937& rng) {
  int rows = uniform_int(rng, 20, 100), n = uniform_int(rng, 10, 300);
  auto x = random_floats(rng, static_cast<size_t>(rows) * n, -8, 8);
  GoldenRun run;
  run.buffers = {to_bytes(x), output(x.size() * 4)};
  run.args = {buf(0), buf(1), scalar<int32_t>(rows), scalar<int32_t>(n)};
  run.block = {32, 1, 1};
  run.grid = {blocks_for(rows, 32), 1, 1};
  run.check = [x, rows, n](const std::vector<std::vector<uint8_t>>& out) {
    std::vector<double> want(x.size());
    for (int r = 0; r < rows; ++r) {
      const float* row = &x[static_cast<size_t>(r) * n];
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(row[j]));
      for (int j = 0; j < n; ++j) sum += std::exp(row[j] - mx);
      for (int j = 0; j < n; ++j) want[static_cast<size_t>(r) * n + j] = std::exp(row[j] - mx) / sum;
    }
    return compare(from_bytes<float>(out[1]), want, magnitudes(want), 1e-7, 2e-5);
  };
  return run;
}

GoldenRun rms_norm(std::mt19937& rng) {
  int rows = uniform_int(rng, 20, 100), n = uniform_int(rng, 16, 400);
  auto x = random_floats(rng, static_cast<size_t>(rows) * n, -3, 3);
  auto w = random_floats(rng, n, 0.5f, 1.5f);
  float eps = 1e-5f;
  GoldenRun run;
  run.buffers = {to_bytes(x), to_bytes(w), output(x.size() * 4)};
  run.args = {buf(0), buf(1), buf(2), scalar<int32_t>(rows), scalar<int32_t>(n), scalar<float>(eps)};
  run.block = {32, 1, 1};
  run.grid = {blocks_for(rows, 32), 1, 1};
  run.check = [x, w, rows, n, eps](const std::vector<std::vector<uint8_t>>& out) {
    std::vector<double> want(x.size());
    for (int r = 0; r < rows; ++r) {
      const float* row = &x[static_cast<size_t>(r) * n];
      double ss = 0;
      for (int j = 0; j < n; ++j) ss += static_cast<double>(row[j]) * row[j];
      double scale = 1.0 / std::sqrt(ss / n + eps);
      for (int j = 0; j < n; ++j) want[static_cast<size_t>(r) * n + j] = row[j] * scale * w[j];
    }
    return compare(from_bytes<float>(out[2]), want, magnitudes(want), 1e-6, 2e-5);
  };
  return run;
}

GoldenRun matmul_tiled(std::mt19937& rng) {
  int m = 4 * uniform_int(rng, 4, 20), n = 4 * uniform_int(rng, 4, 20), k = uniform_int(rng, 5, 70);
  auto a = random_floats(rng, static_cast<size_t>(m) * k), b = random_floats(rng, static_cast<size_t>(k) * n);
  GoldenRun run;
  run.buffers = {to_bytes(a), to_bytes(b), output(static_cast<size_t>(m) * n * 4)};
  run.args = {buf(0), buf(1), buf(2), scalar<int32_t>(m), scalar<int32_t>(n), scalar<int32_t>(k)};
  run.block = {8, 4, 1};
  run.grid = {blocks_for(n / 4, 8), blocks_for(m / 4, 4), 1};
  run.check = [a, b, m, n, k](const std::vector<std::vector<uint8_t>>& out) {
    std::vector<double> want(static_cast<size_t>(m) * n, 0.0), scale(want.size(), 0.0);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j)
        for (int p = 0; p < k; ++p) {
          double prod = static_cast<double>(a[static_cast<size_t>(i) * k + p]) * b[static_cast<size_t>(p) * n + j];
          want[static_cast<size_t>(i) * n + j] += prod;
          scale[static_cast<size_t>(i) * n + j] += std::fabs(prod);
        }
    return compare(from_bytes<float>(out[2]), want, scale, 1e-6, 1e-6);
  };
  return run;
}

// f16/bf16 references from the IR's rounding (frexp-based, independent of the emitted C++'s
// bit manipulation and of the GPU's cvt instructions).
uint16_t to_f16_bits(float f) { return codegen::f16_bits(ir::round_float(ir::Scalar::kF16, f)); }

float from_f16_bits(uint16_t bits) {
  int e = (bits >> 10) & 0x1F, m = bits & 0x3FF;
  double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024 + m, e - 25);
  return static_cast<float>((bits & 0x8000) ? -v : v);
}

GoldenRun matvec_q4_0(std::mt19937& rng) {
  int rows = uniform_int(rng, 10, 100), k = 32 * uniform_int(rng, 1, 8), nb = k / 32;
  std::vector<uint8_t> w(static_cast<size_t>(rows) * nb * 18);
  std::uniform_real_distribution<float> dd(0.001f, 0.05f);
  for (size_t blk = 0; blk < static_cast<size_t>(rows) * nb; ++blk) {
    uint16_t d = to_f16_bits(dd(rng) * (uniform_int(rng, 0, 1) ? 1 : -1));
    std::memcpy(&w[blk * 18], &d, 2);
    for (int j = 0; j < 16; ++j) w[blk * 18 + 2 + j] = static_cast<uint8_t>(uniform_int(rng, 0, 255));
  }
  auto x = random_floats(rng, k);
  GoldenRun run;
  run.buffers = {w, to_bytes(x), output(rows * 4)};
  run.args = {buf(0), buf(1), buf(2), scalar<int32_t>(rows), scalar<int32_t>(k)};
  run.block = {32, 1, 1};
  run.grid = {blocks_for(rows, 32), 1, 1};
  run.check = [w, x, rows, nb](const std::vector<std::vector<uint8_t>>& out) {
    std::vector<double> want(rows, 0.0), scale(rows, 0.0);
    for (int r = 0; r < rows; ++r)
      for (int b = 0; b < nb; ++b) {
        const uint8_t* blk = &w[(static_cast<size_t>(r) * nb + b) * 18];
        uint16_t dbits;
        std::memcpy(&dbits, blk, 2);
        double d = from_f16_bits(dbits);
        for (int j = 0; j < 32; ++j) {
          int q = j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4);
          double term = (q - 8) * d * x[static_cast<size_t>(b) * 32 + j];
          want[r] += term;
          scale[r] += std::fabs(term);
        }
      }
    return compare(from_bytes<float>(out[2]), want, scale, 1e-6, 1e-5);
  };
  return run;
}

GoldenRun matvec_i8(std::mt19937& rng) {
  int rows = uniform_int(rng, 10, 200), k = 4 * uniform_int(rng, 1, 64);
  std::vector<int8_t> w(static_cast<size_t>(rows) * k), x(k);
  for (auto& v : w) v = static_cast<int8_t>(uniform_int(rng, -128, 127));
  for (auto& v : x) v = static_cast<int8_t>(uniform_int(rng, -128, 127));
  auto sw = random_floats(rng, rows, 0.001f, 0.01f);
  float sx = 0.02f;
  GoldenRun run;
  run.buffers = {to_bytes(w), to_bytes(x), to_bytes(sw), output(rows * 4)};
  run.args = {buf(0), buf(1), buf(2), scalar<float>(sx), buf(3), scalar<int32_t>(rows), scalar<int32_t>(k)};
  run.block = {64, 1, 1};
  run.grid = {blocks_for(rows, 64), 1, 1};
  run.check = [w, x, sw, sx, rows, k](const std::vector<std::vector<uint8_t>>& out) {
    std::vector<double> want(rows);
    for (int r = 0; r < rows; ++r) {
      int64_t acc = 0;
      for (int j = 0; j < k; ++j) acc += int64_t{w[static_cast<size_t>(r) * k + j]} * x[j];
      want[r] = static_cast<double>(acc) * sw[r] * sx;
    }
    return compare(from_bytes<float>(out[3]), want, magnitudes(want), 1e-7, 1e-6);
  };
  return run;
}

GoldenRun transpose_shared(std::mt19937& rng) {
  int rows = uniform_int(rng, 33, 120), cols = uniform_int(rng, 33, 120);
  auto in = random_floats(rng, static_cast<size_t>(rows) * cols);
  GoldenRun run;
  run.buffers = {to_bytes(in), output(in.size() * 4)};
  run.args = {buf(0), buf(1), scalar<int32_t>(rows), scalar<int32_t>(cols)};
  run.block = {32, 8, 1};
  run.grid = {blocks_for(cols, 32), blocks_for(rows, 32), 1};
  run.check = [in, rows, cols](const std::vector<std::vector<uint8_t>>& out) {
    std::vector<double> want(in.size());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) want[static_cast<size_t>(c) * rows + r] = in[static_cast<size_t>(r) * cols + c];
    return compare(from_bytes<float>(out[1]), want, want, 0, 0);
  };
  return run;
}

// See dynamic_shared.loom: 96 KiB of shared memory per block (dynamic on the ptx target).
GoldenRun dynamic_shared(std::mt19937& rng) {
  const int blocks = uniform_int(rng, 1, 4);
  auto in = random_floats(rng, static_cast<size_t>(blocks) * 16384);
  GoldenRun run;
  run.buffers = {to_bytes(in), output(in.size() * 4)};
  run.args = {buf(0), buf(1)};
  run.block = {256, 1, 1};
  run.grid = {static_cast<uint32_t>(blocks), 1, 1};
  run.check = [in, blocks](const std::vector<std::vector<uint8_t>>& out) {
    std::vector<double> want(in.size());
    for (int b = 0; b < blocks; ++b)
      for (int j = 0; j < 16384; ++j) {
        const size_t at = static_cast<size_t>(b) * 16384;
        want[at + static_cast<size_t>(j)] =
            static_cast<float>(in[at + static_cast<size_t>(16383 - j)]) + static_cast<float>(3 * (8191 - j % 8192));
      }
    return compare(from_bytes<float>(out[1]), want, want, 0, 0);
  };
  return run;
}

GoldenRun histogram(std::mt19937& rng) {
  int n = uniform_int(rng, 5000, 20000);
  std::vector<uint8_t> x(n);
  int skew = uniform_int(rng, 1, 255);  // concentrate some bins so atomics contend
  for (auto& v : x) v = static_cast<uint8_t>(uniform_int(rng, 0, 3) == 0 ? uniform_int(rng, 0, 255) : skew % 256);
  GoldenRun run;
  run.buffers = {x, std::vector<uint8_t>(256 * 4, 0)};
  run.args = {buf(0), buf(1), scalar<int32_t>(n)};
  run.block = {128, 1, 1};
  run.grid = {blocks_for(n, 128), 1, 1};
  run.check = [x](const std::vector<std::vector<uint8_t>>& out) -> std::string {
    std::vector<int32_t> want(256, 0);
    for (uint8_t v : x) ++want[v];
    auto got = from_bytes<int32_t>(out[1]);
    for (int b = 0; b < 256; ++b)
      if (got[b] != want[b]) return fmt::format("bin {}: got {}, want {}", b, got[b], want[b]);
    return "";
  };
  return run;
}

GoldenRun warp_sum(std::mt19937& rng) {
  int n = 32 * uniform_int(rng, 4, 64) - uniform_int(rng, 0, 31);  // last warp partly empty
  int warps = (n + 31) / 32;
  auto x = random_floats(rng, n);
  GoldenRun run;
  run.buffers = {to_bytes(x), output(warps * 4), output(warps * 4)};
  run.args = {buf(0), buf(1), buf(2), scalar<int32_t>(n)};
  run.block = {128, 1, 1};
  run.grid = {blocks_for(n, 128), 1, 1};
  run.check = [x, n, warps](const std::vector<std::vector<uint8_t>>& out) {
    std::vector<double> sums(warps, 0.0), maxs(warps, -INFINITY), scale(warps, 0.0);
    for (int i = 0; i < n; ++i) {
      sums[i / 32] += x[i];
      scale[i / 32] += std::fabs(x[i]);
      maxs[i / 32] = std::max(maxs[i / 32], static_cast<double>(x[i]));
    }
    std::string e = compare(from_bytes<float>(out[1]), sums, scale, 1e-6, 1e-6);
    if (!e.empty()) return "sums: " + e;
    e = compare(from_bytes<float>(out[2]), maxs, maxs, 0, 0);
    return e.empty() ? e : "maxs: " + e;
  };
  return run;
}

// warp_ops: per warp of 32 threads, the sum (within rounding: the order is the butterfly's), max
// and min of x and the exact i32 sum, max and min of k in every lane; the shuffles exactly.
GoldenRun warp_ops(std::mt19937& rng) {
  const int blocks = uniform_int(rng, 1, 6), n = blocks * 64;
  const int m = uniform_int(rng, 0, 31);
  auto x = random_floats(rng, n, -4, 4);
  std::vector<int32_t> k(n);
  for (auto& v : k) v = uniform_int(rng, -1000000, 1000000);
  GoldenRun run;
  run.buffers = {to_bytes(x), to_bytes(k), output(n * 24), output(n * 24)};
  run.args = {buf(0), buf(1), buf(2), buf(3), scalar<int32_t>(m)};
  run.block = {64, 1, 1};
  run.grid = {static_cast<uint32_t>(blocks), 1, 1};
  run.check = [x, k, n, m](const std::vector<std::vector<uint8_t>>& out) -> std::string {
    const auto fo = from_bytes<float>(out[2]);
    const auto io = from_bytes<int32_t>(out[3]);
    for (int i = 0; i < n; ++i) {
      const int w = i & ~31;
      double sum = 0, mag = 0;
      float mx = x[w], mn = x[w];
      int64_t isum = 0;
      int32_t imx = k[w], imn = k[w];
      for (int j = w; j < w + 32; ++j) {
        sum += x[j];
        mag += std::fabs(x[j]);
        mx = std::max(mx, x[j]);
        mn = std::min(mn, x[j]);
        isum += k[j];
        imx = std::max(imx, k[j]);
        imn = std::min(imn, k[j]);
      }
      const int xi = w + ((i - w) ^ 3), x21 = w + ((i - w) ^ 21), xm = w + ((i - w) ^ m);
      const int x12 = w + ((i - w) ^ 12), x16 = w + ((i - w) ^ 16);
      const float* f = &fo[static_cast<size_t>(6 * i)];
      const int32_t* g = &io[static_cast<size_t>(6 * i)];
      if (!(std::fabs(f[0] - sum) <= 1e-6 * mag + 1e-6)) return fmt::format("lane {}: f32 sum {} want {}", i, f[0], sum);
      if (f[0] != fo[static_cast<size_t>(6 * w)]) return fmt::format("lane {}: f32 sum {} differs from lane {}'s {}", i, f[0], w, fo[6 * w]);
      if (f[1] != mx || f[2] != mn) return fmt::format("lane {}: f32 max/min {} {} want {} {}", i, f[1], f[2], mx, mn);
      if (f[3] != x[xi] || f[4] != x[x21] || f[5] != x[xm])
        return fmt::format("lane {}: f32 shfl.xor 3/21/{} got {} {} {} want {} {} {}", i, m, f[3], f[4], f[5], x[xi], x[x21], x[xm]);
      if (g[0] != static_cast<int32_t>(isum) || g[1] != imx || g[2] != imn)
        return fmt::format("lane {}: i32 sum/max/min {} {} {} want {} {} {}", i, g[0], g[1], g[2], isum, imx, imn);
      if (g[3] != k[x12] || g[4] != k[x16] || g[5] != k[xm])
        return fmt::format("lane {}: i32 shfl.xor 12/16/{} got {} {} {} want {} {} {}", i, m, g[3], g[4], g[5], k[x12], k[x16], k[xm]);
    }
    return "";
  };
  return run;
}

GoldenRun mma_tile(std::mt19937& rng) {
  int tiles = uniform_int(rng, 1, 8);
  std::vector<uint16_t> a(tiles * 256), b(tiles * 128);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto& v : a) v = to_f16_bits(d(rng));
  for (auto& v : b) v = to_f16_bits(d(rng));
  auto c = random_floats(rng, tiles * 128);
  GoldenRun run;
  run.buffers = {to_bytes(a), to_bytes(b), to_bytes(c), output(c.size() * 4)};
  run.args = {buf(0), buf(1), buf(2), buf(3)};
  run.block = {32, 1, 1};
  run.grid = {static_cast<uint32_t>(tiles), 1, 1};
  run.check = [a, b, c, tiles](const std::vector<std::vector<uint8_t>>& out) {
    std::vector<double> want(c.size()), scale(c.size());
    for (int t = 0; t < tiles; ++t)
      for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 8; ++j) {
          double acc = c[t * 128 + i * 8 + j], mag = std::fabs(acc);
          for (int k = 0; k < 16; ++k) {
            double p = static_cast<double>(from_f16_bits(a[t * 256 + i * 16 + k])) * from_f16_bits(b[t * 128 + k * 8 + j]);
            acc += p;
            mag += std::fabs(p);
          }
          want[t * 128 + i * 8 + j] = acc;
          scale[t * 128 + i * 8 + j] = mag;
        }
    return compare(from_bytes<float>(out[3]), want, scale, 1e-6, 1e-5);
  };
  return run;
}

GoldenRun mma_s8_tile(std::mt19937& rng) {
  int tiles = uniform_int(rng, 1, 8);
  std::vector<int8_t> a(tiles * 512), b(tiles * 256);
  std::uniform_int_distribution<int> d(-128, 127);
  for (auto& v : a) v = static_cast<int8_t>(d(rng));
  for (auto& v : b) v = static_cast<int8_t>(d(rng));
  // Extremes in the first tile: -128 * -128 products summed 32 times, and a C near the i32 range.
  for (int i = 0; i < 32; ++i) a[i] = -128, b[i] = -128;
  std::vector<int32_t> c(tiles * 128);
  std::uniform_int_distribution<int32_t> dc(-(1 << 30), 1 << 30);
  for (auto& v : c) v = dc(rng);
  GoldenRun run;
  run.buffers = {to_bytes(a), to_bytes(b), to_bytes(c), output(c.size() * 4)};
  run.args = {buf(0), buf(1), buf(2), buf(3)};
  run.block = {32, 1, 1};
  run.grid = {static_cast<uint32_t>(tiles), 1, 1};
  run.check = [a, b, c, tiles](const std::vector<std::vector<uint8_t>>& out) -> std::string {
    std::vector<int32_t> got = from_bytes<int32_t>(out[3]);
    for (int t = 0; t < tiles; ++t)
      for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 8; ++j) {
          int64_t acc = c[t * 128 + i * 8 + j];
          for (int k = 0; k < 32; ++k) acc += int64_t{a[t * 512 + i * 32 + k]} * b[t * 256 + j * 32 + k];
          const int32_t want = static_cast<int32_t>(acc);
          if (got[t * 128 + i * 8 + j] != want)
            return fmt::format("tile {} ({}, {}): {} != {}", t, i, j, got[t * 128 + i * 8 + j], want);
        }
    return "";
  };
  return run;
}

float round_f16(float f) { return from_f16_bits(to_f16_bits(f)); }

GoldenRun ldmatrix_tile(std::mt19937& rng) {
  int tiles = uniform_int(rng, 1, 8);
  std::vector<uint16_t> a(tiles * 256);
  std::uniform_real_distribution<float> dist(-4, 4);
  for (auto& v : a) v = to_f16_bits(dist(rng));
  GoldenRun run;
  run.buffers = {to_bytes(a), output(a.size() * 2)};
  run.args = {buf(0), buf(1)};
  run.block = {32, 1, 1};
  run.grid = {static_cast<uint32_t>(tiles), 1, 1};
  run.check = [a, tiles](const std::vector<std::vector<uint8_t>>& out) -> std::string {
    auto got = from_bytes<uint16_t>(out[1]);
    for (int t = 0; t < tiles; ++t)
      for (int l = 0; l < 32; ++l)
        for (int i = 0; i < 8; ++i) {
          const int j = i / 2, row = 8 * (j % 2) + l / 4, col = 8 * (j / 2) + 2 * (l % 4) + i % 2;
          const float x = from_f16_bits(a[t * 256 + row * 16 + col]);
          const uint16_t want = to_f16_bits(2.0f * x - 0.5f);
          const uint16_t g = got[static_cast<size_t>(t * 256 + l * 8 + i)];
          if (g != want)
            return fmt::format("tile {} lane {} result {}: got f16 {:#06x}, want {:#06x} (row {}, column {})", t, l, i, g, want,
                               row, col);
        }
    return "";
  };
  return run;
}

// ldmatrix_t: lane l's results 2j, 2j + 1 are rows 2 (l % 4), 2 (l % 4) + 1, column l / 4 of
// quarter j (the quarter transposed), times 2, minus 0.5.
GoldenRun ldmatrix_t_tile(std::mt19937& rng) {
  GoldenRun run = ldmatrix_tile(rng);
  const int tiles = static_cast<int>(run.grid[0]);
  const auto a = from_bytes<uint16_t>(run.buffers[0]);
  run.check = [a, tiles](const std::vector<std::vector<uint8_t>>& out) -> std::string {
    auto got = from_bytes<uint16_t>(out[1]);
    for (int t = 0; t < tiles; ++t)
      for (int l = 0; l < 32; ++l)
        for (int i = 0; i < 8; ++i) {
          const int j = i / 2, row = 8 * (j % 2) + 2 * (l % 4) + i % 2, col = 8 * (j / 2) + l / 4;
          const float x = from_f16_bits(a[static_cast<size_t>(t * 256 + row * 16 + col)]);
          const uint16_t want = to_f16_bits(2.0f * x - 0.5f);
          const uint16_t g = got[static_cast<size_t>(t * 256 + l * 8 + i)];
          if (g != want)
            return fmt::format("tile {} lane {} result {}: got f16 {:#06x}, want {:#06x} (row {}, column {})", t, l, i, g, want,
                               row, col);
        }
    return "";
  };
  return run;
}

// See async_copy_tile.loom: two groups of cp_async, read by other threads after each wait.
GoldenRun async_copy_tile(std::mt19937& rng) {
  const int tiles = uniform_int(rng, 1, 12);
  auto a = random_floats(rng, static_cast<size_t>(tiles) * 256), b = random_floats(rng, static_cast<size_t>(tiles) * 128),
       c = random_floats(rng, static_cast<size_t>(tiles) * 64);
  GoldenRun run;
  run.buffers = {to_bytes(a), to_bytes(b), to_bytes(c), output(tiles * 448 * 4)};
  run.args = {buf(0), buf(1), buf(2), buf(3)};
  run.block = {64, 1, 1};
  run.grid = {static_cast<uint32_t>(tiles), 1, 1};
  run.check = [a, b, c, tiles](const std::vector<std::vector<uint8_t>>& out) {
    std::vector<double> want(static_cast<size_t>(tiles) * 448);
    for (int t = 0; t < tiles; ++t)
      for (int i = 0; i < 64; ++i) {
        const int j = 63 - i;
        double* w = want.data() + t * 448;
        for (int k = 0; k < 4; ++k) w[4 * i + k] = 2.0 * a[static_cast<size_t>(t * 256 + 4 * j + k)];
        for (int k = 0; k < 2; ++k) w[256 + 2 * i + k] = b[static_cast<size_t>(t * 128 + 2 * j + k)];
        w[384 + i] = c[static_cast<size_t>(t * 64 + j)];
      }
    return compare(from_bytes<float>(out[3]), want, want, 0, 0);
  };
  return run;
}

GoldenRun mixed_ops(std::mt19937& rng) {
  int n = uniform_int(rng, 500, 3000);
  auto x = random_floats(rng, n, -2, 2);
  std::vector<int32_t> k(n);
  for (auto& v : k) v = static_cast<int32_t>(rng());
  GoldenRun run;
  run.buffers = {to_bytes(x), to_bytes(k), output(static_cast<size_t>(n) * 16 * 4), output(static_cast<size_t>(n) * 20 * 4)};
  run.args = {buf(0), buf(1), buf(2), buf(3), scalar<int32_t>(n)};
  run.block = {64, 1, 1};
  run.grid = {blocks_for(n, 64), 1, 1};
  run.check = [x, k, n](const std::vector<std::vector<uint8_t>>& out) -> std::string {
    auto of = from_bytes<float>(out[2]);
    auto oi = from_bytes<int32_t>(out[3]);
    // Per float slot: reference and tolerance (absolute + relative). GPU math is approximate.
    const double kAbs[16] = {1e-6, 1e-6, 2e-6, 1e-7, 1e-6, 2e-6, 2e-6, 2e-7, 6e-7, 1e-7, 0, 0, 0, 0, 0, 1e-6};
    const double kRel[16] = {2e-6, 2e-6, 1e-6, 2e-7, 2e-6, 0, 0, 2e-6, 0, 2e-7, 0, 0, 0, 0, 0, 1e-6};
    for (int i = 0; i < n; ++i) {
      const float xv = x[i];
      const float yv = std::fmaf(xv, 0.5f, 0.25f);
      const float xh = round_f16(xv), yh = round_f16(yv);
      const float ax = std::fabs(xv);
      double want[16] = {
          std::exp(static_cast<double>(xv)),
          std::exp2(static_cast<double>(xv)),
          std::log(static_cast<double>(ax + 0.5f)),
          std::sqrt(static_cast<double>(ax)),
          1.0 / std::sqrt(static_cast<double>(ax + 0.25f)),
          std::sin(static_cast<double>(xv)),
          std::cos(static_cast<double>(xv)),
          std::tanh(static_cast<double>(xv * 2.0f)),
          std::erf(static_cast<double>(xv)),
          std::fma(static_cast<double>(xv), yv, 1.0),
          std::fmin(xv, yv),
          std::fmax(xv, yv),
          xh,
          ir::round_float(ir::Scalar::kBF16, xv),
          round_f16(round_f16(xh * yh) + xh),
          std::fabs(xv) * 1.0 + std::fabs(yv) * 2.0 + std::fabs(static_cast<double>(xv * yv)) * 3.0 + std::fabs(xv) * 4.0,
      };
      for (int s = 0; s < 16; ++s) {
        double got = of[static_cast<size_t>(i) * 16 + s];
        double tol = kAbs[s] + kRel[s] * std::fabs(want[s]);
        if (!(std::fabs(got - want[s]) <= tol))
          return fmt::format("element {} float slot {} (x = {}): got {}, want {}", i, s, xv, got, want[s]);
      }
      const int32_t a = k[i], b = a ^ 0x5A5A5A5A;
      const uint32_t ua = static_cast<uint32_t>(a), ub = static_cast<uint32_t>(b);
      const int32_t bp = (b & 0xFFFF) | 1, sa = b & 31;
      int32_t i0 = static_cast<int32_t>(ua + ub), i1 = static_cast<int32_t>(ua * ub), i2 = a / bp, i3 = a % bp;
      int8_t s8 = static_cast<int8_t>(static_cast<int8_t>(a) + static_cast<int8_t>(b));
      int8_t p8 = static_cast<int8_t>(s8 * static_cast<int8_t>(b));
      uint8_t d8 = static_cast<uint8_t>(static_cast<uint8_t>(a) - static_cast<uint8_t>(b));
      int32_t dot = 7;
      for (int q = 0; q < 4; ++q) dot += static_cast<int8_t>(ua >> (8 * q)) * static_cast<int8_t>(ub >> (8 * q));
      int16_t t16 = static_cast<int16_t>(static_cast<int16_t>(a) * 3);
      uint32_t loc[4] = {static_cast<uint32_t>(i0), static_cast<uint32_t>(i1), static_cast<uint32_t>(i2),
                         static_cast<uint32_t>(i3)};
      uint32_t acc = 0;
      for (int j = 0; j < 4; ++j) acc = acc * 31 + loc[3 - j];
      const int32_t want_i[20] = {
          i0, i1, i2, i3,
          a >> sa,
          static_cast<int32_t>(ua >> sa),
          static_cast<int32_t>(ua << sa),
          std::min(a, b),
          static_cast<int32_t>(std::max(ua, ub)),
          a < 0 ? static_cast<int32_t>(0u - ua) : a,
          p8,
          d8,
          dot,
          static_cast<int32_t>(xv * 100.0f),
          ua >= ub ? 1 : 0,
          static_cast<int32_t>(to_f16_bits(xv) | (static_cast<uint32_t>(to_f16_bits(yv)) << 16)),
          static_cast<int16_t>(t16 >> 1),
          static_cast<int32_t>(acc),
          static_cast<int32_t>(static_cast<uint32_t>((uint64_t{ua} * ub) >> 32)),
          ~a,
      };
      for (int s = 0; s < 20; ++s)
        if (oi[static_cast<size_t>(i) * 20 + s] != want_i[s])
          return fmt::format("element {} int slot {} (a = {}): got {}, want {}", i, s, a, oi[static_cast<size_t>(i) * 20 + s],
                             want_i[s]);
    }
    return "";
  };
  return run;
}

GoldenRun convert_half(std::mt19937& rng) {
  const int n = 65536;  // every f16 bit pattern, and as many floats
  std::vector<uint16_t> bits(n);
  for (int i = 0; i < n; ++i) bits[i] = static_cast<uint16_t>(i);
  // Floats: edge cases around f16/bf16 ties, subnormals and overflow, then random bit patterns.
  std::vector<float> x;
  for (int k = 0; k < 4096; ++k) {
    double quantum = std::ldexp(1.0, -24);  // ties between f16 subnormals
    x.push_back(static_cast<float>((k + 0.5) * quantum));
    x.push_back(static_cast<float>(-(k + 0.5) * quantum));
  }
  for (float v : {65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e9f, INFINITY, -INFINITY, NAN, 0.0f, -0.0f,
                  std::ldexp(1.0f, -25), std::ldexp(1.5f, -25), std::ldexp(1.0f, -14), 1.0f + std::ldexp(1.0f, -11)})
    x.push_back(v);
  while (x.size() < static_cast<size_t>(n)) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  GoldenRun run;
  run.buffers = {to_bytes(bits), to_bytes(x), output(n * 4), output(n * 2), output(n * 2)};
  run.args = {buf(0), buf(1), buf(2), buf(3), buf(4), scalar<int32_t>(n)};
  run.block = {256, 1, 1};
  run.grid = {blocks_for(n, 256), 1, 1};
  run.check = [x, n](const std::vector<std::vector<uint8_t>>& out) -> std::string {
    auto h2f = from_bytes<float>(out[2]);
    auto f2h = from_bytes<uint16_t>(out[3]);
    auto f2b = from_bytes<uint16_t>(out[4]);
    for (int i = 0; i < n; ++i) {
      float want = from_f16_bits(static_cast<uint16_t>(i));
      bool same = std::isnan(want) ? std::isnan(h2f[i]) : (h2f[i] == want && std::signbit(h2f[i]) == std::signbit(want));
      if (!same) return fmt::format("f16 bits 0x{:04x}: got {}, want {}", i, h2f[i], want);
      const float v = x[i];
      uint16_t wh = to_f16_bits(v), wb = codegen::bf16_bits(ir::round_float(ir::Scalar::kBF16, v));
      bool nan = std::isnan(v);
      bool h_ok = nan ? ((f2h[i] & 0x7C00) == 0x7C00 && (f2h[i] & 0x3FF) != 0) : f2h[i] == wh;
      bool b_ok = nan ? ((f2b[i] & 0x7F80) == 0x7F80 && (f2b[i] & 0x7F) != 0) : f2b[i] == wb;
      if (!h_ok) return fmt::format("f16 of {} ({:a}): got 0x{:04x}, want 0x{:04x}", v, v, f2h[i], wh);
      if (!b_ok) return fmt::format("bf16 of {} ({:a}): got 0x{:04x}, want 0x{:04x}", v, v, f2b[i], wb);
    }
    return "";
  };
  return run;
}

GoldenRun dot4_lanes(std::mt19937& rng) {
  const int rows = uniform_int(rng, 5, 150);
  std::vector<int8_t> a(static_cast<size_t>(rows) * 32), x(32);
  for (auto& v : a) v = static_cast<int8_t>(uniform_int(rng, -128, 127));
  for (auto& v : x) v = static_cast<int8_t>(uniform_int(rng, -128, 127));
  std::vector<uint16_t> h(static_cast<size_t>(rows) * 8);
  for (auto& v : h) v = to_f16_bits(random_floats(rng, 1, -2, 2)[0] * (uniform_int(rng, 0, 3) ? 1e-4f : 1.0f));
  GoldenRun run;
  run.buffers = {to_bytes(a), to_bytes(x), to_bytes(h), output(rows * 64), output(rows * 32), output(rows * 16)};
  run.args = {buf(0), buf(1), buf(2), buf(3), buf(4), buf(5), scalar<int32_t>(rows)};
  run.block = {32, 1, 1};
  run.grid = {blocks_for(rows, 32), 1, 1};
  run.check = [a, x, h, rows](const std::vector<std::vector<uint8_t>>& out) -> std::string {
    auto lanes = from_bytes<int32_t>(out[3]);
    auto f = from_bytes<uint32_t>(out[4]);
    auto fh = from_bytes<uint16_t>(out[5]);
    for (int r = 0; r < rows; ++r)
      for (int l = 0; l < 8; ++l) {
        int32_t s = 0, u = 0;
        for (int j = 0; j < 4; ++j) {
          const int8_t w = a[static_cast<size_t>(r) * 32 + 4 * l + j];
          s += int32_t{w} * x[4 * l + j];
          u += int32_t{static_cast<int8_t>(w & 0x7F)} * x[4 * l + j];
        }
        u += s;
        const size_t i = static_cast<size_t>(r) * 8 + l;
        if (lanes[static_cast<size_t>(r) * 16 + l] != s)
          return fmt::format("row {} lane {}: dot4 {} != {}", r, l, lanes[static_cast<size_t>(r) * 16 + l], s);
        if (lanes[static_cast<size_t>(r) * 16 + 8 + l] != u)
          return fmt::format("row {} lane {}: 7-bit dot4 {} != {}", r, l, lanes[static_cast<size_t>(r) * 16 + 8 + l], u);
        const float hf = from_f16_bits(h[i]);
        const float g = std::fma(hf, static_cast<float>(u), hf);
        uint32_t gb;
        std::memcpy(&gb, &g, 4);
        if (f[i] != gb) return fmt::format("row {} lane {}: fma bits 0x{:08x} != 0x{:08x}", r, l, f[i], gb);
        if (fh[i] != to_f16_bits(g)) return fmt::format("row {} lane {}: f16 0x{:04x} != 0x{:04x}", r, l, fh[i], to_f16_bits(g));
      }
    return "";
  };
  return run;
}

// See wgmma_tile.loom: d = a b^T (64 x 32 f16 each, f32 out) per tile on the warpgroup MMA (and
// wgmma_rs_tile.loom: the same with A's fragments in registers).
// Small integers times powers of two keep every product and sum exact in f32.
GoldenRun wgmma_tile(std::mt19937& rng) {
  const int tiles = uniform_int(rng, 1, 4);
  std::vector<uint16_t> a(static_cast<size_t>(tiles) * 2048), b(a.size());
  for (auto& v : a) v = to_f16_bits(static_cast<float>(uniform_int(rng, -8, 8)) / 8.0f);
  for (auto& v : b) v = to_f16_bits(static_cast<float>(uniform_int(rng, -6, 6)) / 4.0f);
  GoldenRun run;
  run.buffers = {to_bytes(a), to_bytes(b), output(static_cast<size_t>(tiles) * 4096 * 4)};
  run.args = {buf(0), buf(1), buf(2)};
  run.block = {128, 1, 1};
  run.grid = {static_cast<uint32_t>(tiles), 1, 1};
  run.check = [a, b, tiles](const std::vector<std::vector<uint8_t>>& out) -> std::string {
    auto got = from_bytes<float>(out[2]);
    for (int t = 0; t < tiles; ++t)
      for (int m = 0; m < 64; ++m)
        for (int n = 0; n < 64; ++n) {
          float want = 0;
          for (int k = 0; k < 32; ++k)
            want += from_f16_bits(a[static_cast<size_t>(t * 2048 + m * 32 + k)]) * from_f16_bits(b[static_cast<size_t>(t * 2048 + n * 32 + k)]);
          const float g = got[static_cast<size_t>(t * 4096 + m * 64 + n)];
          if (g != want) return fmt::format("tile {} row {} column {}: got {}, want {}", t, m, n, g, want);
        }
    return "";
  };
  return run;
}

// See int_div_pow2.loom: C's / and % (toward zero; the remainder has the dividend's sign) by 1, 2,
// 8 and 2^30 on i32, by 16 on u32 and by 4 on i64, on random values and the extremes.
GoldenRun int_div_pow2(std::mt19937& rng) {
  const int n = uniform_int(rng, 200, 3000);
  std::vector<int32_t> a(static_cast<size_t>(n));
  std::vector<uint32_t> u(static_cast<size_t>(n));
  const int32_t edges[] = {0, 1, -1, 2, -2, 7, -7, 8, -8, 9, -9, INT32_MAX, INT32_MIN, INT32_MIN + 1, 1 << 30, -(1 << 30)};
  for (int i = 0; i < n; ++i) {
    a[static_cast<size_t>(i)] = i < 16 ? edges[i] : static_cast<int32_t>(rng());
    u[static_cast<size_t>(i)] = i < 2 ? (i ? UINT32_MAX : 0u) : static_cast<uint32_t>(rng());
  }
  GoldenRun run;
  run.buffers = {to_bytes(a), to_bytes(u), output(static_cast<size_t>(n) * 48)};
  run.args = {buf(0), buf(1), buf(2), scalar<int32_t>(n)};
  run.block = {128, 1, 1};
  run.grid = {blocks_for(n, 128), 1, 1};
  run.check = [a, u, n](const std::vector<std::vector<uint8_t>>& out) -> std::string {
    auto d = from_bytes<int32_t>(out[2]);
    for (int i = 0; i < n; ++i) {
      const int64_t x = a[static_cast<size_t>(i)];
      const uint32_t y = u[static_cast<size_t>(i)];
      const int64_t want[12] = {x, 0, x / 2, x % 2, x / 8, x % 8, x / (1 << 30), x % (1 << 30),
                                static_cast<int32_t>(y / 16), static_cast<int32_t>(y % 16), x / 4, x % 4};
      for (int j = 0; j < 12; ++j)
        if (d[static_cast<size_t>(12 * i + j)] != static_cast<int32_t>(want[j]))
          return fmt::format("element {} (x = {}, u = {}) result {}: got {}, want {}", i, x, y, j, d[static_cast<size_t>(12 * i + j)],
                             want[j]);
    }
    return "";
  };
  return run;
}

// See amx_tile.loom: two signed-byte tile products summed, one bf16 tile product. Small
// integers keep every bf16 value and f32 sum exact.
GoldenRun amx_tile(std::mt19937& rng) {
  const int tiles = uniform_int(rng, 1, 5);
  std::vector<int8_t> a(static_cast<size_t>(tiles) * 2048), b(a.size());
  for (auto& v : a) v = static_cast<int8_t>(uniform_int(rng, -128, 127));
  for (auto& v : b) v = static_cast<int8_t>(uniform_int(rng, -128, 127));
  std::vector<uint16_t> fa(static_cast<size_t>(tiles) * 512), fb(fa.size());
  auto bf16 = [](int v) {  // small integers are exact in bf16: the top half of their f32 bits
    float f = static_cast<float>(v);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>(u >> 16);
  };
  std::vector<int> fav(fa.size()), fbv(fb.size());
  for (size_t i = 0; i < fa.size(); ++i) fa[i] = bf16(fav[i] = uniform_int(rng, -8, 8));
  for (size_t i = 0; i < fb.size(); ++i) fb[i] = bf16(fbv[i] = uniform_int(rng, -8, 8));
  GoldenRun run;
  const size_t outs = static_cast<size_t>(tiles) * 256 * 4;
  run.buffers = {to_bytes(a), to_bytes(b), output(outs), to_bytes(fa), to_bytes(fb), output(outs)};
  run.args = {buf(0), buf(1), buf(2), buf(3), buf(4), buf(5)};
  run.block = {1, 1, 1};
  run.grid = {static_cast<uint32_t>(tiles), 1, 1};
  run.check = [a, b, fav, fbv, tiles](const std::vector<std::vector<uint8_t>>& out) -> std::string {
    auto c = from_bytes<int32_t>(out[2]);
    auto fc = from_bytes<float>(out[5]);
    for (int t = 0; t < tiles; ++t)
      for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 16; ++n) {
          int32_t want = 0;
          for (int h = 0; h < 2; ++h)
            for (int k = 0; k < 64; ++k) {
              const size_t base = static_cast<size_t>(t * 2048 + h * 1024);
              want += a[base + static_cast<size_t>(m * 64 + k)] * b[base + static_cast<size_t>(k / 4 * 64 + 4 * n + k % 4)];
            }
          const int32_t got = c[static_cast<size_t>(t * 256 + m * 16 + n)];
          if (got != want) return fmt::format("tile {} i8 row {} column {}: got {}, want {}", t, m, n, got, want);
          float fwant = 0;
          for (int k = 0; k < 32; ++k)
            fwant += static_cast<float>(fav[static_cast<size_t>(t * 512 + m * 32 + k)] *
                                        fbv[static_cast<size_t>(t * 512 + k / 2 * 32 + 2 * n + k % 2)]);
          const float fgot = fc[static_cast<size_t>(t * 256 + m * 16 + n)];
          if (fgot != fwant) return fmt::format("tile {} bf16 row {} column {}: got {}, want {}", t, m, n, fgot, fwant);
        }
    return "";
  };
  return run;
}

}  // namespace

const std::vector<GoldenCase>& golden_cases() {
  static const std::vector<GoldenCase> cases = {
      {"vector_add", true, vector_add},
      {"reduce_rows", true, reduce_rows},
      {"softmax_rows", true, softmax_rows},
      {"rms_norm", true, rms_norm},
      {"matmul_tiled", true, matmul_tiled},
      {"matvec_q4_0", true, matvec_q4_0},
      {"matvec_i8", true, matvec_i8},
      {"transpose_shared", true, transpose_shared},
      {"histogram", true, histogram},
      {"dynamic_shared", true, dynamic_shared},
      {"mixed_ops", true, mixed_ops},
      {"convert_half", true, convert_half},
      {"dot4_lanes", true, dot4_lanes},
      {"warp_sum", false, warp_sum},
      {"warp_ops", false, warp_ops},
      {"mma_tile", false, mma_tile},
      {"mma_s8_tile", false, mma_s8_tile},
      {"ldmatrix_tile", false, ldmatrix_tile},
      {"async_copy_tile", true, async_copy_tile},
      {"ldmatrix_t_tile", false, ldmatrix_t_tile},
      {"wgmma_tile", false, wgmma_tile},
      {"wgmma_rs_tile", false, wgmma_tile},  // the same product, A from registers
      {"int_div_pow2", true, int_div_pow2},
      {"amx_tile", true, amx_tile, true},
  };
  return cases;
}

}  // namespace loom::test
