// Unit tests of the reference CPU ops (ops_ref.h): SIMD vs scalar bit-identity of the dot
// products, integer-path matmul vs dequantized float math, rope/softmax/attention properties,
// activation functions, and the thread pool's determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "loom/base/thread_pool.h"
#include "loom/gguf/ggml_types.h"
#include "loom/gguf/quant.h"
#include "loom/model/program.h"
#include "loom/ref/ops_ref.h"
#include "loom/ref/ops_ref_dot_impl.h"
#include "loom/ref/ops_ref_util.h"

namespace loom::llm {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = dist(rng);
    if (x == 0.0f) x = 1e-3f;  // never zeros
  }
  return v;
}

std::vector<uint8_t> quantized(GgmlType type, const std::vector<float>& x) {
  std::vector<uint8_t> out(row_bytes(type, static_cast<int64_t>(x.size())));
  EXPECT_TRUE(quantize(type, x.data(), out.data(), static_cast<int64_t>(x.size())).ok());
  return out;
}

std::vector<uint8_t> activation(GgmlType weight_type, const std::vector<float>& x) {
  GgmlType dot = *ref::vec_dot_type(weight_type);
  std::vector<uint8_t> out(ref::quantized_row_bytes(dot, static_cast<int64_t>(x.size())));
  ref::quantize_activation(dot, x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::F16, GgmlType::BF16};

float scalar_dot(GgmlType t, const void* w, const void* x, int64_t n) {
  switch (t) {
    case GgmlType::Q4_0: return ref::scalar::dot_q4_0(w, x, n);
    case GgmlType::Q4_1: return ref::scalar::dot_q4_1(w, x, n);
    case GgmlType::Q5_0: return ref::scalar::dot_q5_0(w, x, n);
    case GgmlType::Q5_1: return ref::scalar::dot_q5_1(w, x, n);
    case GgmlType::Q8_0: return ref::scalar::dot_q8_0(w, x, n);
    case GgmlType::Q4_K: return ref::scalar::dot_q4_K(w, x, n);
    case GgmlType::Q5_K: return ref::scalar::dot_q5_K(w, x, n);
    case GgmlType::Q6_K: return ref::scalar::dot_q6_K(w, x, n);
    case GgmlType::F16:
      return ref::scalar::dot_f16(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(x), n);
    case GgmlType::BF16:
      return ref::scalar::dot_bf16(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(x), n);
    default: return NAN;
  }
}

TEST(OpsRefDot, FastPathIsBitIdenticalToScalarDefinition) {
  for (GgmlType t : kTypes) {
    for (int trial = 0; trial < 20; ++trial) {
      const int64_t n = 256 * (1 + trial % 3) + (t == GgmlType::F16 || t == GgmlType::BF16 ? 8 * (trial % 4) : 0);
      auto w = quantized(t, random_floats(n, 100 + trial, 0.5f + trial));
      auto x = activation(t, random_floats(n, 200 + trial, 2.0f));
      const float a = scalar_dot(t, w.data(), x.data(), n);
      const float b = ref::vec_dot(t, w.data(), x.data(), n);
      uint32_t ab, bb;
      std::memcpy(&ab, &a, 4);
      std::memcpy(&bb, &b, 4);
      EXPECT_EQ(ab, bb) << ggml_type_name(t) << " trial " << trial << ": " << a << " vs " << b;
    }
  }
#if !LOOM_REF_DOT_AVX2
  GTEST_SKIP() << "built without AVX2/FMA/F16C: only the scalar path exists (compared with itself)";
#endif
}

// The vector argmax gives the scalar definition's index: ties (first wins), -0.0 against +0.0,
// NaNs anywhere (never chosen; at index 0 the answer is 0), infinities, and every tail length.
TEST(OpsRefArgmax, VectorMatchesScalarDefinition) {
  std::mt19937 rng(11);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 64, 1000, 49152 + 5}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      std::uniform_int_distribution<int> small(-3, 3);
      for (auto& v : x) v = trial % 2 ? static_cast<float>(small(rng)) : std::normal_distribution<float>(0, 1)(rng);
      std::uniform_int_distribution<int64_t> at(0, n - 1);
      if (trial % 5 == 1) x[static_cast<size_t>(at(rng))] = nan;
      if (trial % 5 == 2) x[0] = nan;
      if (trial % 5 == 3) x[static_cast<size_t>(at(rng))] = inf;
      if (trial % 7 == 4) std::fill(x.begin(), x.end(), -0.0f), x[static_cast<size_t>(at(rng))] = 0.0f;
      if (trial % 11 == 5) std::fill(x.begin(), x.end(), nan);
      ASSERT_EQ(ref::argmax(x.data(), n), ref::argmax_scalar(x.data(), n)) << "n " << n << " trial " << trial;
    }
  }
}

