// Target registry and the checks every target shares.
#include "loom/codegen/target.h"

#include "loom/ir/verifier.h"

namespace loom::codegen {

Status Target::check_arch(std::string_view arch) const {
  std::vector<std::string> list = archs();
  for (const auto& a : list)
    if (a == arch) return Status();
  std::string names;
  for (const auto& a : list) names += (names.empty() ? "" : ", ") + a;
  return invalid_argument("the {} target has no architecture '{}' (choose from {})", name(), arch, names);
}

Status Target::verify(const ir::Module& module, std::string_view arch) const {
  LOOM_RETURN_IF_ERROR(check_arch(arch));
  return ir::verify(module, kind());
}

std::vector<const Target*> all_targets() { return {&ptx_target(), &cpp_target(), &amdgpu_target()}; }

const Target* target(ir::TargetKind kind) {
  for (const Target* t : all_targets())
    if (t->kind() == kind) return t;
  return nullptr;
}

const Target* find_target(std::string_view name) {
  auto kind = ir::parse_target_kind(name);
  return kind ? target(*kind) : nullptr;
}

}  // namespace loom::codegen
