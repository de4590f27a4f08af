// kernels::bind_launch_args, the one binder of the plan compile, evolve's evaluator and the op
// harness: the argument bytes for every parameter type (f32 and f64 scalars included), the errors,
// and a kernel that reads them back on the HRX cpu device and through codegen's direct launcher.
#include "loom/kernels/launch_args.h"

#include <gtest/gtest.h>

#include <cstring>

#include "loom/codegen/cpp/host_compiler.h"
#include "loom/hrx/runtime.h"
#include "loom/ir/parser.h"

namespace loom::kernels {
namespace {

using ir::Scalar;
using ir::Type;

template <typename T>
T slot(const hrx::KernelArgs& ka, size_t i) {
  T v;
  std::memcpy(&v, ka.data()[i], sizeof v);
  return v;
}

TEST(LaunchArgs, EachParameterTypeGetsItsBytes) {
  KernelLaunch l;
  l.kernel = "k";
  l.args = {2, 0};
  l.scalars = {7, -3, int64_t{1} << 40, 5};
  const std::vector<uint64_t> addrs = {0x1000, 0x2000, 0x3000};
  const std::vector<Type> types = {Type::scalar(Scalar::kI32), Type::scalar(Scalar::kF32), Type::scalar(Scalar::kI64),
                                   Type::scalar(Scalar::kF64)};
  auto ka = bind_launch_args(l, addrs, types);
  ASSERT_TRUE(ka.ok()) << ka.status().to_string();
  ASSERT_EQ(ka->count(), 6u);
  const std::vector<uint32_t> sizes(ka->sizes(), ka->sizes() + ka->count());
  EXPECT_EQ(sizes, (std::vector<uint32_t>{8, 8, 4, 4, 8, 8}));
  EXPECT_EQ(slot<uint64_t>(*ka, 0), 0x3000u) << "the launch's argument order, not the op's";
  EXPECT_EQ(slot<uint64_t>(*ka, 1), 0x1000u);
  EXPECT_EQ(slot<int32_t>(*ka, 2), 7);
  EXPECT_EQ(slot<float>(*ka, 3), -3.0f) << "an f32 parameter takes the value, not its integer bits";
  EXPECT_EQ(slot<int64_t>(*ka, 4), int64_t{1} << 40);
  EXPECT_EQ(slot<double>(*ka, 5), 5.0);
}

TEST(LaunchArgs, BadIndexOrScalarCountIsAnError) {
  KernelLaunch l;
  l.kernel = "k";
  l.args = {1};
  const std::vector<uint64_t> one = {0x1000};
  auto bad = bind_launch_args(l, one, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("argument 1 of 1"), std::string::npos) << bad.status().to_string();
  l.args = {0};
  l.scalars = {1, 2};
  const std::vector<Type> types = {Type::scalar(Scalar::kI32)};
  auto count = bind_launch_args(l, one, types);
  ASSERT_FALSE(count.ok());
  EXPECT_NE(count.status().to_string().find("passes 2 scalars, the kernel takes 1"), std::string::npos)
      << count.status().to_string();
}

constexpr std::string_view kKernel = R"(
kernel @read_scalars(%out: ptr<global, f32>, %n: i32, %s: f32, %big: i64) {
  %z = const 0 : i32
  %one = const 1 : i32
  %two = const 2 : i32
  %fn = convert %n : f32
  %fb = convert %big : f32
  store %out[%z], %fn
  store %out[%one], %s
  store %out[%two], %fb
}
)";

KernelLaunch read_scalars_launch() {
  KernelLaunch l;
  l.kernel = "read_scalars";
  l.args = {0};
  l.scalars = {7, -3, int64_t{1} << 40};
  return l;
}

TEST(LaunchArgs, ScalarTypesComeFromTheKernel) {
  auto m = ir::parse_module(kKernel, "read_scalars.loom");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  KernelLaunch l = read_scalars_launch();
  auto types = scalar_param_types(*m, l);
  ASSERT_TRUE(types.ok()) << types.status().to_string();
  EXPECT_EQ(*types, (std::vector<Type>{Type::scalar(Scalar::kI32), Type::scalar(Scalar::kF32), Type::scalar(Scalar::kI64)}));
  l.scalars.pop_back();
  EXPECT_FALSE(scalar_param_types(*m, l).ok()) << "a parameter the launch does not pass";
  l.kernel = "absent";
  EXPECT_FALSE(scalar_param_types(*m, l).ok());
}

TEST(LaunchArgs, KernelsReadTheBoundScalarsOnHrxCpu) {
  auto m = ir::parse_module(kKernel, "read_scalars.loom");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const KernelLaunch l = read_scalars_launch();
  auto types = scalar_param_types(*m, l);
  ASSERT_TRUE(types.ok());
  auto dev = hrx::Device::open("cpu");
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  auto stream = hrx::Stream::create(*dev);
  ASSERT_TRUE(stream.ok());
  auto out = hrx::Buffer::alloc(*dev, 3 * sizeof(float));
  ASSERT_TRUE(out.ok());
  auto mod = hrx::Module::compile(*dev, *m);
  ASSERT_TRUE(mod.ok()) << mod.status().to_string();
  auto k = mod->kernel(l.kernel);
  ASSERT_TRUE(k.ok());
  const std::vector<uint64_t> addrs = {out->address()};
  auto ka = bind_launch_args(l, addrs, *types);
  ASSERT_TRUE(ka.ok()) << ka.status().to_string();
  ASSERT_TRUE(stream->launch(*k, hrx::Dim3(1), hrx::Dim3(1), *ka).ok());
  float got[3] = {};
  ASSERT_TRUE(stream->copy_d2h(got, *out, 0, sizeof got).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  EXPECT_EQ(got[0], 7.0f);
  EXPECT_EQ(got[1], -3.0f);
  EXPECT_EQ(got[2], 1099511627776.0f);
}

TEST(LaunchArgs, KernelsReadTheBoundScalarsThroughTheDirectCpuLauncher) {
  auto m = ir::parse_module(kKernel, "read_scalars.loom");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const KernelLaunch l = read_scalars_launch();
  auto types = scalar_param_types(*m, l);
  ASSERT_TRUE(types.ok());
  auto cm = codegen::compile_cpu_module(*m);
  ASSERT_TRUE(cm.ok()) << cm.status().to_string();
  auto fn = cm->kernel(l.kernel);
  ASSERT_TRUE(fn.ok());
  float got[3] = {};
  const std::vector<uint64_t> addrs = {reinterpret_cast<uint64_t>(got)};
  auto ka = bind_launch_args(l, addrs, *types);
  ASSERT_TRUE(ka.ok()) << ka.status().to_string();
  ASSERT_TRUE(codegen::launch_cpu(*fn, ka->data(), l.grid, l.block, 1).ok());
  EXPECT_EQ(got[0], 7.0f);
  EXPECT_EQ(got[1], -3.0f);
  EXPECT_EQ(got[2], 1099511627776.0f);
}

}  // namespace
}  // namespace loom::kernels
