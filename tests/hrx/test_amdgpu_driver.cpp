// The amdgpu driver's host-side cases, which run on every machine: how it reports a missing AMD
// GPU (the reason must match what this machine lacks), and the parts of a dispatch that need no
// GPU (the kernarg segment and the AQL geometry), checked on code objects that Debian's llc-19
// builds from the conformance suite's kernels. Device cases are in test_conformance.cpp (the
// "amdgpu" entries, skipped with the reason where there is no AMD GPU).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "hrx_test_util.h"
#include "loom/base/options.h"
#include "loom/codegen/amdgpu/code_object_info.h"
#include "loom/codegen/target.h"
#include "loom/hrx/amdgpu/dispatch.h"
#include "loom/hrx/hsa_api.h"

namespace loom::test {
namespace {

using hrx::amdgpu::dispatch_geometry;
using hrx::amdgpu::explicit_arg_count;
using hrx::amdgpu::pack_kernargs;

bool has_amd_gpu() {
  int32_t n = 0;
  return hrx_device_count(HRX_DRIVER_AMDGPU, &n) == HRX_OK && n > 0;
}

// What this machine lacks, found without the driver: the phrase its message must contain.
std::string expected_reason() {
  if (!LOOM_HRX_HAVE_HSA) return "built without the HSA headers";
  std::string lib = opt::get_string(opt::Opt::kHsaRuntime);
  if (lib.empty()) lib = "libhsa-runtime64.so.1";
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return "the HSA runtime library is missing";
  if (!dlsym(h, "hsa_amd_memory_async_copy")) return "lacks HSA entry points";
  if (access("/dev/kfd", F_OK) != 0) return "/dev/kfd is missing";
  if (access("/dev/kfd", R_OK | W_OK) != 0) return "/dev/kfd is not usable";
  return "";  // a runtime that initializes: hsa_init's own failure or no GPU agent
}

TEST(AmdgpuDriver, NoDeviceIsAClearErrorWithItsReason) {
  if (has_amd_gpu()) GTEST_SKIP() << "an AMD GPU is present: the conformance suite's amdgpu cases test it";
  const Status status = hrx::Device::amdgpu_status();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.to_string();
  EXPECT_TRUE(status.message().starts_with("no AMD GPU: ")) << status.to_string();
  const std::string reason = expected_reason();
  EXPECT_NE(status.message().find(reason), std::string::npos) << "expected '" << reason << "' in: " << status.to_string();
  std::printf("amdgpu driver here: %s\n", status.message().c_str());
  // Opening a device fails the same way, through the C API too; nothing is listed.
  for (const char* spec : {"amdgpu", "amdgpu:0", "amdgpu:3"}) {
    auto d = hrx::Device::open(spec);
    ASSERT_FALSE(d.ok()) << spec;
    EXPECT_TRUE(d.status().code() == StatusCode::kUnavailable || d.status().code() == StatusCode::kNotFound)
        << d.status().to_string();
    EXPECT_TRUE(d.status().message().starts_with("no AMD GPU")) << d.status().to_string();
  }
  hrx_device* raw = reinterpret_cast<hrx_device*>(1);
  EXPECT_NE(hrx_device_get(HRX_DRIVER_AMDGPU, 0, &raw), HRX_OK);
  EXPECT_EQ(raw, nullptr);
  EXPECT_NE(std::string(hrx_last_error()).find("no AMD GPU"), std::string::npos) << hrx_last_error();
  for (const hrx::Device& d : hrx::Device::enumerate()) EXPECT_NE(d.driver(), hrx::DriverKind::kAmdgpu);
}

TEST(AmdgpuDriver, BuiltAgainstTheHsaHeadersWhereTheyAreInstalled) {
  // CI installs libhsa-runtime-dev: there the driver must be compiled in, not the stub.
  if (access("/usr/include/hsa/hsa.h", F_OK) != 0) GTEST_SKIP() << "no /usr/include/hsa/hsa.h (libhsa-runtime-dev)";
  EXPECT_EQ(LOOM_HRX_HAVE_HSA, 1);
  EXPECT_EQ(hrx::Device::amdgpu_status().message().find("built without"), std::string::npos);
}

TEST(AmdgpuDriver, CodeObjectEntryPointValidatesOnEveryDevice) {
  // The C API's checks run before any driver: null arguments, and a code object given to a
  // device that does not run them.
  hrx_module* m = reinterpret_cast<hrx_module*>(1);
  EXPECT_EQ(hrx_module_load_code_object(nullptr, "x", 1, &m), HRX_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(hrx_device_count(HRX_DRIVER_AMDGPU, nullptr), HRX_INVALID_ARGUMENT);
  hrx_device* cpu = nullptr;
  ASSERT_EQ(hrx_device_open("cpu", &cpu), HRX_OK);
  EXPECT_EQ(hrx_module_load_code_object(cpu, nullptr, 16, &m), HRX_INVALID_ARGUMENT);
  auto co = codegen::amdgpu_target().compile(parse_ir(kVectorAddIr), "gfx1100");
  ASSERT_TRUE(co.ok()) << co.status().to_string();
  EXPECT_EQ(hrx_module_load_code_object(cpu, co->binary.data(), co->binary.size(), &m), HRX_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hrx_last_error()).find("cannot load an AMDGPU code object"), std::string::npos)
      << hrx_last_error();
  auto via_cpp = hrx::Module::load_code_object(*hrx::Device::open("cpu"), co->binary);
  EXPECT_EQ(via_cpp.status().code(), StatusCode::kInvalidArgument);
}

// A code object of the IR for gfx1100, built by llc-19 and ld.lld-19.
codegen::AmdgpuKernelInfo kernel_of(const char* ir_text, const char* name) {
  auto co = codegen::amdgpu_target().compile(parse_ir(ir_text), "gfx1100");
  if (!co.ok()) {
    ADD_FAILURE() << co.status().to_string();
    return {};
  }
  auto info = codegen::read_amdgpu_code_object(co->binary);
  if (!info.ok()) {
    ADD_FAILURE() << info.status().to_string();
    return {};
  }
  for (const auto& k : info->kernels)
    if (k.name == name) return k;
  ADD_FAILURE() << "no kernel " << name;
  return {};
}

template <typename T>
T read_at(const std::vector<uint8_t>& seg, const codegen::AmdgpuKernelInfo& k, std::string_view kind) {
  for (const auto& a : k.args)
    if (a.value_kind == kind) {
      EXPECT_EQ(a.size, static_cast<int64_t>(sizeof(T))) << kind;
      T v{};
      std::memcpy(&v, seg.data() + a.offset, sizeof(T));
      return v;
    }
  ADD_FAILURE() << "no argument " << kind;
  return T{};
}

TEST(AmdgpuDispatch, KernargsFollowTheCodeObjectsMetadata) {
  const codegen::AmdgpuKernelInfo k = kernel_of(kVectorAddIr, "vector_add");
  ASSERT_EQ(k.name, "vector_add");
  ASSERT_EQ(explicit_arg_count(k), 4u);
  // Explicit parameters as the AMDGPU ABI lays them out: three pointers, then the i32.
  EXPECT_EQ(k.args[0].value_kind, "global_buffer");
  EXPECT_EQ(k.args[3].value_kind, "by_value");
  EXPECT_EQ(k.args[1].offset, 8);
  EXPECT_EQ(k.args[3].offset, 24);
  EXPECT_EQ(k.args[3].size, 4);
  ASSERT_GE(k.kernarg_segment_size, 64);

  const uint64_t a = 0x7f0000001000, b = 0x7f0000002000, c = 0x7f0000003000;
  const int32_t n = 1000;
  hrx::KernelArgs args = hrx::KernelArgs().address(a).address(b).address(c).i32(n);
  const hrx_launch_config config{{4, 1, 1}, {256, 1, 1}, 0};
  std::vector<uint8_t> seg(static_cast<size_t>(k.kernarg_segment_size), 0xcd);
  ASSERT_TRUE(pack_kernargs(k, config, args.data(), args.count(), nullptr, seg).ok());
  std::vector<uint8_t> with_sizes(seg.size());
  ASSERT_TRUE(pack_kernargs(k, config, args.data(), args.count(), args.sizes(), with_sizes).ok());
  EXPECT_EQ(with_sizes, seg) << "KernelArgs' own sizes give the same segment";
  uint64_t got = 0;
  std::memcpy(&got, seg.data() + k.args[2].offset, 8);
  EXPECT_EQ(got, c);
  int32_t got_n = 0;
  std::memcpy(&got_n, seg.data() + 24, 4);
  EXPECT_EQ(got_n, n);
  EXPECT_EQ(seg[28], 0) << "bytes between parameters are zeroed";
  EXPECT_EQ(read_at<uint32_t>(seg, k, "hidden_block_count_x"), 4u);
  EXPECT_EQ(read_at<uint32_t>(seg, k, "hidden_block_count_y"), 1u);
  EXPECT_EQ(read_at<uint16_t>(seg, k, "hidden_group_size_x"), 256);
  EXPECT_EQ(read_at<uint16_t>(seg, k, "hidden_group_size_z"), 1);
  EXPECT_EQ(read_at<uint16_t>(seg, k, "hidden_remainder_x"), 0);
  EXPECT_EQ(read_at<uint16_t>(seg, k, "hidden_grid_dims"), 1);
  EXPECT_EQ(read_at<uint64_t>(seg, k, "hidden_global_offset_x"), 0u);

  // Wrong parameter counts and sizes are errors, not reads past the caller's values.
  auto three = hrx::KernelArgs().address(a).address(b).address(c);
  Status st = pack_kernargs(k, config, three.data(), three.count(), nullptr, seg);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("takes 4 parameters"), std::string::npos) << st.to_string();
  const uint32_t sizes[] = {8, 8, 4, 4};
  st = pack_kernargs(k, config, args.data(), args.count(), sizes, seg);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  std::vector<uint8_t> small(16);
  EXPECT_FALSE(pack_kernargs(k, config, args.data(), args.count(), nullptr, small).ok());
}

TEST(AmdgpuDispatch, GeometryCountsWorkItems) {
  const codegen::AmdgpuKernelInfo k = kernel_of(kDims3dIr, "dims3d");
  ASSERT_FALSE(k.name.empty());
  const hrx_launch_config config{{3, 2, 5}, {8, 4, 2}, 0};
  auto g = dispatch_geometry(config);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->dimensions, 3);
  EXPECT_EQ(g->grid_items[0], 24u);
  EXPECT_EQ(g->grid_items[1], 8u);
  EXPECT_EQ(g->grid_items[2], 10u);
  EXPECT_EQ(g->workgroup[2], 2);
  std::vector<uint8_t> seg(static_cast<size_t>(k.kernarg_segment_size));
  hrx::KernelArgs args = hrx::KernelArgs().address(0x1000).address(0x2000);
  ASSERT_TRUE(pack_kernargs(k, config, args.data(), args.count(), nullptr, seg).ok());
  EXPECT_EQ(read_at<uint32_t>(seg, k, "hidden_block_count_z"), 5u);
  EXPECT_EQ(read_at<uint16_t>(seg, k, "hidden_group_size_y"), 4);
  EXPECT_EQ(read_at<uint16_t>(seg, k, "hidden_grid_dims"), 3);
  // One dimension: 1; a grid of 2^32 work-items or more does not fit the packet.
  auto one = dispatch_geometry({{7, 1, 1}, {64, 1, 1}, 0});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->dimensions, 1);
  auto y_only = dispatch_geometry({{1, 3, 1}, {1, 1, 1}, 0});
  ASSERT_TRUE(y_only.ok());
  EXPECT_EQ(y_only->dimensions, 2);
  auto huge = dispatch_geometry({{1u << 23, 1, 1}, {1024, 1, 1}, 0});
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::test