TEST(OpsRefDot, IntegerPathMatchesDequantizedFloatMath) {
  for (GgmlType t : kTypes) {
    const int64_t n = 512;
    auto wf = random_floats(n, 7, 1.0f);
    auto xf = random_floats(n, 8, 1.0f);
    auto w = quantized(t, wf);
    std::vector<float> wd(n);
    ASSERT_TRUE(dequantize(t, w.data(), wd.data(), n).ok());
    double exact = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      exact += static_cast<double>(wd[i]) * xf[i];
      mag += std::fabs(static_cast<double>(wd[i]) * xf[i]);
    }
    const float got = ref::vec_dot(t, w.data(), activation(t, xf).data(), n);
    // The only extra error is the 8-bit (or fp16) rounding of the activations.
    EXPECT_NEAR(got, exact, 0.01 * mag) << ggml_type_name(t);
    EXPECT_NE(got, 0.0f);
  }
}

// The formats read from files only (no AVX2 version; IQ4 without a quantizer): random valid
// blocks (random quants, small finite scales), the integer path against the dequantized weights.
TEST(OpsRefDot, FileOnlyFormatsMatchDequantizedFloatMath) {
  struct Case {
    GgmlType type;
    std::vector<int> f16_fields;  // byte offsets of the block's fp16 scales
  };
  const Case cases[] = {{GgmlType::Q2_K, {80, 82}}, {GgmlType::Q3_K, {108}}, {GgmlType::IQ4_NL, {0}},
                        {GgmlType::IQ4_XS, {0}}};
  std::mt19937 rng(5);
  for (const Case& c : cases) {
    const auto info = *ggml_type_info(static_cast<uint32_t>(c.type));
    for (int64_t n : {int64_t{256}, int64_t{1024}, int64_t{768}}) {
      std::vector<uint8_t> w(row_bytes(c.type, n));
      for (auto& v : w) v = static_cast<uint8_t>(rng());
      for (size_t b = 0; b < w.size(); b += info.block_bytes)
        for (int off : c.f16_fields) {
          const uint16_t h = fp32_to_fp16(std::uniform_real_distribution<float>(0.001f, 0.01f)(rng));
          std::memcpy(&w[b + static_cast<size_t>(off)], &h, 2);
        }
      std::vector<float> wd(static_cast<size_t>(n));
      ASSERT_TRUE(dequantize(c.type, w.data(), wd.data(), n).ok());
      auto xf = random_floats(static_cast<size_t>(n), 9, 1.0f);
      auto xq = activation(c.type, xf);
      // Against the dequantized activations too: then only float rounding separates the two.
      const GgmlType dt = *ref::vec_dot_type(c.type);
      std::vector<float> xd(static_cast<size_t>(n));
      ASSERT_TRUE(dequantize(dt, xq.data(), xd.data(), n).ok());
      double exact = 0.0, mag = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        exact += static_cast<double>(wd[static_cast<size_t>(i)]) * xd[static_cast<size_t>(i)];
        mag += std::fabs(static_cast<double>(wd[static_cast<size_t>(i)]) * xd[static_cast<size_t>(i)]);
      }
      const float got = ref::vec_dot(c.type, w.data(), xq.data(), n);
      EXPECT_NEAR(got, exact, 1e-5 * mag + 1e-6) << ggml_type_name(c.type) << " n " << n;
      EXPECT_GT(mag, 0.0);
    }
  }
  // An odd number of IQ4_NL blocks (the last one outside the paired lanes).
  const int64_t n = 96;
  std::vector<uint8_t> w(row_bytes(GgmlType::IQ4_NL, n));
  for (auto& v : w) v = static_cast<uint8_t>(rng());
  for (size_t b = 0; b < w.size(); b += 18) {
    const uint16_t h = fp32_to_fp16(0.005f);
    std::memcpy(&w[b], &h, 2);
  }
  std::vector<float> wd(n), xd(n);
  ASSERT_TRUE(dequantize(GgmlType::IQ4_NL, w.data(), wd.data(), n).ok());
  auto xq = activation(GgmlType::IQ4_NL, random_floats(n, 10, 1.0f));
  ASSERT_TRUE(dequantize(GgmlType::Q8_0, xq.data(), xd.data(), n).ok());
  double exact = 0.0;
  for (int64_t i = 0; i < n; ++i) exact += static_cast<double>(wd[i]) * xd[i];
  EXPECT_NEAR(ref::vec_dot(GgmlType::IQ4_NL, w.data(), xq.data(), n), exact, 1e-4 * std::fabs(exact) + 1e-5);
}

