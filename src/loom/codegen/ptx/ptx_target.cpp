// The ptx Target: PTX text for sm_80 / sm_90. The binary is the text itself (the CUDA driver
// compiles PTX when the module is loaded).
#include "loom/codegen/ptx/ptx_emitter.h"
#include "loom/codegen/target.h"

namespace loom::codegen {
namespace {

class PtxTarget final : public Target {
 public:
  ir::TargetKind kind() const override { return ir::TargetKind::kPtx; }
  std::vector<std::string> archs() const override { return {"sm_80", "sm_90"}; }

  Result<std::string> emit(const ir::Module& module, std::string_view arch) const override {
    LOOM_RETURN_IF_ERROR(verify(module, arch));
    return emit_ptx(module, arch);
  }

  Result<Artifact> compile(const ir::Module& module, std::string_view arch) const override {
    Artifact a;
    LOOM_ASSIGN_OR_RETURN(a.text, emit(module, arch));
    a.binary.assign(a.text.begin(), a.text.end());
    return a;
  }
};

}  // namespace

const Target& ptx_target() {
  static const PtxTarget t;
  return t;
}

}  // namespace loom::codegen
