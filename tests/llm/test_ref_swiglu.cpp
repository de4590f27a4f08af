// ref::swiglu (eight lanes at a time in AVX2 builds) against its scalar definition, element by
// element: silu_ggml(g) * u for the groups of eight, libm's silu for the tail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "loom/ref/ops_ref.h"
#include "loom/ref/ops_ref_util.h"

namespace loom::llm {
namespace {

TEST(RefSwiGlu, BitIdenticalToTheScalarDefinition) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> wide(-200.0f, 200.0f);
  for (int64_t n : {1, 7, 8, 9, 64, 1536, 1541}) {
    std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      // Mostly ordinary activations; some past exp's range (the |n| > 126 branch), zeros of
      // both signs and infinities.
      const int kind = static_cast<int>(rng() % 64);
      g[i] = kind == 0 ? wide(rng) : kind == 1 ? -0.0f : kind == 2 ? 0.0f
           : kind == 3 ? std::numeric_limits<float>::infinity() : normal(rng);
      u[i] = normal(rng);
    }
    std::vector<float> y(static_cast<size_t>(n), NAN), in_place = g;
    ref::swiglu(g.data(), u.data(), y.data(), n);
    ref::swiglu(in_place.data(), u.data(), in_place.data(), n);
    const int64_t n8 = n & ~int64_t{7};
    for (int64_t i = 0; i < n; ++i) {
      const float want = i < n8 ? ref::silu_ggml(g[i]) * u[i] : ref::silu(g[i]) * u[i];
      uint32_t a, b, c;
      std::memcpy(&a, &y[i], 4);
      std::memcpy(&b, &want, 4);
      std::memcpy(&c, &in_place[i], 4);
      ASSERT_EQ(a, b) << "n=" << n << " i=" << i << " g=" << g[i] << " u=" << u[i] << ": " << y[i] << " vs " << want;
      ASSERT_EQ(c, b) << "in place, n=" << n << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace loom::llm
