// libFuzzer target for the Loom IR text parser. Any input must give a module or an error, never
// a crash or hang; a module that parses must also print and parse back to the same text, stay
// valid through the passes, and emit for every target whose verifier accepts it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "loom/codegen/target.h"
#include "loom/ir/parser.h"
#include "loom/ir/passes/passes.h"
#include "loom/ir/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (64u << 10)) return 0;  // bigger inputs only slow the search down
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto module = loom::ir::parse_module(text, "fuzz.loom");
  if (!module.ok()) {
    if (module.status().message().empty()) __builtin_trap();  // every error explains itself
    return 0;
  }
  std::string printed = loom::ir::print(*module);
  auto again = loom::ir::parse_module(printed, "printed.loom");
  if (!again.ok() || loom::ir::print(*again) != printed) __builtin_trap();
  loom::ir::optimize(*module);
  if (!loom::ir::verify(*module).ok()) __builtin_trap();
  for (const loom::codegen::Target* t : loom::codegen::all_targets()) {
    std::string arch = t->archs().front();
    if (!t->verify(*module, arch).ok()) continue;
    if (!t->emit(*module, arch).ok()) __builtin_trap();
  }
  return 0;
}