TEST(OpsRefDot, VecDotTypesFollowGgml) {
  EXPECT_EQ(*ref::vec_dot_type(GgmlType::IQ4_NL), GgmlType::Q8_0);
  EXPECT_EQ(*ref::vec_dot_type(GgmlType::IQ4_XS), GgmlType::Q8_K);
  EXPECT_EQ(*ref::vec_dot_type(GgmlType::Q2_K), GgmlType::Q8_K);
  EXPECT_EQ(*ref::vec_dot_type(GgmlType::Q3_K), GgmlType::Q8_K);
  EXPECT_EQ(*ref::vec_dot_type(GgmlType::Q4_0), GgmlType::Q8_0);
  EXPECT_EQ(*ref::vec_dot_type(GgmlType::Q5_0), GgmlType::Q8_0);
  EXPECT_EQ(*ref::vec_dot_type(GgmlType::Q4_1), GgmlType::Q8_1);
  EXPECT_EQ(*ref::vec_dot_type(GgmlType::Q6_K), GgmlType::Q8_K);
  EXPECT_EQ(*ref::vec_dot_type(GgmlType::F16), GgmlType::F16);
  EXPECT_EQ(*ref::vec_dot_type(GgmlType::BF16), GgmlType::BF16);
  auto bad = ref::vec_dot_type(GgmlType::IQ2_XS);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("iq2_xs"), std::string::npos);
}

TEST(OpsRefDot, Bf16SumsInGgmlOrder) {
  // 32 elements, one per lane and accumulator: lane l of accumulator j holds x[8j + l] * 1.
  // Values picked so that float addition order matters (1e8 swallows 1 unless paired first).
  std::vector<float> xf(32, 0.0f), ones(32, 1.0f);
  xf[0] = 1e8f;   // acc 0, lane 0
  xf[16] = -1e8f; // acc 2, lane 0: cancels acc 0 first, in (0+2)
  xf[8] = 1.0f;   // acc 1, lane 0
  xf[4] = 3.0f;   // acc 0, lane 4
  std::vector<uint16_t> x(32), y(32);
  for (int i = 0; i < 32; ++i) {
    x[i] = fp32_to_bf16(xf[i]);
    y[i] = fp32_to_bf16(ones[i]);
  }
  EXPECT_EQ(ref::vec_dot(GgmlType::BF16, x.data(), y.data(), 32), 4.0f);
  // Leftovers past the 32-element steps are added in double.
  std::vector<uint16_t> x2(40, fp32_to_bf16(0.5f)), y2(40, fp32_to_bf16(2.0f));
  EXPECT_EQ(ref::vec_dot(GgmlType::BF16, x2.data(), y2.data(), 40), 40.0f);
}

TEST(OpsRefQuantize, Bf16ActivationsRoundToNearestEven) {
  // 1 + 2^-8 is halfway between two bf16 values (1 and 1 + 2^-7): ties to the even one (1).
  const float x[4] = {1.0f + 0x1p-8f, 1.0f + 0x1.8p-7f, -2.0f, NAN};
  uint16_t h[4];
  ref::quantize_activation(GgmlType::BF16, x, h, 4);
  EXPECT_EQ(h[0], 0x3F80);
  EXPECT_EQ(h[1], 0x3F82);  // 1 + 1.5 * 2^-7: tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even)
  EXPECT_EQ(h[2], 0xC000);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(h[3])));
}

