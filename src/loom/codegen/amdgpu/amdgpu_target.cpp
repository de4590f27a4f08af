// The amdgpu Target and its toolchain step: llc (object) and ld.lld (shared code object).
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include "loom/base/file.h"
#include "loom/base/options.h"
#include "loom/codegen/amdgpu/amdgpu_emitter.h"
#include "loom/codegen/target.h"
#include "loom/codegen/tool_run.h"

namespace loom::codegen {
namespace {

Result<std::string> tool(opt::Opt which, std::vector<std::string> names) {
  if (std::string e = opt::get_string(which); !e.empty()) names.insert(names.begin(), e);
  return find_tool(names).with_context("the amdgpu target needs LLVM's llc and ld.lld (Debian: llvm-19, lld-19)");
}

class AmdgpuTarget final : public Target {
 public:
  ir::TargetKind kind() const override { return ir::TargetKind::kAmdgpu; }
  std::vector<std::string> archs() const override { return {"gfx1100", "gfx1151"}; }

  Result<std::string> emit(const ir::Module& module, std::string_view arch) const override {
    LOOM_RETURN_IF_ERROR(verify(module, arch));
    return emit_amdgpu_llvm(module);
  }

  Result<Artifact> compile(const ir::Module& module, std::string_view arch) const override {
    Artifact a;
    LOOM_ASSIGN_OR_RETURN(a.text, emit(module, arch));
    LOOM_ASSIGN_OR_RETURN(a.binary, compile_amdgpu_code_object(a.text, arch));
    return a;
  }
};

}  // namespace

Result<std::vector<uint8_t>> compile_amdgpu_code_object(std::string_view llvm_ir, std::string_view arch) {
  LOOM_ASSIGN_OR_RETURN(std::string llc, tool(opt::Opt::kLlc, {"llc-19", "llc"}));
  LOOM_ASSIGN_OR_RETURN(std::string lld, tool(opt::Opt::kLld, {"ld.lld-19", "ld.lld"}));
  std::string key = std::string(llvm_ir) + '\0' + std::string(arch) + '\0' + llc + '\0' + lld;
  std::string dir = cache_dir() + "/kernels/amdgpu";
  std::string out = dir + "/" + content_hash(key) + ".hsaco";
  if (!file_exists(out)) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return unavailable("cannot create kernel cache {}: {}", dir, ec.message());
    std::string tmp = fmt::format("{}.tmp.{}.{}", out, ::getpid(), std::hash<std::thread::id>()(std::this_thread::get_id()));
    LOOM_RETURN_IF_ERROR(write_file(tmp + ".ll", llvm_ir));
    LOOM_ASSIGN_OR_RETURN(ToolResult r, run_tool({llc, "-mtriple=amdgcn-amd-amdhsa", fmt::format("-mcpu={}", arch), "-O3",
                                                  "-filetype=obj", tmp + ".ll", "-o", tmp + ".o"}));
    if (r.exit_code == 0) {
      LOOM_ASSIGN_OR_RETURN(r, run_tool({lld, "-shared", tmp + ".o", "-o", tmp + ".hsaco"}));
      if (r.exit_code == 0) std::filesystem::rename(tmp + ".hsaco", out, ec);
    }
    std::filesystem::remove(tmp + ".ll", ec);
    std::filesystem::remove(tmp + ".o", ec);
    std::filesystem::remove(tmp + ".hsaco", ec);
    if (r.exit_code != 0) return internal_error("compiling LLVM IR for {} failed:\n{}", arch, r.output.substr(0, 4000));
  }
  LOOM_ASSIGN_OR_RETURN(std::string bytes, read_file(out));
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

const Target& amdgpu_target() {
  static const AmdgpuTarget t;
  return t;
}

}  // namespace loom::codegen
