// `loom ir check` and `loom ir compile` as a user runs them: exit codes, file:line:column errors,
// and the files each target writes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "ir_test_util.h"
#include "loom/base/file.h"
#include "loom/codegen/tool_run.h"

namespace loom::test {
namespace {

std::string loom_bin() {
  if (const char* b = std::getenv("LOOM_BIN"); b && *b) return b;
  return std::string(LOOM_BINARY_DIR) + "/loom";
}

#define REQUIRE_LOOM() \
  if (!file_exists(loom_bin())) GTEST_SKIP() << "loom binary not built at " << loom_bin() << " (set LOOM_BIN)"

codegen::ToolResult loom(std::vector<std::string> args) {
  args.insert(args.begin(), loom_bin());
  auto r = codegen::run_tool(args);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : codegen::ToolResult{};
}

class IrCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / fmt::format("loom_ir_cli_{}", test_seed());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(IrCli, CheckReportsFileLineColumn) {
  REQUIRE_LOOM();
  std::string bad = path("bad.loom");
  ASSERT_TRUE(write_file(bad, "kernel @k(%n: i32) {\n  %y = add %x, %n\n}\n").ok());
  auto r = loom({"ir", "check", bad});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(bad + ":2:12: use of undefined value %x"), std::string::npos) << r.output;

  auto ok = loom({"ir", "check", golden_path("softmax_rows", "loom")});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("ok (1 kernel)"), std::string::npos) << ok.output;
}

TEST_F(IrCli, CheckWithATargetAppliesItsLegality) {
  REQUIRE_LOOM();
  auto r = loom({"ir", "check", "--target", "cpp", golden_path("warp_sum", "loom")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("warp_sum.loom:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'warp_reduce' is not supported by the cpp target"), std::string::npos) << r.output;
  EXPECT_EQ(loom({"ir", "check", "--target", "ptx", golden_path("warp_sum", "loom")}).exit_code, 0);
}

TEST_F(IrCli, CompileWritesEachTargetsOutput) {
  REQUIRE_LOOM();
  std::string src = golden_path("vector_add", "loom");
  auto ptx = loom({"ir", "compile", src, "--target", "ptx", "--arch", "sm_90", "-o", path("va.ptx")});
  ASSERT_EQ(ptx.exit_code, 0) << ptx.output;
  auto text = read_file(path("va.ptx"));
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find(".target sm_90"), std::string::npos);
  EXPECT_NE(text->find(".visible .entry vector_add("), std::string::npos);

  auto cpp_text = loom({"ir", "compile", src, "--target", "cpp", "-S", "-o", path("va.cpp")});
  ASSERT_EQ(cpp_text.exit_code, 0) << cpp_text.output;
  auto cpp = read_file(path("va.cpp"));
  ASSERT_TRUE(cpp.ok());
  EXPECT_NE(cpp->find("extern \"C\" void vector_add(void* const* args, const LoomLaunchDims* dims)"), std::string::npos);

  if (codegen::find_tool({"c++"}).ok()) {
    auto so = loom({"ir", "compile", src, "--target", "cpp", "-o", path("va.so")});
    ASSERT_EQ(so.exit_code, 0) << so.output;
    auto bytes = read_file(path("va.so"));
    ASSERT_TRUE(bytes.ok());
    EXPECT_EQ(bytes->substr(0, 4), "\x7f" "ELF");
  }
  if (codegen::find_tool({"llc-19", "llc"}).ok()) {
    auto hsaco = loom({"ir", "compile", src, "--target", "amdgpu", "--arch", "gfx1151", "-o", path("va.hsaco")});
    ASSERT_EQ(hsaco.exit_code, 0) << hsaco.output;
    auto bytes = read_file(path("va.hsaco"));
    ASSERT_TRUE(bytes.ok());
    EXPECT_EQ(bytes->substr(0, 4), "\x7f" "ELF");
  }
}

TEST_F(IrCli, CompileRejectsUnknownTargetsAndArchs) {
  REQUIRE_LOOM();
  std::string src = golden_path("vector_add", "loom");
  auto arch = loom({"ir", "compile", src, "--target", "ptx", "--arch", "sm_70"});
  EXPECT_EQ(arch.exit_code, 2) << arch.output;
  EXPECT_NE(arch.output.find("no architecture 'sm_70' (choose from sm_80, sm_90)"), std::string::npos) << arch.output;
  auto target = loom({"ir", "compile", src, "--target", "metal"});
  EXPECT_EQ(target.exit_code, 2) << target.output;
  EXPECT_NE(target.output.find("unknown target 'metal'"), std::string::npos) << target.output;
  auto missing = loom({"ir", "check", path("does_not_exist.loom")});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("does_not_exist.loom"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace loom::test
