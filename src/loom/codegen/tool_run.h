// Runs external toolchain programs (c++, llc, ld.lld, ptxas) without a shell and captures their
// output; finds them on PATH. Used by the cpp and amdgpu backends and by tests.
#pragma once

#include <string>
#include <vector>

#include "loom/base/status.h"

namespace loom::codegen {

struct ToolResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string output;  // stdout and stderr interleaved, truncated to 64 KiB
};

// Runs argv[0] (searched on PATH when it has no '/') with the given arguments and waits.
// Errors only when the program cannot be started; a non-zero exit is reported in the result.
Result<ToolResult> run_tool(const std::vector<std::string>& argv);

// The first of `names` found on PATH (or as an absolute path), else not_found naming them all.
Result<std::string> find_tool(const std::vector<std::string>& names);

// The content key of the kernel caches: loom::content_hash128 (base/hash.h), 32 hex digits.
std::string content_hash(std::string_view bytes);

}  // namespace loom::codegen
