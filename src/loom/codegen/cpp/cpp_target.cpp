// The cpp Target: C++ text, compiled into a cached shared object for this machine ("native") or
// for an x86-64 level this machine runs (LOOM_CPU_ARCH; see host_compiler.h).
#include "loom/codegen/cpp/cpp_emitter.h"
#include "loom/codegen/cpp/host_compiler.h"
#include "loom/base/file.h"
#include "loom/codegen/target.h"
#include "loom/ir/passes/passes.h"

namespace loom::codegen {
namespace {

class CppTarget final : public Target {
 public:
  ir::TargetKind kind() const override { return ir::TargetKind::kCpp; }
  std::vector<std::string> archs() const override { return cpu_archs(); }

  Result<std::string> emit(const ir::Module& module, std::string_view arch) const override {
    LOOM_RETURN_IF_ERROR(verify(module, arch));
    ir::Module storage;  // asynchronous copies run at once on the cpu
    return emit_cpp(ir::without_async_copies(module, storage));
  }

  Result<Artifact> compile(const ir::Module& module, std::string_view arch) const override {
    Artifact a;
    LOOM_ASSIGN_OR_RETURN(a.text, emit(module, arch));
    LOOM_ASSIGN_OR_RETURN(a.path, compile_shared_object(a.text, arch));
    LOOM_ASSIGN_OR_RETURN(std::string bytes, read_file(a.path));
    a.binary.assign(bytes.begin(), bytes.end());
    return a;
  }
};

}  // namespace

const Target& cpp_target() {
  static const CppTarget t;
  return t;
}

}  // namespace loom::codegen
