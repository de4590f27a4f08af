// Placeholder amdgpu Target (replaced by the real emitter).
#include "loom/codegen/target.h"

namespace loom::codegen {
namespace {
class Stub final : public Target {
 public:
  ir::TargetKind kind() const override { return ir::TargetKind::kAmdgpu; }
  std::vector<std::string> archs() const override { return {"x"}; }
  Result<std::string> emit(const ir::Module&, std::string_view) const override { return unimplemented("amdgpu"); }
  Result<Artifact> compile(const ir::Module&, std::string_view) const override { return unimplemented("amdgpu"); }
};
}  // namespace
const Target& amdgpu_target() {
  static const Stub t;
  return t;
}
}  // namespace loom::codegen