TEST(OpsRefQuantize, Q8ActivationsRoundHalfToEvenWithScale127OverMax) {
  // amax = 127 makes the multiplier exactly 1, so x.5 values show the tie rule.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -2.5f;
  x[4] = 0.4f;
  std::vector<uint8_t> q(ref::quantized_row_bytes(GgmlType::Q8_1, 32));
  ref::quantize_activation(GgmlType::Q8_1, x.data(), q.data(), 32);
  const int8_t* qs = reinterpret_cast<const int8_t*>(q.data() + 4);
  EXPECT_EQ(qs[0], 127);
  EXPECT_EQ(qs[1], 2);
  EXPECT_EQ(qs[2], 4);
  EXPECT_EQ(qs[3], -2);
  EXPECT_EQ(qs[4], 0);
  uint16_t d, s;
  std::memcpy(&d, q.data(), 2);
  std::memcpy(&s, q.data() + 2, 2);
  EXPECT_EQ(fp16_to_fp32(d), 1.0f);
  EXPECT_EQ(fp16_to_fp32(s), 131.0f);  // d * (127 + 2 + 4 - 2)
}

TEST(OpsRefMatmul, ResultDoesNotDependOnThreadCount) {
  const int64_t n_in = 256, n_out = 37, n_tok = 5;
  auto wf = random_floats(n_in * n_out, 11);
  std::vector<uint8_t> w(row_bytes(GgmlType::Q4_K, n_in) * n_out);
  for (int64_t r = 0; r < n_out; ++r)
    ASSERT_TRUE(quantize(GgmlType::Q4_K, wf.data() + r * n_in, w.data() + r * row_bytes(GgmlType::Q4_K, n_in), n_in).ok());
  ref::WeightView view{GgmlType::Q4_K, w.data(), n_in, n_out, row_bytes(GgmlType::Q4_K, n_in)};
  auto x = random_floats(n_in * n_tok, 12);
  std::vector<float> y1(n_out * n_tok), y3(n_out * n_tok);
  std::vector<uint8_t> scratch;
  ThreadPool p1(1), p3(3);
  ASSERT_TRUE(ref::matmul(view, x.data(), n_tok, y1.data(), &p1, &scratch).ok());
  ASSERT_TRUE(ref::matmul(view, x.data(), n_tok, y3.data(), &p3, &scratch).ok());
  EXPECT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)));
  // Each row equals the single-row dot product.
  auto xq = activation(GgmlType::Q4_K, std::vector<float>(x.begin() + n_in * 2, x.begin() + n_in * 3));
  EXPECT_EQ(y1[2 * n_out + 5], ref::vec_dot(GgmlType::Q4_K, view.row(5), xq.data(), n_in));
}

TEST(OpsRefMatmul, RejectsRowsThatAreNotWholeBlocks) {
  std::vector<uint8_t> w(1024);
  ref::WeightView view{GgmlType::Q4_K, w.data(), 100, 2, 100};
  std::vector<float> x(100), y(2);
  std::vector<uint8_t> scratch;
  EXPECT_FALSE(ref::matmul(view, x.data(), 1, y.data(), nullptr, &scratch).ok());
}

TEST(OpsRefNorm, RmsNormGivesUnitRmsAndAppliesWeight) {
  auto x = random_floats(2 * 64, 3, 5.0f);
  std::vector<float> y(x.size()), w(64, 2.0f), yw(x.size());
  ref::rms_norm(x.data(), nullptr, y.data(), 2, 64, 1e-6f);
  ref::rms_norm(x.data(), w.data(), yw.data(), 2, 64, 1e-6f);
  for (int r = 0; r < 2; ++r) {
    double ss = 0;
    for (int i = 0; i < 64; ++i) ss += y[r * 64 + i] * y[r * 64 + i];
    EXPECT_NEAR(std::sqrt(ss / 64), 1.0, 1e-4);
  }
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(yw[i], y[i] * 2.0f);
}

TEST(OpsRefSoftmax, SumsToOneAndRespectsMask) {
  auto x = random_floats(37, 4, 3.0f);
  std::vector<float> mask(37, 0.0f);
  mask[5] = mask[30] = -INFINITY;
  ASSERT_TRUE(ref::softmax(x.data(), mask.data(), 37, 0.5f));
  double sum = 0;
  for (float v : x) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_EQ(x[5], 0.0f);
  EXPECT_EQ(x[30], 0.0f);
  std::vector<float> all(4, 1.0f), m(4, -INFINITY);
  EXPECT_FALSE(ref::softmax(all.data(), m.data(), 4, 1.0f));
}

