// The Target interface: one per backend (ptx, cpp, amdgpu). A target verifies a module for its
// own legality rules, emits its native text (PTX, C++, LLVM IR) and, where a toolchain exists
// on this machine, compiles that text to a loadable binary.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/ir/ir.h"

namespace loom::codegen {

// What compile() produces.
struct Artifact {
  std::string text;           // PTX / C++ / LLVM IR, always set
  std::vector<uint8_t> binary;  // amdgpu: ELF code object; cpp: the shared object's bytes
  std::string path;           // cpp: path of the cached shared object (loadable with dlopen)
};

class Target {
 public:
  virtual ~Target() = default;
  virtual ir::TargetKind kind() const = 0;
  std::string_view name() const { return ir::target_kind_name(kind()); }
  // Architectures accepted by --arch; the first is the default.
  virtual std::vector<std::string> archs() const = 0;

  // ir::verify with this target's legality rules (plus arch checks).
  virtual Status verify(const ir::Module& module, std::string_view arch) const;
  // Native text for the module (verifies first).
  virtual Result<std::string> emit(const ir::Module& module, std::string_view arch) const = 0;
  // Text plus binary (cpp: shared object in the disk cache; amdgpu: code object; ptx: text only,
  // the CUDA driver JIT-compiles it).
  virtual Result<Artifact> compile(const ir::Module& module, std::string_view arch) const = 0;

 protected:
  Status check_arch(std::string_view arch) const;
};

// The backends (each defined next to its emitter).
const Target& ptx_target();
const Target& cpp_target();
const Target& amdgpu_target();

// nullptr when unknown. Targets are stateless singletons.
const Target* find_target(std::string_view name);
const Target* target(ir::TargetKind kind);
std::vector<const Target*> all_targets();

}  // namespace loom::codegen
