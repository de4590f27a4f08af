// Devices and kernels for the HRX conformance suite.
#include "hrx_test_util.h"

#include "loom/ir/parser.h"

namespace loom::test {

std::vector<std::string> hrx_device_specs() {
  std::vector<std::string> specs = {"cpu"};
  int32_t n = 0;
  if (hrx_device_count(HRX_DRIVER_CUDA, &n) == HRX_OK && n > 0) {
    for (int32_t i = 0; i < n; ++i) specs.push_back("cuda:" + std::to_string(i));
  } else {
    specs.push_back("cuda");  // opens fail, tests skip with the reason
  }
  n = 0;
  if (hrx_device_count(HRX_DRIVER_AMDGPU, &n) == HRX_OK && n > 0) {
    for (int32_t i = 0; i < n; ++i) specs.push_back("amdgpu:" + std::to_string(i));
  } else {
    specs.push_back("amdgpu");  // opens fail ("no AMD GPU: ..."), tests skip with the reason
  }
  return specs;
}

const char* const kVectorAddIr = R"(
kernel @vector_add(%a: ptr<global, f32>, %b: ptr<global, f32>, %c: ptr<global, f32>, %n: i32) {
  %tid = thread_id.x
  %bid = block_id.x
  %bdim = block_dim.x
  %base = mul %bid, %bdim
  %i = add %base, %tid
  %in = cmp.lt %i, %n
  if %in {
    %x = load %a[%i]
    %y = load %b[%i]
    %s = add %x, %y
    store %c[%i], %s
  }
}
)";

const char* const kDims3dIr = R"(
kernel @dims3d(%pos: ptr<global, i32>, %dims: ptr<global, i32>) {
  %tx = thread_id.x
  %ty = thread_id.y
  %tz = thread_id.z
  %bx = block_id.x
  %by = block_id.y
  %bz = block_id.z
  %dx = block_dim.x
  %dy = block_dim.y
  %dz = block_dim.z
  %gx = grid_dim.x
  %gy = grid_dim.y
  %gz = grid_dim.z
  %x0 = mul %bx, %dx
  %x = add %x0, %tx
  %y0 = mul %by, %dy
  %y = add %y0, %ty
  %z0 = mul %bz, %dz
  %z = add %z0, %tz
  %w = mul %gx, %dx
  %h = mul %gy, %dy
  %zh = mul %z, %h
  %zhy = add %zh, %y
  %row = mul %zhy, %w
  %idx = add %row, %x
  %c4 = const 4 : i32
  %c8 = const 8 : i32
  %c10 = const 10 : i32
  %c12 = const 12 : i32
  %c18 = const 18 : i32
  %c20 = const 20 : i32
  %c24 = const 24 : i32
  %py = shl %y, %c10
  %pz = shl %z, %c20
  %pxy = or %x, %py
  %p = or %pxy, %pz
  store %pos[%idx], %p
  %sgy = shl %gy, %c4
  %sgz = shl %gz, %c8
  %sbx = shl %dx, %c12
  %sby = shl %dy, %c18
  %sbz = shl %dz, %c24
  %d1 = or %gx, %sgy
  %d2 = or %d1, %sgz
  %d3 = or %d2, %sbx
  %d4 = or %d3, %sby
  %d5 = or %d4, %sbz
  store %dims[%idx], %d5
}
)";

const char* const kAxpyIr = R"(
kernel @axpy(%y: ptr<global, f32>, %x: ptr<global, f32>, %a: f32, %n: i32) {
  %tid = thread_id.x
  %bid = block_id.x
  %bdim = block_dim.x
  %base = mul %bid, %bdim
  %i = add %base, %tid
  %in = cmp.lt %i, %n
  if %in {
    %yv = load %y[%i]
    %xv = load %x[%i]
    %r = fma %yv, %a, %xv
    store %y[%i], %r
  }
}
)";

const char* const kEmptyIr = R"(
kernel @empty(%p: ptr<global, f32>) {
}
)";

ir::Module parse_ir(const char* text) {
  auto m = ir::parse_module(text, "hrx_test");
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : ir::Module{};
}

}  // namespace loom::test
