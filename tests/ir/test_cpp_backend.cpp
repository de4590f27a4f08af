// The cpp backend end to end: every golden kernel it can run is compiled (before and after the
// passes), loaded with dlopen and run on fresh random inputs against its reference.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "ir_test_util.h"
#include "loom/base/file.h"
#include "loom/base/options.h"
#include "loom/base/thread_pool.h"
#include "loom/codegen/cpp/byte_range.h"
#include "loom/codegen/cpp/cpp_emitter.h"
#include "loom/codegen/target.h"
#include "loom/codegen/tool_run.h"
#include "loom/ir/parser.h"
#include "loom/ir/passes/passes.h"
#include "loom/ir/verifier.h"

namespace loom::test {
namespace {

// The host compiler the cpp target uses, or why it is missing (e.g. on the GPU machine's image).
std::string missing_compiler() {
  const char* cxx = std::getenv("LOOM_CXX");
  auto found = codegen::find_tool({cxx && *cxx ? cxx : "c++"});
  return found.ok() ? "" : found.status().to_string();
}

#define REQUIRE_HOST_COMPILER()                                                         \
  if (std::string why = missing_compiler(); !why.empty())                               \
  GTEST_SKIP() << "no host C++ compiler, the cpp target cannot compile here: " << why

class CppGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(CppGolden, MatchesReferenceOnFreshInputs) {
  REQUIRE_HOST_COMPILER();
  const GoldenCase& c = GetParam();
  auto module = load_golden(c.name);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  if (!c.runs_on_cpu) {
    Status s = ir::verify(*module, ir::TargetKind::kCpp);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.to_string();
    EXPECT_NE(s.message().find("is not supported by the cpp target"), std::string::npos) << s.to_string();
    return;
  }
  for (bool optimized : {false, true}) {
    SCOPED_TRACE(optimized ? "after passes" : "without passes");
    auto m = load_golden(c.name);
    ASSERT_TRUE(m.ok());
    if (optimized) {
      ir::optimize(*m);
      ASSERT_TRUE(ir::verify(*m, ir::TargetKind::kCpp).ok()) << ir::verify(*m).to_string();
    }
    auto cpu = codegen::compile_cpu_module(*m);
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    for (unsigned threads : {1u, 3u}) {
      uint32_t seed = test_seed();
      SCOPED_TRACE(fmt::format("seed {} (LOOM_TEST_SEED to replay), {} threads", seed, threads));
      std::mt19937 rng(seed);
      GoldenRun run = c.make(rng);
      EXPECT_EQ(run_on_cpu(*cpu, c.name, run, threads), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, CppGolden, ::testing::ValuesIn(golden_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(CppBackend, EveryGoldenFileHasACase) {
  std::vector<std::string> with_case;
  for (const auto& c : golden_cases()) with_case.push_back(c.name);
  for (const auto& name : golden_names())
    EXPECT_NE(std::find(with_case.begin(), with_case.end(), name), with_case.end()) << name << " has no test case";
}

TEST(CppBackend, SharedObjectIsCachedByContentHash) {
  REQUIRE_HOST_COMPILER();
  auto dir = std::filesystem::temp_directory_path() / fmt::format("loom_cache_test_{}", test_seed());
  opt::ScopedFlag cache(opt::Opt::kCacheDir, dir.string());
  auto m = load_golden("vector_add");
  ASSERT_TRUE(m.ok());
  auto first = codegen::cpp_target().compile(*m, "native");
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->path.rfind(dir.string() + "/kernels/cpp/", 0), 0u) << first->path;
  auto mtime = std::filesystem::last_write_time(first->path);
  auto second = codegen::cpp_target().compile(*m, "native");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->path, second->path);
  EXPECT_EQ(mtime, std::filesystem::last_write_time(second->path)) << "recompiled instead of reusing the cache";
  // Different code, different file.
  auto other = load_golden("reduce_rows");
  ASSERT_TRUE(other.ok());
  auto third = codegen::cpp_target().compile(*other, "native");
  ASSERT_TRUE(third.ok());
  EXPECT_NE(third->path, first->path);
  std::filesystem::remove_all(dir);
}

TEST(CppBackend, RunsOnAThreadPool) {
  REQUIRE_HOST_COMPILER();
  ThreadPool pool(3);
  for (const char* name : {"histogram", "transpose_shared"}) {
    SCOPED_TRACE(name);
    auto m = load_golden(name);
    ASSERT_TRUE(m.ok());
    auto cpu = codegen::compile_cpu_module(*m);
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    for (const auto& c : golden_cases()) {
      if (c.name != name) continue;
      uint32_t seed = test_seed();
      SCOPED_TRACE(fmt::format("seed {}", seed));
      std::mt19937 rng(seed);
      EXPECT_EQ(run_on_cpu(*cpu, name, c.make(rng), pool), "");
    }
  }
}

TEST(CppBackend, LaunchRejectsOversizedBlocks) {
  REQUIRE_HOST_COMPILER();
  auto m = load_golden("vector_add");
  ASSERT_TRUE(m.ok());
  auto cpu = codegen::compile_cpu_module(*m);
  ASSERT_TRUE(cpu.ok());
  auto fn = cpu->kernel("vector_add");
  ASSERT_TRUE(fn.ok());
  Status s = codegen::launch_cpu(*fn, nullptr, {1, 1, 1}, {2048, 1, 1});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu->kernel("no_such_kernel").status().code(), StatusCode::kNotFound);
}

// The byte bounds that let vector dot4 use vpmaddubsw (see byte_range.h): nibbles and small
// fields built from loaded data have known bounds; the loaded data itself does not.
TEST(CppBackend, ByteRangeBoundsWhatDot4Needs) {
  auto m = ir::parse_module(R"(kernel @k(%p: ptr<global, u32>) {
  %z = const 0 : i32
  %q = load %p[%z], align 16 : u32x4
  %m = const 0x0F0F0F0F : u32x4
  %lo = and %q, %m
  %c4 = const 4 : u32x4
  %s = shr %q, %c4
  %hi = and %s, %m
  %j = concat %lo, %hi
  %one = const 0x01010101 : u32x8
  %c4x = const 4 : u32x8
  %x = load %p[%z], align 32 : u32x8
  %b = and %x, %one
  %b4 = shl %b, %c4x
  %or = or %j, %b4
  %i = bitcast %or : i32x8
  %c4i = const 4 : i32x8
  %sr = shr %i, %c4i
  %c8x = const 8 : u32x8
  %sb8 = shr %or, %c8x
  %w = shl %or, %c4x
  %sa = add %or, %or
  %sb = add %sa, %sa
  %sc = add %sb, %sb
  %sd = add %sc, %sc
}
)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ir::Kernel& k = *m->kernels[0];
  codegen::ByteRange br(k);
  std::map<std::string, int> got;
  ir::Namer namer(k);
  ir::walk(k.body, [&](const ir::Inst* i) {
    for (const ir::Value* r : i->results) got[namer.name(r)] = br.max_byte(r);
  });
  EXPECT_EQ(got["q"], 255);  // loaded
  EXPECT_EQ(got["s"], 255);  // a shift by 4 brings the next byte's low bits in
  EXPECT_EQ(got["lo"], 15);
  EXPECT_EQ(got["hi"], 15);
  EXPECT_EQ(got["j"], 15);  // concat: the larger bound
  EXPECT_EQ(got["b"], 1);
  EXPECT_EQ(got["b4"], 16);  // no bit leaves its byte
  EXPECT_EQ(got["or"], 31);  // 15 | 16
  EXPECT_EQ(got["i"], 31);   // bitcast keeps the bytes
  EXPECT_EQ(got["sr"], 255);  // as %s (arithmetic, but the bytes are non-negative)
  EXPECT_EQ(got["sb8"], 31);  // whole bytes move down, zeros come in
  EXPECT_EQ(got["w"], 255);   // 31 << 4 leaves the byte
  EXPECT_EQ(got["sa"], 62);   // byte sums below 256: no carries
  EXPECT_EQ(got["sb"], 124);
  EXPECT_EQ(got["sc"], 248);  // no carry, but not a 7-bit operand any more
  EXPECT_EQ(got["sd"], 255);  // may carry
}

}  // namespace
}  // namespace loom::test
