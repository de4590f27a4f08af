// The golden kernels' test cases: fresh random inputs, launch shape and a reference check for
// each kernel in tests/ir/golden/. Backend-neutral: a launcher (CPU here; CUDA on the GPU
// machine) copies the buffers to its memory, passes args in kernelParams style, runs the grid
// and hands the buffers back to check().
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace loom::test {

struct KernelArg {
  int buffer = -1;                  // >= 0: a pointer to this buffer
  std::array<uint8_t, 8> scalar{};  // else: the scalar's bytes (little-endian, low bytes used)
};

struct GoldenRun {
  std::vector<std::vector<uint8_t>> buffers;  // contents before the launch (outputs: 0xFF bytes)
  std::vector<KernelArg> args;
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<uint32_t, 3> block{1, 1, 1};
  // Given the buffers after the launch: "" when they match the reference, else the first
  // mismatch described.
  std::function<std::string(const std::vector<std::vector<uint8_t>>&)> check;
};

struct GoldenCase {
  std::string name;    // file stem in tests/ir/golden/ and kernel name
  bool runs_on_cpu;    // false: uses ops the cpp target refuses (shuffles, warp reductions)
  std::function<GoldenRun(std::mt19937&)> make;
  bool needs_amx = false;  // uses Intel AMX tiles: runs only where codegen::cpu_amx_usable()
};

inline void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.name; }  // gtest names

// Every golden kernel, in a fixed order.
const std::vector<GoldenCase>& golden_cases();

}  // namespace loom::test
