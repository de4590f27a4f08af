// kernels::compare_outputs, the one output comparison of the op harness and evolve's evaluator.
#include "loom/kernels/output_compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace loom::kernels {
namespace {

using Kind = OutputComparison::Kind;

template <typename T>
std::vector<uint8_t> bytes_of(std::vector<T> v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

ArgSpec buffer(std::string name, ArgRole role, size_t bytes, ir::Scalar e) {
  ArgSpec a;
  a.name = std::move(name);
  a.role = role;
  a.bytes = static_cast<int64_t>(bytes);
  a.elem = e;
  return a;
}

// One input x and one f32 output y; `got_x`/`got_y` are what the kernel left.
OutputComparison run(const std::vector<float>& want_y, const std::vector<float>& got_y, const Tolerance& tol,
                     const std::vector<float>& got_x = {1, 2}) {
  const std::vector<float> x = {1, 2};
  std::vector<ArgSpec> specs = {buffer("x", ArgRole::kInput, 8, ir::Scalar::kF32),
                                buffer("y", ArgRole::kOutput, want_y.size() * 4, ir::Scalar::kF32)};
  std::vector<HostArg> in(2), want(2);
  in[0].bytes = bytes_of(x);
  want[0].bytes = bytes_of(x);
  want[1].bytes = bytes_of(want_y);
  const std::vector<uint8_t> gx = bytes_of(got_x), gy = bytes_of(got_y);
  return compare_outputs(specs, {gx.data(), gy.data()}, in, want, tol);
}

TEST(OutputCompare, WithinTolerancePassesAndReportsTheError) {
  auto r = run({1.0f, 100.0f}, {1.001f, 100.05f}, {0.002, 0.001, false});
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_NEAR(r.max_abs_err, 0.05, 1e-4);
  EXPECT_NEAR(r.max_rel_err, 0.001, 1e-4);
}

TEST(OutputCompare, OutsideToleranceNamesTheElement) {
  auto r = run({1.0f, 2.0f}, {1.0f, 2.5f}, {0.1, 0.0, false});
  ASSERT_EQ(r.kind, Kind::kMismatch);
  EXPECT_EQ(r.arg, 1u);
  EXPECT_EQ(r.offset, 4u);
  EXPECT_EQ(r.elem_bytes, 4u);
  EXPECT_NE(r.message.find("'y'[1] = 2.5, reference 2"), std::string::npos) << r.message;
}

TEST(OutputCompare, NanMatchesOnlyNan) {
  EXPECT_TRUE(run({NAN, 1.0f}, {NAN, 1.0f}, {0.1, 0.1, false}).ok());
  EXPECT_EQ(run({1.0f, 1.0f}, {NAN, 1.0f}, {0.1, 0.1, false}).kind, Kind::kMismatch);
  EXPECT_EQ(run({NAN, 1.0f}, {1.0f, 1.0f}, {0.1, 0.1, false}).kind, Kind::kMismatch);
}

TEST(OutputCompare, ExactToleranceComparesBits) {
  auto r = run({1.0f, 2.0f}, {1.0f, std::nextafter(2.0f, 3.0f)}, {1.0, 1.0, true});
  ASSERT_EQ(r.kind, Kind::kMismatch);
  EXPECT_EQ(r.offset, 4u);
  EXPECT_EQ(r.elem_bytes, 4u);
  EXPECT_NE(r.message.find("'y'[1]"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("bit for bit"), std::string::npos) << r.message;
  // -0.0 is not 0.0 for an exact op, in either direction.
  EXPECT_EQ(run({-0.0f, 1.0f}, {0.0f, 1.0f}, {0, 0, true}).kind, Kind::kMismatch);
  EXPECT_EQ(run({0.0f, 1.0f}, {-0.0f, 1.0f}, {0, 0, true}).kind, Kind::kMismatch);
  EXPECT_TRUE(run({-0.0f, 1.0f}, {-0.0f, 1.0f}, {0, 0, true}).ok());
}

TEST(OutputCompare, AnyNanMatchesAnyNanEvenWhenExact) {
  uint32_t quiet = 0x7fc00000, payload = 0x7fc00123, negative = 0xffc00000;
  float q, p, n;
  std::memcpy(&q, &quiet, 4);
  std::memcpy(&p, &payload, 4);
  std::memcpy(&n, &negative, 4);
  EXPECT_TRUE(run({q, p}, {p, n}, {0, 0, true}).ok());
  EXPECT_EQ(run({q, 1.0f}, {INFINITY, 1.0f}, {0, 0, true}).kind, Kind::kMismatch);
}

TEST(OutputCompare, InfinitiesMatchOnlyTheSameInfinity) {
  EXPECT_TRUE(run({INFINITY, -INFINITY}, {INFINITY, -INFINITY}, {0.1, 0.1, false}).ok());
  EXPECT_EQ(run({INFINITY, 1.0f}, {-INFINITY, 1.0f}, {0.1, 0.1, false}).kind, Kind::kMismatch);
  EXPECT_EQ(run({INFINITY, 1.0f}, {3.4e38f, 1.0f}, {0.1, 0.1, false}).kind, Kind::kMismatch);
  EXPECT_EQ(run({3.4e38f, 1.0f}, {INFINITY, 1.0f}, {0.1, 0.1, false}).kind, Kind::kMismatch);
}

TEST(OutputCompare, AModifiedInputFails) {
  auto r = run({1.0f, 2.0f}, {1.0f, 2.0f}, {0.1, 0.1, false}, {1.0f, 3.0f});
  ASSERT_EQ(r.kind, Kind::kInputModified);
  EXPECT_EQ(r.arg, 0u);
  EXPECT_NE(r.message.find("modified input 'x'"), std::string::npos) << r.message;
}

TEST(OutputCompare, F64OutputsCompareAsDoubles) {
  // Values that differ only past the first byte of their encoding.
  const std::vector<double> want = {1.0, 2.0}, got = {1.0, 2.5};
  std::vector<ArgSpec> specs = {buffer("y", ArgRole::kOutput, 16, ir::Scalar::kF64)};
  std::vector<HostArg> in(1), w(1);
  w[0].bytes = bytes_of(want);
  const std::vector<uint8_t> g = bytes_of(got);
  auto r = compare_outputs(specs, {g.data()}, in, w, {0.1, 0.0, false});
  ASSERT_EQ(r.kind, Kind::kMismatch) << "2.5 is not within 0.1 of 2";
  EXPECT_EQ(r.elem_bytes, 8u);
}

TEST(OutputCompare, AReferenceOfTheWrongSizeIsReported) {
  std::vector<ArgSpec> specs = {buffer("y", ArgRole::kOutput, 8, ir::Scalar::kF32)};
  std::vector<HostArg> in(1), w(1);
  w[0].bytes.resize(4);
  const std::vector<uint8_t> g(8);
  EXPECT_EQ(compare_outputs(specs, {g.data()}, in, w, {}).kind, Kind::kBadReference);
}

}  // namespace
}  // namespace loom::kernels
