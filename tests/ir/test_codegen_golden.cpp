// Golden codegen: the PTX (sm_80, sm_90), C++ and AMDGPU LLVM IR of every golden kernel (after
// the standard passes) must equal the checked-in files (LOOM_UPDATE_GOLDEN=1 rewrites them), every
// PTX must assemble with ptxas, and every AMDGPU module must compile for gfx1100 and gfx1151.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include "ir_test_util.h"
#include "loom/codegen/cpp/cpp_emitter.h"
#include "loom/base/file.h"
#include "loom/codegen/amdgpu/amdgpu_emitter.h"
#include "loom/codegen/target.h"
#include "loom/codegen/tool_run.h"
#include "loom/ir/passes/passes.h"
#include "loom/ir/verifier.h"

namespace loom::test {
namespace {

struct Form {
  const char* ext;
  ir::TargetKind target;
  const char* arch;
};

const Form kForms[] = {
    {"ptx.sm_80", ir::TargetKind::kPtx, "sm_80"},
    {"ptx.sm_90", ir::TargetKind::kPtx, "sm_90"},
    {"cpp", ir::TargetKind::kCpp, "native"},
    {"ll", ir::TargetKind::kAmdgpu, "gfx1100"},  // the LLVM IR is the same for gfx1100 and gfx1151
};

bool update_golden() {
  const char* e = std::getenv("LOOM_UPDATE_GOLDEN");
  return e && std::string(e) == "1";
}

Result<ir::Module> optimized(const std::string& name) {
  LOOM_ASSIGN_OR_RETURN(ir::Module m, load_golden(name));
  ir::optimize(m);
  LOOM_RETURN_IF_ERROR(ir::verify(m).with_context("IR after the passes"));
  return m;
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, EmittedCodeMatchesCheckedInFiles) {
  const std::string name = GetParam();
  auto m = optimized(name);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  for (const Form& f : kForms) {
    SCOPED_TRACE(f.ext);
    const codegen::Target* t = codegen::target(f.target);
    ASSERT_NE(t, nullptr);
    std::string path = golden_path(name, f.ext);
    auto text = t->emit(*m, f.arch);
    // C++ goldens hold what follows the emitter's fixed prelude (checked to be there).
    if (text.ok() && std::string_view(f.ext) == "cpp") {
      const std::string_view prelude = codegen::cpp_prelude();
      ASSERT_EQ(text->compare(0, prelude.size(), prelude), 0) << "emitted C++ does not start with the prelude";
      *text = "// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)\n" + text->substr(prelude.size());
    }
    if (!text.ok()) {
      // Only legality refusals are acceptable, and then no stale golden file may exist.
      EXPECT_EQ(text.status().code(), StatusCode::kUnimplemented) << text.status().to_string();
      EXPECT_NE(text.status().message().find("is not supported by the"), std::string::npos) << text.status().to_string();
      if (update_golden()) std::filesystem::remove(path);
      EXPECT_FALSE(file_exists(path)) << path << " exists but the target refuses the kernel";
      continue;
    }
    if (update_golden()) {
      ASSERT_TRUE(write_file(path, *text).ok());
      continue;
    }
    auto want = read_file(path);
    ASSERT_TRUE(want.ok()) << path << " is missing; run with LOOM_UPDATE_GOLDEN=1 to create it";
    EXPECT_TRUE(*want == *text) << path << " differs from the emitted code; if the change is intended, rerun with "
                                << "LOOM_UPDATE_GOLDEN=1 and review the diff";
  }
}

TEST_P(Golden, PtxAssemblesWithPtxas) {
  auto ptxas = codegen::find_tool({std::getenv("LOOM_PTXAS") ? std::getenv("LOOM_PTXAS") : "", "ptxas",
                                   "/usr/local/cuda/bin/ptxas"});
  if (!ptxas.ok()) GTEST_SKIP() << "ptxas not found (install the CUDA toolkit; CI has it): " << ptxas.status().to_string();
  const std::string name = GetParam();
  for (bool opt : {true, false}) {
    auto m = opt ? optimized(name) : load_golden(name);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    for (const char* arch : {"sm_80", "sm_90"}) {
      SCOPED_TRACE(fmt::format("{} {}", arch, opt ? "after passes" : "without passes"));
      auto ptx = codegen::ptx_target().emit(*m, arch);
      // Hopper's wgmma: refused before sm_90; AMX tiles: cpp only.
      if (!ptx.ok() && ((name.starts_with("wgmma_") && std::string(arch) == "sm_80") || name == "amx_tile")) {
        EXPECT_EQ(ptx.status().code(), StatusCode::kUnimplemented) << ptx.status().to_string();
        continue;
      }
      ASSERT_TRUE(ptx.ok()) << ptx.status().to_string();
      // A module with sm_90a features (wgmma) says so in its .target line.
      const std::string ptx_arch = ptx->find(".target sm_90a") != std::string::npos ? "sm_90a" : arch;
      std::string file = (std::filesystem::temp_directory_path() /
                          fmt::format("loom_{}_{}_{}_{}.ptx", name, arch, opt, ::getpid())).string();
      ASSERT_TRUE(write_file(file, *ptx).ok());
      auto r = codegen::run_tool({*ptxas, fmt::format("-arch={}", ptx_arch), file, "-o", "/dev/null"});
      std::filesystem::remove(file);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(r->exit_code, 0) << "ptxas rejected the PTX:\n" << r->output;
    }
  }
}

TEST_P(Golden, AmdgpuCompilesForGfx1100AndGfx1151) {
  auto llc = codegen::find_tool({"llc-19", "llc"});
  if (!llc.ok()) GTEST_SKIP() << "llc not found (Debian: llvm-19; CI has it): " << llc.status().to_string();
  const std::string name = GetParam();
  auto m = optimized(name);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  for (const char* arch : {"gfx1100", "gfx1151"}) {
    SCOPED_TRACE(arch);
    auto a = codegen::amdgpu_target().compile(*m, arch);
    if (!a.ok() && a.status().code() == StatusCode::kUnimplemented) {
      EXPECT_TRUE(name == "mma_tile" || name == "mma_s8_tile" || name == "ldmatrix_tile" || name == "ldmatrix_t_tile" ||
                    name.starts_with("wgmma_") || name == "amx_tile" || name == "dynamic_shared")
          << a.status().to_string();  // PTX or cpp only (dynamic_shared: more than the 64 KiB of LDS)
      continue;
    }
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    ASSERT_GE(a->binary.size(), 4u);
    EXPECT_EQ(std::string(a->binary.begin(), a->binary.begin() + 4), "\x7f" "ELF") << "not an ELF code object";
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Golden, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

TEST(GoldenSet, HasTheRequiredKernels) {
  auto names = golden_names();
  for (const char* required : {"vector_add", "reduce_rows", "softmax_rows", "rms_norm", "matmul_tiled", "matvec_q4_0",
                               "matvec_i8", "transpose_shared"})
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
}

}  // namespace
}  // namespace loom::test