TEST(OpsRefSoftmax, ShiftInvariant) {
  auto a = random_floats(20, 5);
  auto b = a;
  for (auto& v : b) v += 3.0f;
  ref::softmax(a.data(), nullptr, 20, 1.0f);
  ref::softmax(b.data(), nullptr, 20, 1.0f);
  for (int i = 0; i < 20; ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
}

TEST(OpsRefActivations, ExpAndGeluFollowTheirDefinitions) {
  for (float x : {-20.0f, -3.3f, -0.5f, 0.0f, 0.7f, 5.0f, 30.0f}) {
    EXPECT_NEAR(ref::expf_ggml(x), std::exp(x), std::exp(x) * 3e-7f) << x;
    EXPECT_NEAR(ref::gelu_ggml(x), ref::gelu_tanh(x), 2e-3f * std::max(1.0f, std::fabs(x))) << x;
  }
  EXPECT_EQ(ref::expf_ggml(-INFINITY), 0.0f);
  EXPECT_EQ(ref::gelu_ggml(-12.0f), 0.0f);
  EXPECT_EQ(ref::gelu_ggml(12.0f), 12.0f);
  // The table stores fp16 values: every result is representable in fp16.
  const float g = ref::gelu_ggml(0.8123f);
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(g)), g);
  std::vector<float> gate{1.5f, -2.0f}, up{2.0f, 3.0f}, y(2);
  ref::swiglu(gate.data(), up.data(), y.data(), 2);
  EXPECT_NEAR(y[0], 1.5f / (1.0f + std::exp(-1.5f)) * 2.0f, 1e-6);
  ref::geglu(gate.data(), up.data(), y.data(), 2);
  EXPECT_NEAR(y[1], ref::gelu_tanh(-2.0f) * 3.0f, 1e-2);
}

TEST(OpsRefRope, PositionZeroIsIdentityAndRotationPreservesPairNorms) {
  for (ref::RopeMode mode : {ref::RopeMode::kNormal, ref::RopeMode::kNeox}) {
    ref::RopeParams p;
    p.mode = mode;
    p.n_dims = 16;
    p.freq_base = 10000.0f;
    auto x = random_floats(2 * 16, 6);
    auto y = x;
    int32_t pos[2] = {0, 0};
    ref::rope(y.data(), 1, 2, 16, pos, p);
    EXPECT_EQ(x, y);
    int32_t pos7[1] = {7};
    ref::rope(y.data(), 1, 2, 16, pos7, p);
    EXPECT_NE(x, y);
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 8; ++i) {
        const int a = mode == ref::RopeMode::kNeox ? i : 2 * i;
        const int b = mode == ref::RopeMode::kNeox ? i + 8 : 2 * i + 1;
        const float n0 = std::hypot(x[h * 16 + a], x[h * 16 + b]);
        const float n1 = std::hypot(y[h * 16 + a], y[h * 16 + b]);
        EXPECT_NEAR(n0, n1, 1e-5f * std::max(1.0f, n0));
      }
  }
}

TEST(OpsRefRope, ScoresDependOnlyOnRelativePosition) {
  ref::RopeParams p;
  p.mode = ref::RopeMode::kNeox;
  p.n_dims = 32;
  p.freq_base = 10000.0f;
  auto q = random_floats(32, 21), k = random_floats(32, 22);
  auto score = [&](int pq, int pk) {
    auto a = q, b = k;
    ref::rope(a.data(), 1, 1, 32, &pq, p);
    ref::rope(b.data(), 1, 1, 32, &pk, p);
    return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
  };
  EXPECT_NEAR(score(10, 7), score(23, 20), 1e-3);
  EXPECT_GT(std::fabs(score(10, 7) - score(10, 0)), 1e-3);
  // Linear scaling: freq_scale 0.5 at position 2p rotates like scale 1 at position p.
  ref::RopeParams half = p;
  half.freq_scale = 0.5f;
  auto a = q, b = q;
  int32_t p6 = 6, p12 = 12;
  ref::rope(a.data(), 1, 1, 32, &p6, p);
  ref::rope(b.data(), 1, 1, 32, &p12, half);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(a[i], b[i], 1e-4);
}

