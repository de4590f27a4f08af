// Kernarg packing and AQL geometry for the amdgpu driver (see dispatch.h). Offsets and sizes come
// from the code object's metadata, which read_amdgpu_code_object has bounds-checked against the
// kernarg segment's size.
#include "loom/hrx/amdgpu/dispatch.h"

#include <cstring>
#include <string_view>

namespace loom::hrx::amdgpu {
namespace {

bool is_hidden(const codegen::AmdgpuKernelArg& a) { return std::string_view(a.value_kind).starts_with("hidden_"); }

// The value of a hidden argument this driver fills, or 0 for the ones it leaves empty.
uint64_t hidden_value(std::string_view kind, const hrx_launch_config& c, uint16_t dims) {
  static constexpr std::string_view kAxes = "xyz";
  for (int d = 0; d < 3; ++d) {
    const std::string_view axis = kAxes.substr(static_cast<size_t>(d), 1);
    if (kind.starts_with("hidden_block_count_") && kind.ends_with(axis) && kind.size() == 20) return c.grid[d];
    if (kind.starts_with("hidden_group_size_") && kind.ends_with(axis) && kind.size() == 19) return c.block[d];
  }
  if (kind == "hidden_grid_dims") return dims;
  return 0;  // remainders (whole blocks), global offsets, and pointers Loom's kernels do not use
}

}  // namespace

Result<DispatchGeometry> dispatch_geometry(const hrx_launch_config& c) {
  DispatchGeometry g;
  for (int d = 0; d < 3; ++d) {
    const uint64_t items = uint64_t{c.grid[d]} * c.block[d];
    if (items > UINT32_MAX)
      return invalid_argument("grid {}x{}x{} of blocks {}x{}x{}: {} work-items in dimension {}; an AMD GPU takes at most {}",
                              c.grid[0], c.grid[1], c.grid[2], c.block[0], c.block[1], c.block[2], items, "xyz"[d],
                              UINT32_MAX);
    g.grid_items[d] = static_cast<uint32_t>(items);
    g.workgroup[d] = static_cast<uint16_t>(c.block[d]);
    if (items > 1) g.dimensions = static_cast<uint16_t>(d + 1);
  }
  return g;
}

size_t explicit_arg_count(const codegen::AmdgpuKernelInfo& k) {
  size_t n = 0;
  for (const auto& a : k.args) n += is_hidden(a) ? 0 : 1;
  return n;
}

Status pack_kernargs(const codegen::AmdgpuKernelInfo& k, const hrx_launch_config& c, void* const* args, uint32_t n_args,
                     const uint32_t* arg_sizes, std::span<uint8_t> out) {
  if (out.size() < static_cast<uint64_t>(k.kernarg_segment_size))
    return internal_error("kernarg space of {} bytes for kernel {}, which needs {}", out.size(), k.name,
                          k.kernarg_segment_size);
  if (const size_t want = explicit_arg_count(k); want != n_args)
    return invalid_argument("kernel {} takes {} parameters; the launch passed {}", k.name, want, n_args);
  LOOM_ASSIGN_OR_RETURN(DispatchGeometry g, dispatch_geometry(c));
  std::memset(out.data(), 0, out.size());
  uint32_t i = 0;
  for (const auto& a : k.args) {
    uint8_t* dst = out.data() + a.offset;
    if (is_hidden(a)) {
      const uint64_t v = hidden_value(a.value_kind, c, g.dimensions);
      std::memcpy(dst, &v, static_cast<size_t>(std::min<int64_t>(a.size, 8)));  // little-endian: the low bytes
      continue;
    }
    const uint32_t have = arg_sizes ? arg_sizes[i] : 8;
    if (have < a.size)
      return invalid_argument("kernel {} parameter {} has {} bytes; the launch passed {}", k.name, i, a.size, have);
    std::memcpy(dst, args[i], static_cast<size_t>(a.size));
    ++i;
  }
  return Status();
}

}  // namespace loom::hrx::amdgpu
