// The cpp target's kernels compiled for each x86-64 level this CPU runs (LOOM_CPU_ARCH: native
// with VNNI where present, AVX-512, AVX2+FMA, SSE4.2) must all give exactly the bytes of the
// reference: the mat-vec and matmul dot products of every weight family (unsigned quants through
// vpdpbusd / vpmaddubsw / pmaddubsw, signed ones through the 16-bit path, K-quants, f16). A level
// this CPU lacks is skipped with the reason.
#include <gtest/gtest.h>

#include <random>

#include <fmt/format.h>

#include "loom/base/options.h"
#include "loom/codegen/cpp/host_compiler.h"
#include "loom/gguf/ggml_types.h"
#include "loom/hrx/runtime.h"
#include "loom/kernels/op_list.h"
#include "run_op_util.h"

namespace loom::kernels {
namespace {

using llm::GgmlType;

class CpuIsa : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuIsa, DotProductsBitIdenticalToReference) {
  const std::string arch = GetParam();
  if (Status s = codegen::check_cpu_arch(arch); !s.ok()) GTEST_SKIP() << s.to_string();
  opt::ScopedFlag flag(opt::Opt::kCpuArch, arch);
  ASSERT_EQ(codegen::selected_cpu_arch(), arch);
  auto dev = hrx::Device::open("cpu");
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  auto stream = hrx::Stream::create(*dev);
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  std::mt19937_64 rng(std::random_device{}());
  struct Case {
    const char* op;
    GgmlType t;
    int64_t n_tokens;
  };
  const Case cases[] = {{"matvec", GgmlType::Q4_0, 1},  {"matvec", GgmlType::Q4_1, 1},  {"matvec", GgmlType::Q5_0, 1},
                        {"matvec", GgmlType::Q8_0, 1},  {"matvec", GgmlType::IQ4_NL, 1}, {"matvec", GgmlType::Q4_K, 1},
                        {"matvec", GgmlType::Q6_K, 1},  {"matvec", GgmlType::F16, 1},   {"matmul", GgmlType::Q4_0, 5},
                        {"matmul", GgmlType::Q4_K, 5}};
  for (const Case& c : cases) {
    const OpSpec* op = find_op(c.op);
    ASSERT_NE(op, nullptr);
    const Shape s{{{"n_in", 512}, {"n_out", 13}, {"n_tokens", c.n_tokens}, {"wtype", static_cast<int64_t>(c.t)}}};
    ASSERT_TRUE(op->validate(s).ok()) << s.key();
    SCOPED_TRACE(fmt::format("{} {} -march={}", c.op, s.key(), arch));
    std::vector<HostArg> host(op->args(s).size());
    op->fill_inputs(s, rng, host);
    ASSERT_TRUE(op->reference(s, host).ok());
    auto got = run_op_bytes(*dev, *stream, *op, s, op->default_schedule(s, ir::TargetKind::kCpp),
                            {std::span<const uint8_t>(host[0].bytes), std::span<const uint8_t>(host[1].bytes)});
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ((*got)[0], host[2].bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, CpuIsa, ::testing::ValuesIn(codegen::cpu_archs()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// A level this CPU lacks is refused with what it lacks, before any compile; an unknown name too.
TEST(CpuIsaOption, UnknownOrMissingLevelsAreRefused) {
  EXPECT_EQ(codegen::check_cpu_arch("pentium4").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(codegen::check_cpu_arch("native").ok());
  const std::string before = codegen::selected_cpu_arch();
  EXPECT_FALSE(opt::set_from_flag(opt::Opt::kCpuArch, "pentium4").ok());
  EXPECT_EQ(codegen::selected_cpu_arch(), before);
}

}  // namespace
}  // namespace loom::kernels
