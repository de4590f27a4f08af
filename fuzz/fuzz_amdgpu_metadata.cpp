// libFuzzer target: arbitrary bytes through the AMDGPU code-object reader (ELF section headers,
// notes, the msgpack metadata) and the occupancy arithmetic on whatever it returns. Any crash,
// sanitizer report, hang or unbounded allocation is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "loom/codegen/amdgpu/code_object_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loom::codegen;
  auto info = read_amdgpu_code_object(std::span<const uint8_t>(data, size));
  if (!info.ok()) {
    (void)info.status().to_string();
    return 0;
  }
  auto limits = amdgpu_arch_limits("gfx1100");
  for (const AmdgpuKernelInfo& k : info->kernels)
    for (int threads : {0, 1, 64, 1024}) (void)amdgpu_occupancy(k, *limits, threads);
  return 0;
}