// A small F16 cache with n cells for one kv head.
struct Cache {
  int64_t n;
  int d;
  std::vector<uint16_t> k, v;
  Cache(int64_t cells, int dim, uint32_t seed) : n(cells), d(dim), k(cells * dim), v(cells * dim) {
    auto kf = random_floats(cells * dim, seed), vf = random_floats(cells * dim, seed + 1);
    ref::to_fp16(kf.data(), k.data(), cells * dim);
    ref::to_fp16(vf.data(), v.data(), cells * dim);
  }
};

TEST(OpsRefAttention, SingleCellReturnsItsValue) {
  Cache c(1, 32, 30);
  auto q = random_floats(32, 31);
  std::vector<float> out(32);
  ref::AttentionParams p{1, 1, 32, 32, 0.2f, 0.0f, 0};
  int32_t pos = 0;
  ASSERT_TRUE(ref::attention(q.data(), &pos, 1, c.k.data(), c.v.data(), 1, p, out.data(), nullptr).ok());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], fp16_to_fp32(c.v[i]));
}

TEST(OpsRefAttention, CausalAndSlidingWindowMasks) {
  Cache c(8, 16, 40);
  auto q = random_floats(16, 41);
  ref::AttentionParams p{1, 1, 16, 16, 0.25f, 0.0f, 0};
  std::vector<float> a(16), b(16);
  int32_t pos = 3;
  ASSERT_TRUE(ref::attention(q.data(), &pos, 1, c.k.data(), c.v.data(), 8, p, a.data(), nullptr).ok());
  // Cells after the query's position must not matter.
  Cache c2 = c;
  for (int64_t j = 4 * 16; j < 8 * 16; ++j) c2.v[j] = fp32_to_fp16(100.0f);
  ASSERT_TRUE(ref::attention(q.data(), &pos, 1, c2.k.data(), c2.v.data(), 8, p, b.data(), nullptr).ok());
  EXPECT_EQ(a, b);
  // With a window of 2, cells 0 and 1 no longer matter for position 3 (but do without it).
  p.n_swa = 2;
  ASSERT_TRUE(ref::attention(q.data(), &pos, 1, c.k.data(), c.v.data(), 8, p, a.data(), nullptr).ok());
  Cache c3 = c;
  for (int64_t j = 0; j < 2 * 16; ++j) c3.v[j] = fp32_to_fp16(-50.0f);
  ASSERT_TRUE(ref::attention(q.data(), &pos, 1, c3.k.data(), c3.v.data(), 8, p, b.data(), nullptr).ok());
  EXPECT_EQ(a, b);
  p.n_swa = 0;
  ASSERT_TRUE(ref::attention(q.data(), &pos, 1, c3.k.data(), c3.v.data(), 8, p, b.data(), nullptr).ok());
  EXPECT_NE(a, b);
}

TEST(OpsRefAttention, GroupedQueryHeadsShareKvHeads) {
  // Two kv heads, four query heads: heads 0,1 read kv head 0; heads 2,3 read kv head 1.
  const int d = 16;
  Cache c(3, 2 * d, 50);
  auto q1 = random_floats(d, 51);
  std::vector<float> q(4 * d);
  for (int h = 0; h < 4; ++h) std::copy(q1.begin(), q1.end(), q.begin() + h * d);
  ref::AttentionParams p{4, 2, d, d, 0.25f, 0.0f, 0};
  std::vector<float> out(4 * d);
  int32_t pos = 2;
  ASSERT_TRUE(ref::attention(q.data(), &pos, 1, c.k.data(), c.v.data(), 3, p, out.data(), nullptr).ok());
  EXPECT_TRUE(std::equal(out.begin(), out.begin() + d, out.begin() + d));
  EXPECT_TRUE(std::equal(out.begin() + 2 * d, out.begin() + 3 * d, out.begin() + 3 * d));
  EXPECT_FALSE(std::equal(out.begin(), out.begin() + d, out.begin() + 2 * d));
  ref::AttentionParams bad{3, 2, d, d, 1.0f, 0.0f, 0};
  EXPECT_FALSE(ref::attention(q.data(), &pos, 1, c.k.data(), c.v.data(), 3, bad, out.data(), nullptr).ok());
}

