// Parser for the text form of Loom IR (grammar in docs/ir.md). Hand-written recursive descent;
// never crashes or hangs on arbitrary bytes (fuzzed), and reports the first error only.
#pragma once

#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/ir/ir.h"

namespace loom::ir {

// Parses and verifies (without a target) a module. Errors are invalid_argument with the message
// "<source_name>:<line>:<col>: <reason>" (verifier errors add the instruction's text).
Result<Module> parse_module(std::string_view text, std::string source_name = "<input>");

// Reads and parses a .loom file.
Result<Module> parse_file(const std::string& path);

}  // namespace loom::ir
