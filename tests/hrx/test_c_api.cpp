// hrx.h is C: the header passes a strict C syntax check, and c_api_smoke.c, compiled as C11 and
// linked against the HRX libraries of this build, runs a kernel on every device.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "hrx_test_util.h"
#include "loom/codegen/cpp/host_compiler.h"
#include "loom/codegen/target.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

// Runs a shell command; returns its exit status and output.
std::pair<int, std::string> sh(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, "popen failed"};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

std::string c_compiler() {
  const char* cc = std::getenv("CC");
  return cc && *cc ? cc : "cc";
}

TEST(HrxCApi, HeaderIsStrictC) {
  auto [rc, out] = sh(c_compiler() + " -x c -std=c99 -Wall -Wextra -Werror -pedantic -fsyntax-only -I " LOOM_SOURCE_DIR
                      "/src " LOOM_SOURCE_DIR "/src/loom/hrx/hrx.h");
  if (rc == 127) GTEST_SKIP() << "no C compiler (" << c_compiler() << ") on this machine: " << out;
  EXPECT_EQ(rc, 0) << out;
}

TEST(HrxCApi, SmokeProgramRunsOnEveryDevice) {
  const fs::path bin = LOOM_BINARY_DIR;
  const std::vector<fs::path> libs = {bin / "libloom_hrx.a", bin / "src/loom/codegen/libloom_codegen.a",
                                      bin / "src/loom/ir/libloom_ir.a", bin / "libloom_base.a"};
  for (const auto& l : libs)
    if (!fs::exists(l)) GTEST_SKIP() << "HRX libraries not beside this test binary (" << l << " missing): not a build tree";
  const fs::path dir = fs::temp_directory_path() / fmt::format("hrx_c_api_{}", ::getpid());
  fs::create_directories(dir);
  const std::string exe = (dir / "c_api_smoke").string();
  std::string link;
  for (const auto& l : libs) link += " " + l.string();
  auto [crc, cout] = sh(c_compiler() + " -std=c11 -Wall -Wextra -Werror -pedantic -I " LOOM_SOURCE_DIR "/src -c " +
                        std::string(LOOM_SOURCE_DIR "/tests/hrx/c_api_smoke.c") + " -o " + exe + ".o");
  if (crc == 127) GTEST_SKIP() << "no C compiler on this machine: " << cout;
  ASSERT_EQ(crc, 0) << cout;
#ifdef FMT_HEADER_ONLY
  const std::string fmt_lib;  // portable builds carry fmt inside the libraries
#else
  const std::string fmt_lib = " -lfmt";  // the libraries call Debian's shared libfmt
#endif
  auto [lrc, lout] = sh("c++ " + exe + ".o" + link + fmt_lib + " -ldl -lpthread -o " + exe);
  ASSERT_EQ(lrc, 0) << lout;

  ir::Module ir = parse_ir(kVectorAddIr);
  for (const std::string& spec : hrx_device_specs()) {
    SCOPED_TRACE(spec);
    std::string module_file;
    if (spec == "cpu") {
      auto src = codegen::cpp_target().emit(ir, "native");
      ASSERT_TRUE(src.ok()) << src.status().to_string();
      auto so = codegen::compile_shared_object(*src);
      ASSERT_TRUE(so.ok()) << so.status().to_string();
      module_file = *so;
    } else {
      if (spec == "cuda") {
        std::printf("[ SKIPPED  ] c_api_smoke on cuda: no CUDA device here (%s)\n",
                    hrx::Device::cuda_status().to_string().c_str());
        continue;
      }
      if (spec == "amdgpu") {
        std::printf("[ SKIPPED  ] c_api_smoke on amdgpu: %s\n", hrx::Device::amdgpu_status().message().c_str());
        continue;
      }
      if (spec.starts_with("amdgpu:")) {
        auto dev = hrx::Device::open(spec);
        ASSERT_TRUE(dev.ok()) << dev.status().to_string();
        auto co = codegen::amdgpu_target().compile(ir, dev->props().arch);
        ASSERT_TRUE(co.ok()) << co.status().to_string();
        module_file = (dir / "vector_add.hsaco").string();
        std::ofstream(module_file, std::ios::binary).write(reinterpret_cast<const char*>(co->binary.data()),
                                                            static_cast<std::streamsize>(co->binary.size()));
        auto [rc, out] = sh(exe + " " + spec + " " + module_file);
        EXPECT_EQ(rc, 0) << out;
        EXPECT_NE(out.find("vector_add ok"), std::string::npos) << out;
        continue;
      }
      auto ptx = codegen::ptx_target().emit(ir, "sm_80");
      ASSERT_TRUE(ptx.ok()) << ptx.status().to_string();
      module_file = (dir / "vector_add.ptx").string();
      std::ofstream(module_file) << *ptx;
    }
    auto [rc, out] = sh(exe + " " + spec + " " + module_file);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("vector_add ok"), std::string::npos) << out;
    EXPECT_NE(out.find("\nok\n"), std::string::npos) << out;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace loom::test
