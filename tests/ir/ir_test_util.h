// Helpers shared by the IR tests: golden file paths, parsing, and the CPU launcher for GoldenRun.
#pragma once

#include <string>
#include <vector>

#include "golden_cases.h"
#include "loom/base/status.h"
#include "loom/codegen/cpp/host_compiler.h"
#include "loom/ir/ir.h"

namespace loom::test {

std::string golden_dir();  // <source>/tests/ir/golden (see the definition for overrides)
std::string golden_path(const std::string& name, const std::string& ext);  // golden_dir()/name.ext
std::vector<std::string> golden_names();       // stems of every golden .loom file, sorted

// Parses (and verifies) tests/ir/golden/<name>.loom.
Result<ir::Module> load_golden(const std::string& name);

// Runs `run` with the kernel `name` of `module` on the CPU: buffers get 64 guard bytes on each
// side (checked afterwards), `threads` OS threads share the blocks. Returns "" on success, else
// what went wrong (launch error, guard overwrite, reference mismatch).
std::string run_on_cpu(const codegen::CpuModule& module, const std::string& name, const GoldenRun& run,
                       unsigned threads);
// The same on a loom::ThreadPool.
std::string run_on_cpu(const codegen::CpuModule& module, const std::string& name, const GoldenRun& run,
                       ThreadPool& pool);

// A seed from std::random_device, or $LOOM_TEST_SEED when set (to replay a failure).
uint32_t test_seed();

}  // namespace loom::test