// matmul_q8_1 (the integer tensor-core matmul's definition) against float math on the
// dequantized weights and activations: the same products, summed in another order.
TEST(OpsRefMatmulQ8_1, MatchesDequantizedProducts) {
  const int64_t n_in = 512, n_out = 9, n_tok = 3;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    SCOPED_TRACE(ggml_type_name(t));
    const size_t wrow = row_bytes(t, n_in), xrow = row_bytes(GgmlType::Q8_1, n_in);
    std::vector<uint8_t> w(wrow * n_out), x(xrow * n_tok);
    std::vector<float> wf = random_floats(static_cast<size_t>(n_in * n_out), 7), xf = random_floats(static_cast<size_t>(n_in * n_tok), 8);
    for (int64_t r = 0; r < n_out; ++r) ASSERT_TRUE(quantize(t, wf.data() + r * n_in, w.data() + r * wrow, n_in).ok());
    for (int64_t k = 0; k < n_tok; ++k) ASSERT_TRUE(quantize(GgmlType::Q8_1, xf.data() + k * n_in, x.data() + k * xrow, n_in).ok());
    std::vector<float> wd(static_cast<size_t>(n_in)), xd(static_cast<size_t>(n_in)), y(static_cast<size_t>(n_out * n_tok));
    ASSERT_TRUE(ref::matmul_q8_1(ref::WeightView{t, w.data(), n_in, n_out, wrow}, x.data(), n_tok, y.data(), nullptr).ok());
    for (int64_t k = 0; k < n_tok; ++k) {
      ASSERT_TRUE(dequantize(GgmlType::Q8_1, x.data() + k * xrow, xd.data(), n_in).ok());
      for (int64_t r = 0; r < n_out; ++r) {
        ASSERT_TRUE(dequantize(t, w.data() + r * wrow, wd.data(), n_in).ok());
        double want = 0, mag = 0;
        for (int64_t i = 0; i < n_in; ++i) {
          want += static_cast<double>(wd[static_cast<size_t>(i)]) * xd[static_cast<size_t>(i)];
          mag += std::fabs(static_cast<double>(wd[static_cast<size_t>(i)]) * xd[static_cast<size_t>(i)]);
        }
        // Q4_K's min term reads the activation block's sum as the f16 that Q8_1 stores.
        const double rel = t == GgmlType::Q4_K ? 2e-4 : 1e-5;
        EXPECT_NEAR(y[static_cast<size_t>(k * n_out + r)], want, rel * mag + 1e-6) << "token " << k << " row " << r;
      }
    }
  }
}

TEST(ThreadPool, EveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000}) {
      for (int64_t grain : {1, 4, 16}) {
        std::vector<int> hits(static_cast<size_t>(n), 0);
        pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
        }, grain);
        EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }))
            << threads << " threads, n=" << n << ", grain=" << grain;
      }
    }
  }
}

TEST(Program, SlotsOfLiveValuesNeverOverlap) {
  ProgramBuilder b(4, 1);
  int32_t x = b.value(4, 8, "x");
  Launch l0; l0.op = OpCode::kGetRows; l0.out = x; b.launch(l0);
  int32_t y = b.value(4, 8, "y");
  Launch l1; l1.op = OpCode::kScale; l1.out = y; l1.in0 = x; b.launch(l1);
  int32_t z = b.value(4, 8, "z");
  Launch l2; l2.op = OpCode::kAdd; l2.out = z; l2.in0 = x; l2.in1 = y; b.launch(l2);
  int32_t w = b.value(4, 8, "w");
  Launch l3; l3.op = OpCode::kScale; l3.out = w; l3.in0 = z; b.launch(l3);
  Program p = b.finish(w);
  auto slot = [&](int32_t v) { return p.values[static_cast<size_t>(v)].slot; };
  EXPECT_NE(slot(x), slot(y));
  EXPECT_NE(slot(z), slot(x));
  EXPECT_NE(slot(z), slot(y));
  EXPECT_NE(slot(w), slot(z));
  EXPECT_LE(p.slot_bytes.size(), 3u);  // x and y are dead once z exists, so w reuses a slot
  for (size_t s = 0; s < p.slot_bytes.size(); ++s) EXPECT_GE(p.slot_bytes[s], 32u * 4);
}

}  // namespace
}  // namespace loom::llm
