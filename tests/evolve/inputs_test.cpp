// evolve's fast random inputs: quantized weights written directly as block bytes
// (kernels::random_block_rows, switched on for evolve by ScopedFastRandomRows) are valid blocks
// with values spread like random_rows' quantized floats, random_rows keeps its own bytes outside
// the scope, and the op's kernels pass their tolerance on them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "loom/store/candidate.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/evaluator.h"
#include "loom/gguf/quant.h"
#include "loom/kernels/op_spec.h"
#include "loom/kernels/op_util.h"

namespace loom::evolve {
namespace {

using llm::GgmlType;

const GgmlType kDirect[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                            GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

std::vector<uint8_t> rows_of(GgmlType t, int64_t rows, int64_t n, uint64_t seed, bool fast) {
  std::vector<uint8_t> v(static_cast<size_t>(kernels::type_row_bytes(t, n) * rows));
  std::mt19937_64 rng(seed);
  if (fast) kernels::random_block_rows(rng, t, rows, n, 0.1f, v.data());
  else kernels::random_rows(rng, t, rows, n, 0.1f, v.data());
  return v;
}

TEST(EvolveInputs, BlockBytesDecodeToCentredValuesWithinTheAmplitude) {
  const int64_t rows = 16, n = 1024;
  const float amp = 0.1f;
  for (GgmlType t : kDirect) {
    SCOPED_TRACE(std::string(llm::ggml_type_name(t)));
    std::vector<uint8_t> q = rows_of(t, rows, n, 7, true);
    std::vector<float> x(static_cast<size_t>(rows * n));
    ASSERT_TRUE(llm::dequantize(t, q.data(), x.data(), rows * n).ok());
    double sum = 0, sq = 0, amax = 0;
    for (float v : x) {
      ASSERT_TRUE(std::isfinite(v));
      sum += v;
      sq += double{v} * v;
      amax = std::max(amax, double{std::fabs(v)});
    }
    const double mean = sum / static_cast<double>(x.size()), rms = std::sqrt(sq / static_cast<double>(x.size()));
    EXPECT_LE(amax, 1.01 * amp);
    EXPECT_GT(amax, 0.5 * amp);
    EXPECT_LT(std::fabs(mean), 0.05 * amp);
    // The quantizer's rows (uniform floats times a magnitude in [0.25, 1]) have an rms of about
    // 0.37 amp; the block bytes must be of the same order, not degenerate.
    std::vector<float> y(x.size());
    std::vector<uint8_t> ref = rows_of(t, rows, n, 7, false);
    ASSERT_TRUE(llm::dequantize(t, ref.data(), y.data(), rows * n).ok());
    double sq_ref = 0;
    for (float v : y) sq_ref += double{v} * v;
    const double rms_ref = std::sqrt(sq_ref / static_cast<double>(y.size()));
    EXPECT_GT(rms, 0.5 * rms_ref);
    EXPECT_LT(rms, 2.0 * rms_ref);
  }
}

TEST(EvolveInputs, RandomRowsKeepsItsBytesOutsideTheScope) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    SCOPED_TRACE(std::string(llm::ggml_type_name(t)));
    const std::vector<uint8_t> before = rows_of(t, 4, 512, 3, false);
    std::vector<uint8_t> inside;
    {
      kernels::ScopedFastRandomRows fast;
      {
        kernels::ScopedFastRandomRows nested;
      }
      inside = rows_of(t, 4, 512, 3, false);  // random_rows, switched by the scope (still on after the nested one)
    }
    EXPECT_EQ(inside, rows_of(t, 4, 512, 3, true));
    EXPECT_NE(inside, before);
    EXPECT_EQ(rows_of(t, 4, 512, 3, false), before) << "the scope's end restores the quantizing path";
  }
  // Types without a direct generator keep the quantizing path even inside the scope.
  kernels::ScopedFastRandomRows fast;
  std::vector<uint8_t> f16 = rows_of(GgmlType::F16, 2, 64, 5, true);
  kernels::ScopedFastRandomRows again;
  EXPECT_EQ(f16, rows_of(GgmlType::F16, 2, 64, 5, false));
}

// The op's default kernel is judged correct on the block-byte inputs (its tolerance holds), for
// a legacy and two K formats, on the searched shape and held-out shapes.
TEST(EvolveInputs, DefaultKernelsPassOnBlockBytes) {
  const kernels::OpSpec* op = kernels::find_op("matvec");
  ASSERT_NE(op, nullptr);
  for (const char* key : {"n_in=512,n_out=40,n_tokens=1,wtype=2", "n_in=512,n_out=40,n_tokens=1,wtype=12",
                          "n_in=512,n_out=40,n_tokens=1,wtype=14"}) {
    SCOPED_TRACE(key);
    auto shape = kernels::Shape::parse(key);
    ASSERT_TRUE(shape.ok());
    Candidate c;
    c.knobs = op->default_schedule(*shape, ir::TargetKind::kCpp);
    EvalOptions o;
    o.time = false;
    o.holdout = holdout_shapes(*op, *shape, 2);
    EvalResult r = evaluate_isolated("cpu", *op, *shape, c, o, 120);
    EXPECT_TRUE(r.ok()) << r.status << " " << r.reason;
    EXPECT_NE(r.phases.find("(input sets: 5 made"), std::string::npos) << r.phases;
  }
}

// Special values go only where the op's reference defines them, every kind appears in a short
// buffer, the two inputs of `add` combine different ones, and the reference is IEEE there.
TEST(EvolveInputs, SpecialValuesWhereTheReferenceDefinesThem) {
  const kernels::OpSpec* add = kernels::find_op("add");
  ASSERT_NE(add, nullptr);
  auto shape = kernels::Shape::parse("n=1000");
  ASSERT_TRUE(shape.ok());
  const auto specs = add->args(*shape);
  std::vector<kernels::HostArg> args(specs.size());
  std::mt19937_64 rng(3);
  add->fill_inputs(*shape, rng, args);
  const auto before = args;
  EXPECT_EQ(kernels::mix_special_values(*add, *shape, specs, rng, args), 2);
  auto floats = [](const kernels::HostArg& a) {
    std::vector<float> v(a.bytes.size() / 4);
    std::memcpy(v.data(), a.bytes.data(), a.bytes.size());
    return v;
  };
  const std::vector<float> a = floats(args[0]), b = floats(args[1]);
  int inf = 0, nan = 0, negzero = 0, denormal = 0, big = 0, same_kind = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    inf += std::isinf(a[i]);
    nan += std::isnan(a[i]);
    negzero += a[i] == 0 && std::signbit(a[i]);
    denormal += std::fpclassify(a[i]) == FP_SUBNORMAL;
    big += std::fabs(a[i]) > 1e38f && std::isfinite(a[i]);
    if (i < 225) same_kind += std::memcmp(&a[i], &b[i], 4) == 0;
  }
  EXPECT_GT(inf, 2);
  EXPECT_GT(nan, 2);
  EXPECT_GT(negzero, 0);
  EXPECT_GT(denormal, 2);
  EXPECT_GT(big, 2);
  EXPECT_EQ(same_kind, 15) << "the first 225 elements of a and b meet in every pair of the 15 kinds once";
  EXPECT_NE(args[0].bytes, before[0].bytes);
  // The reference on them: one IEEE add per element.
  ASSERT_TRUE(add->reference(*shape, args).ok());
  const std::vector<float> y = floats(args[2]);
  for (size_t i = 0; i < y.size(); ++i) {
    const float want = a[i] + b[i];
    EXPECT_TRUE((std::isnan(want) && std::isnan(y[i])) || std::memcmp(&want, &y[i], 4) == 0) << i;
  }
  // An op whose reference does not define them is left alone.
  const kernels::OpSpec* norm = kernels::find_op("rms_norm");
  ASSERT_NE(norm, nullptr);
  const kernels::Shape ns = norm->test_shapes().front();
  const auto nspecs = norm->args(ns);
  std::vector<kernels::HostArg> nargs(nspecs.size());
  norm->fill_inputs(ns, rng, nargs);
  const auto nbefore = nargs;
  EXPECT_EQ(kernels::mix_special_values(*norm, ns, nspecs, rng, nargs), 0);
  for (size_t i = 0; i < nargs.size(); ++i) EXPECT_EQ(nargs[i].bytes, nbefore[i].bytes);
}

}  // namespace
}  // namespace loom::evolve
