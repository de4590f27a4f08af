// Programmatic dependent launch (hrx.h): results are unchanged when kernels overlap their
// predecessor's tail, captured graphs keep programmatic edges, and only kernels that wait on their
// predecessor grid (Loom's sm_90 PTX) are launched that way.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "hrx_test_util.h"
#include "loom/codegen/target.h"
#include "loom/hrx/cuda_api.h"
#include "loom/hrx/runtime.h"

namespace loom::test {
namespace {

using hrx::Buffer;
using hrx::Device;
using hrx::Graph;
using hrx::Kernel;
using hrx::KernelArgs;
using hrx::Module;
using hrx::Stream;

#define ASSERT_OK(expr)                                      \
  do {                                                       \
    ::loom::Status s_ = (expr);                              \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.to_string(); \
  } while (0)

// dst[i] = src[n - 1 - i] + 1: block b of a launch reads what the last blocks of the launch
// before it wrote, so a kernel that ran ahead of its predecessor's writes would read stale values.
constexpr const char* kReverseStepIr = R"(
kernel @reverse_step(%dst: ptr<global, i32>, %src: ptr<global, i32>, %n: i32) {
  %tid = thread_id.x
  %bid = block_id.x
  %bdim = block_dim.x
  %base = mul %bid, %bdim
  %i = add %base, %tid
  %in = cmp.lt %i, %n
  if %in {
    %c1 = const 1 : i32
    %last = sub %n, %c1
    %j = sub %last, %i
    %v = load %src[%j]
    %w = add %v, %c1
    store %dst[%i], %w
  }
}
)";

TEST(DependentLaunch, CpuStreamsNeverUseIt) {
  auto dev = Device::open("cpu");
  ASSERT_TRUE(dev.ok());
  auto s = Stream::create(*dev);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->dependent_launch());
  EXPECT_FALSE(s->set_dependent_launch(true));
  EXPECT_FALSE(s->dependent_launch());
  int in_effect = 7;
  EXPECT_EQ(hrx_stream_set_dependent_launch(s->raw(), 1, &in_effect), HRX_OK);
  EXPECT_EQ(in_effect, 0);
  EXPECT_EQ(hrx_stream_set_dependent_launch(nullptr, 1, &in_effect), HRX_INVALID_ARGUMENT);
  EXPECT_EQ(hrx_stream_dependent_launch(nullptr), 0);
}

class DependentLaunchCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = Device::open("cuda:0");
    if (!d.ok()) GTEST_SKIP() << "no CUDA device to test: " << d.status().to_string();
    dev_ = *d;
    auto s = Stream::create(dev_);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    stream_ = std::move(*s);
    supported_ = dev_.props().cc_major >= 9;
  }

  // Enqueues `steps` reverse steps ping-ponging between a and b (a holds the input).
  Status steps(const Kernel& k, const Buffer& a, const Buffer& b, int n, int count) {
    for (int s = 0; s < count; ++s) {
      const Buffer& src = s % 2 ? b : a;
      const Buffer& dst = s % 2 ? a : b;
      LOOM_RETURN_IF_ERROR(stream_.launch(k, {static_cast<uint32_t>((n + 127) / 128)}, {128},
                                          KernelArgs().buffer(dst).buffer(src).i32(n)));
    }
    return Status();
  }

  // Host result of `count` reverse steps.
  static std::vector<int32_t> expect(std::vector<int32_t> v, int count) {
    for (int s = 0; s < count; ++s) {
      std::vector<int32_t> next(v.size());
      for (size_t i = 0; i < v.size(); ++i) next[i] = v[v.size() - 1 - i] + 1;
      v.swap(next);
    }
    return v;
  }

  Device dev_;
  Stream stream_;
  bool supported_ = false;
};

TEST_F(DependentLaunchCuda, DefaultFollowsDevice) {
  EXPECT_EQ(stream_.dependent_launch(), supported_);
  EXPECT_FALSE(stream_.set_dependent_launch(false));
  EXPECT_EQ(stream_.set_dependent_launch(true), supported_);
}

