// The several-token matmul (register-blocked over rows and tokens) against the single-token dot
// products: every output element must be bit-identical to the scalar definition, for every
// weight format, ragged row and token counts, and any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "loom/base/thread_pool.h"
#include "loom/gguf/ggml_types.h"
#include "loom/gguf/quant.h"
#include "loom/ref/ops_ref.h"
#include "loom/ref/ops_ref_dot_impl.h"

namespace loom::llm {
namespace {

// Rows with different magnitudes (and a few large outliers) so scales, mins and lane sums vary.
std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::uniform_int_distribution<int> pick(0, 63);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = dist(rng);
    if (pick(rng) == 0) x *= 8.0f;
    if (x == 0.0f) x = 1e-3f;
  }
  return v;
}

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
    default: return NAN;
  }
}

struct Case {
  GgmlType type;
  int64_t n_in;
};

class MatmulBatch : public ::testing::TestWithParam<Case> {};

TEST_P(MatmulBatch, EveryElementEqualsTheSingleTokenDotProduct) {
  const Case c = GetParam();
  const int64_t n_out = 37;  // odd: a row pair and a single row at the end of each tile
  const size_t rb = row_bytes(c.type, c.n_in);
  std::vector<uint8_t> w(rb * n_out);
  for (int64_t r = 0; r < n_out; ++r) {
    auto wf = random_floats(static_cast<size_t>(c.n_in), 1000 + static_cast<uint32_t>(r), 0.1f + 0.05f * static_cast<float>(r % 7));
    ASSERT_TRUE(quantize(c.type, wf.data(), w.data() + r * rb, c.n_in).ok());
  }
  const ref::WeightView view{c.type, w.data(), c.n_in, n_out, rb};
  const GgmlType dot = *ref::vec_dot_type(c.type);
  const size_t xq_row = ref::quantized_row_bytes(dot, c.n_in);
  ThreadPool p1(1), p2(2), p3(3);
  for (int64_t n_tok : {2, 3, 4, 5, 6, 7, 8, 12, 16, 33}) {
    auto x = random_floats(static_cast<size_t>(c.n_in * n_tok), 77 + static_cast<uint32_t>(n_tok), 1.5f);
    std::vector<uint8_t> xq(xq_row * static_cast<size_t>(n_tok));
    for (int64_t t = 0; t < n_tok; ++t) ref::quantize_activation(dot, x.data() + t * c.n_in, xq.data() + t * xq_row, c.n_in);
    std::vector<float> expect(static_cast<size_t>(n_out * n_tok));
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t r = 0; r < n_out; ++r)
        expect[t * n_out + r] = scalar_dot(c.type, view.row(r), xq.data() + t * xq_row, c.n_in);
    std::vector<uint8_t> scratch;
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p1, &p2, &p3}) {
      std::vector<float> y(static_cast<size_t>(n_out * n_tok), NAN);
      ASSERT_TRUE(ref::matmul(view, x.data(), n_tok, y.data(), pool, &scratch).ok());
      for (int64_t t = 0; t < n_tok; ++t)
        for (int64_t r = 0; r < n_out; ++r) {
          const float a = y[t * n_out + r], e = expect[t * n_out + r];
          ASSERT_EQ(0, std::memcmp(&a, &e, sizeof(float)))
              << ggml_type_name(c.type) << " n_in " << c.n_in << " n_tok " << n_tok << " token " << t << " row " << r
              << ": " << a << " vs " << e;
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, MatmulBatch,
                         ::testing::Values(Case{GgmlType::Q4_0, 96}, Case{GgmlType::Q4_1, 96}, Case{GgmlType::Q5_0, 96},
                                           Case{GgmlType::Q5_1, 96}, Case{GgmlType::Q8_0, 96}, Case{GgmlType::Q4_0, 576},
                                           Case{GgmlType::Q4_1, 576}, Case{GgmlType::Q8_0, 640}, Case{GgmlType::Q5_0, 640},
                                           Case{GgmlType::Q4_K, 256}, Case{GgmlType::Q4_K, 768}, Case{GgmlType::Q5_K, 512},
                                           Case{GgmlType::Q6_K, 256}, Case{GgmlType::Q6_K, 768}, Case{GgmlType::F16, 96}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(ggml_type_name(i.param.type)) + "_" + std::to_string(i.param.n_in);
                         });

}  // namespace
}  // namespace loom::llm