TEST_F(DependentLaunchCuda, ChainsOfDependentKernelsStayExact) {
  ir::Module m = parse_ir(kReverseStepIr);
  auto mod = Module::compile(dev_, m);
  ASSERT_TRUE(mod.ok()) << mod.status().to_string();
  auto k = mod->kernel("reverse_step");
  ASSERT_TRUE(k.ok());
  constexpr int n = 1 << 20, count = 64;  // 8192 blocks: several waves, so launches overlap
  std::vector<int32_t> init(n);
  for (int i = 0; i < n; ++i) init[i] = (i * 2654435761u) >> 12;
  const std::vector<int32_t> want = expect(init, count);
  auto a = Buffer::alloc(dev_, n * 4);
  auto b = Buffer::alloc(dev_, n * 4);
  ASSERT_TRUE(a.ok() && b.ok());
  const Buffer& out = count % 2 ? *b : *a;
  for (bool pdl : {false, true}) {
    EXPECT_EQ(stream_.set_dependent_launch(pdl), pdl && supported_);
    // Eager.
    ASSERT_OK(stream_.copy_h2d(*a, 0, init.data(), n * 4));
    ASSERT_OK(steps(*k, *a, *b, n, count));
    std::vector<int32_t> got(n, -1);
    ASSERT_OK(stream_.copy_d2h(got.data(), out, 0, n * 4));
    ASSERT_OK(stream_.synchronize());
    EXPECT_EQ(got, want) << "eager, dependent launch " << pdl;
    // Captured, replayed twice.
    ASSERT_OK(stream_.begin_capture());
    ASSERT_OK(steps(*k, *a, *b, n, count));
    auto g = stream_.end_capture();
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    for (int r = 0; r < 2; ++r) {
      ASSERT_OK(stream_.copy_h2d(*a, 0, init.data(), n * 4));
      ASSERT_OK(g->launch(stream_));
      std::fill(got.begin(), got.end(), -1);
      ASSERT_OK(stream_.copy_d2h(got.data(), out, 0, n * 4));
      ASSERT_OK(stream_.synchronize());
      EXPECT_EQ(got, want) << "graph replay " << r << ", dependent launch " << pdl;
    }
  }
}

// Captures what `enqueue` launches with the driver's own capture and counts programmatic edges.
int programmatic_edges(Stream& s, const std::function<Status()>& enqueue, int* edges) {
  auto cu = hrx::cuda::api();
  if (!cu.ok()) return -1;
  auto cs = static_cast<hrx::cuda::CUstream>(hrx_stream_native_handle(s.raw()));
  if ((*cu)->cuStreamBeginCapture(cs, hrx::cuda::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != 0) return -1;
  Status st = enqueue();
  hrx::cuda::CUgraph g = nullptr;
  if ((*cu)->cuStreamEndCapture(cs, &g) != 0 || !st.ok()) return -1;
  size_t n = 0;
  int programmatic = -1;
  if ((*cu)->cuGraphGetEdges_v2(g, nullptr, nullptr, nullptr, &n) == 0) {
    std::vector<hrx::cuda::CUgraphNode> from(n), to(n);
    std::vector<hrx::cuda::CUgraphEdgeData> data(n);
    if (n == 0 || (*cu)->cuGraphGetEdges_v2(g, from.data(), to.data(), data.data(), &n) == 0) {
      programmatic = 0;
      for (size_t i = 0; i < n; ++i) programmatic += data[i].type == hrx::cuda::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    }
  }
  *edges = static_cast<int>(n);
  (void)(*cu)->cuGraphDestroy(g);
  return programmatic;
}

TEST_F(DependentLaunchCuda, CaptureKeepsProgrammaticEdgesOnlyForKernelsThatWait) {
  if (!supported_) GTEST_SKIP() << dev_.props().name << " has no programmatic dependent launch (sm_90+)";
  auto cu = hrx::cuda::api();
  ASSERT_TRUE(cu.ok());
  if (!(*cu)->cuGraphGetEdges_v2) GTEST_SKIP() << "driver lacks cuGraphGetEdges_v2 (CUDA 12.3+)";
  ir::Module m = parse_ir(kReverseStepIr);
  // sm_90 PTX waits on its predecessor grid; sm_80 PTX of the same kernel does not.
  auto ptx90 = codegen::target(ir::TargetKind::kPtx)->emit(m, "sm_90");
  auto ptx80 = codegen::target(ir::TargetKind::kPtx)->emit(m, "sm_80");
  ASSERT_TRUE(ptx90.ok() && ptx80.ok());
  EXPECT_NE(ptx90->find("griddepcontrol.wait"), std::string::npos);
  EXPECT_EQ(ptx80->find("griddepcontrol"), std::string::npos);
  auto a = Buffer::alloc(dev_, 4096);
  auto b = Buffer::alloc(dev_, 4096);
  ASSERT_TRUE(a.ok() && b.ok());
  for (const std::string* ptx : {&*ptx90, &*ptx80}) {
    auto mod = Module::load_ptx(dev_, *ptx);
    ASSERT_TRUE(mod.ok()) << mod.status().to_string();
    auto k = mod->kernel("reverse_step");
    ASSERT_TRUE(k.ok());
    const bool waits = ptx == &*ptx90;
    for (bool pdl : {false, true}) {
      stream_.set_dependent_launch(pdl);
      int edges = -1;
      int prog = programmatic_edges(stream_, [&] { return steps(*k, *a, *b, 1024, 4); }, &edges);
      EXPECT_EQ(edges, 3);
      EXPECT_EQ(prog, pdl && waits ? 3 : 0) << "kernel waits " << waits << ", dependent launch " << pdl;
    }
  }
}

}  // namespace
}  // namespace loom::test
