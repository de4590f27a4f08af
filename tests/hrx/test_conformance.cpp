// The HRX conformance suite: one set of tests, run against every device (cpu always; each CUDA
// device, or a visible skip with the reason when there is none). Kernels come from Loom IR
// through Module::compile, so this also covers the codegen glue of each driver.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "hrx_test_util.h"
#include "loom/codegen/cpp/host_compiler.h"
#include "loom/codegen/target.h"

namespace loom::test {
namespace {

using hrx::Buffer;
using hrx::Device;
using hrx::Event;
using hrx::Graph;
using hrx::Kernel;
using hrx::KernelArgs;
using hrx::MemoryKind;
using hrx::Module;
using hrx::Stream;

#define ASSERT_OK(expr)                                     \
  do {                                                      \
    ::loom::Status s_ = ::loom::detail::to_status(expr);    \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.to_string(); \
  } while (0)

#define ASSERT_OK_AND_ASSIGN(lhs, expr)                              \
  auto LOOM_CONCAT(r_, __LINE__) = (expr);                           \
  ASSERT_TRUE(LOOM_CONCAT(r_, __LINE__).ok()) << #expr << ": "       \
      << LOOM_CONCAT(r_, __LINE__).status().to_string();             \
  lhs = std::move(LOOM_CONCAT(r_, __LINE__)).value()

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-1000, 1000);  // exact in f32, so sums compare exactly
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(rng)) / 8.0f;
  return v;
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto d = Device::open(GetParam());
    if (!d.ok()) {
      if (GetParam().starts_with("amdgpu")) GTEST_SKIP() << d.status().message();  // "no AMD GPU: <why>"
      if (GetParam() != "cpu") GTEST_SKIP() << "no CUDA device to test: " << d.status().to_string();
      FAIL() << d.status().to_string();
    }
    dev_ = *d;
    auto s = Stream::create(dev_);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    stream_ = std::move(*s);
  }

  bool is_cuda() const { return dev_.driver() == hrx::DriverKind::kCuda; }
  bool is_amdgpu() const { return dev_.driver() == hrx::DriverKind::kAmdgpu; }
  bool is_gpu() const { return dev_.driver() != hrx::DriverKind::kCpu; }

  Result<Kernel> compile(const char* ir_text, const char* name) {
    ir::Module m = parse_ir(ir_text);
    LOOM_ASSIGN_OR_RETURN(Module mod, Module::compile(dev_, m));
    return mod.kernel(name);
  }

  Device dev_;
  Stream stream_;
  std::mt19937 rng_{20261129};
};

TEST_P(Conformance, PropertiesAreSane) {
  const auto& p = dev_.props();
  EXPECT_FALSE(p.name.empty());
  EXPECT_GT(p.compute_units, 0);
  EXPECT_GT(p.memory_bytes, uint64_t{1} << 28);
  EXPECT_EQ(p.max_threads_per_block, 1024u);
  EXPECT_EQ(p.warp_size, 32);
  EXPECT_GE(p.max_shared_per_block, 48u * 1024);
  if (is_cuda()) {
    EXPECT_EQ(p.arch, fmt::format("sm_{}{}", p.cc_major, p.cc_minor));
    EXPECT_GE(p.cc_major, 5);
    EXPECT_EQ(p.spec, fmt::format("cuda:{}", p.ordinal));
    EXPECT_GT(p.clock_khz, 100000);
    EXPECT_GT(p.memory_clock_khz, 100000);
    EXPECT_GE(p.memory_bus_width_bits, 64);
    EXPECT_GT(p.l2_bytes, uint64_t{1} << 20);
    EXPECT_GE(p.max_shared_per_block_optin, p.max_shared_per_block);
    EXPECT_GT(p.driver_version, 10000);
    EXPECT_GT(p.peak_bandwidth_gbs(), 100.0);
    EXPECT_EQ(dev_.target(), ir::TargetKind::kPtx);
  } else if (is_amdgpu()) {
    EXPECT_TRUE(p.arch.starts_with("gfx")) << p.arch;
    EXPECT_EQ(p.spec, fmt::format("amdgpu:{}", p.ordinal));
    EXPECT_GT(p.clock_khz, 100000);
    EXPECT_GE(p.memory_bus_width_bits, 64);
    EXPECT_EQ(p.max_shared_per_block_optin, p.max_shared_per_block);
    EXPECT_EQ(dev_.target(), ir::TargetKind::kAmdgpu);
  } else {
    EXPECT_EQ(p.arch, "cpu");
    EXPECT_EQ(p.spec, "cpu");
    EXPECT_GE(p.worker_threads, 1);
    EXPECT_EQ(dev_.target(), ir::TargetKind::kCpp);
  }
  // The same spec names the same device; enumerate lists it.
  auto again = Device::open(p.spec);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->raw(), dev_.raw());
  bool listed = false;
  for (const Device& d : Device::enumerate()) listed |= d.raw() == dev_.raw();
  EXPECT_TRUE(listed);
}

TEST_P(Conformance, AllocAndFree) {
  const int64_t live = hrx_live_handles(HRX_HANDLE_BUFFER);
  for (MemoryKind kind : {MemoryKind::kDevice, MemoryKind::kHostPinned}) {
    for (uint64_t size : {uint64_t{1}, uint64_t{7}, uint64_t{64}, uint64_t{4096}, uint64_t{3} << 20}) {
      ASSERT_OK_AND_ASSIGN(Buffer b, Buffer::alloc(dev_, size, kind));
      EXPECT_EQ(b.size(), size);
      EXPECT_NE(b.address(), 0u);
      EXPECT_EQ(b.address() % 64, 0u) << "size " << size;
      EXPECT_EQ(b.host_pointer() != nullptr, kind == MemoryKind::kHostPinned || !is_gpu());
      EXPECT_EQ(hrx_live_handles(HRX_HANDLE_BUFFER), live + 1);
    }
    // Zero bytes: a valid, empty buffer; empty copies succeed, a one-byte copy does not.
    ASSERT_OK_AND_ASSIGN(Buffer z, Buffer::alloc(dev_, 0, kind));
    EXPECT_EQ(z.size(), 0u);
    uint8_t byte = 1;
    ASSERT_OK(stream_.copy_h2d(z, 0, &byte, 0));
    EXPECT_EQ(stream_.copy_h2d(z, 0, &byte, 1).code(), StatusCode::kOutOfRange);
    // Far too large: a clean error, nothing leaked.
    auto huge = Buffer::alloc(dev_, uint64_t{1} << 52, kind);
    ASSERT_FALSE(huge.ok());
    EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted) << huge.status().to_string();
    EXPECT_FALSE(huge.status().message().empty());
  }
  EXPECT_EQ(hrx_live_handles(HRX_HANDLE_BUFFER), live);
  // Buffers survive being moved.
  ASSERT_OK_AND_ASSIGN(Buffer a, Buffer::alloc(dev_, 128));
  uint64_t addr = a.address();
  Buffer b = std::move(a);
  EXPECT_EQ(b.address(), addr);
  EXPECT_EQ(a.raw(), nullptr);
}

TEST_P(Conformance, CopiesRoundTripWithOffsets) {
  for (MemoryKind kind : {MemoryKind::kDevice, MemoryKind::kHostPinned}) {
    SCOPED_TRACE(kind == MemoryKind::kDevice ? "device memory" : "pinned host memory");
    std::vector<uint8_t> src(1000), back(1000, 0);
    for (auto& x : src) x = static_cast<uint8_t>(rng_());
    ASSERT_OK_AND_ASSIGN(Buffer a, Buffer::alloc(dev_, 2048, kind));
    ASSERT_OK_AND_ASSIGN(Buffer b, Buffer::alloc(dev_, 1500, MemoryKind::kDevice));
    ASSERT_OK(stream_.copy_h2d(a, 13, src.data(), src.size()));
    ASSERT_OK(stream_.copy_d2d(b, 101, a, 13, src.size()));
    ASSERT_OK(stream_.copy_d2d(a, 1024, b, 101, src.size()));  // and back into the other kind
    ASSERT_OK(stream_.copy_d2h(back.data(), a, 1024, back.size()));
    ASSERT_OK(stream_.synchronize());
    EXPECT_EQ(back, src);
    std::vector<uint8_t> part(10);
    ASSERT_OK(stream_.copy_d2h(part.data(), b, 101 + 500, part.size()));
    ASSERT_OK(stream_.synchronize());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), src.begin() + 500));

    // Out of bounds, including offsets that would overflow.
    EXPECT_EQ(stream_.copy_h2d(a, 2000, src.data(), 49).code(), StatusCode::kOutOfRange);
    EXPECT_EQ(stream_.copy_d2h(back.data(), a, 2049, 0).code(), StatusCode::kOutOfRange);
    EXPECT_EQ(stream_.copy_d2d(b, 0, a, UINT64_MAX - 4, 8).code(), StatusCode::kOutOfRange);
    EXPECT_EQ(stream_.copy_d2d(b, 1, a, 0, 1500).code(), StatusCode::kOutOfRange);
    EXPECT_EQ(stream_.memset(a, 1, 0, 2048).code(), StatusCode::kOutOfRange);
  }
}

TEST_P(Conformance, Memset) {
  for (MemoryKind kind : {MemoryKind::kDevice, MemoryKind::kHostPinned}) {
    std::vector<uint8_t> src(1024), back(1024);
    for (auto& x : src) x = static_cast<uint8_t>(rng_() | 1);  // never 0xAB's complement issues
    ASSERT_OK_AND_ASSIGN(Buffer a, Buffer::alloc(dev_, src.size(), kind));
    ASSERT_OK(stream_.copy_h2d(a, 0, src.data(), src.size()));
    ASSERT_OK(stream_.memset(a, 17, 0xAB, 300));
    ASSERT_OK(stream_.copy_d2h(back.data(), a, 0, back.size()));
    ASSERT_OK(stream_.synchronize());
    for (size_t i = 0; i < back.size(); ++i) {
      uint8_t want = i >= 17 && i < 317 ? 0xAB : src[i];
      ASSERT_EQ(back[i], want) << "byte " << i;
    }
  }
}

TEST_P(Conformance, VectorAddFromIrWithGuardBytes) {
  ASSERT_OK_AND_ASSIGN(Kernel add, compile(kVectorAddIr, "vector_add"));
  constexpr int n = 1000, guard = 64;  // n not a multiple of the block: the bounds check matters
  auto a = random_floats(n, rng_), b = random_floats(n, rng_);
  std::vector<float> c_init(n + 2 * guard);
  for (auto& x : c_init) x = -12345.5f;
  const uint64_t bytes = (n + 2 * guard) * sizeof(float);
  ASSERT_OK_AND_ASSIGN(Buffer da, Buffer::alloc(dev_, n * 4));
  ASSERT_OK_AND_ASSIGN(Buffer db, Buffer::alloc(dev_, n * 4));
  ASSERT_OK_AND_ASSIGN(Buffer dc, Buffer::alloc(dev_, bytes));
  ASSERT_OK(stream_.copy_h2d(da, 0, a.data(), n * 4));
  ASSERT_OK(stream_.copy_h2d(db, 0, b.data(), n * 4));
  ASSERT_OK(stream_.copy_h2d(dc, 0, c_init.data(), bytes));
  ASSERT_OK(stream_.launch(add, {(n + 255) / 256}, {256},
                           KernelArgs().buffer(da).buffer(db).buffer(dc, guard * 4).i32(n)));
  std::vector<float> c(n + 2 * guard);
  ASSERT_OK(stream_.copy_d2h(c.data(), dc, 0, bytes));
  ASSERT_OK(stream_.synchronize());
  for (int i = 0; i < guard; ++i) {
    ASSERT_EQ(c[i], -12345.5f) << "guard before, element " << i;
    ASSERT_EQ(c[guard + n + i], -12345.5f) << "guard after, element " << i;
  }
  for (int i = 0; i < n; ++i) ASSERT_EQ(c[guard + i], a[i] + b[i]) << "element " << i;
}

TEST_P(Conformance, ThreeDimensionalGridAndBlock) {
  ASSERT_OK_AND_ASSIGN(Kernel k, compile(kDims3dIr, "dims3d"));
  const hrx::Dim3 grid{3, 2, 5}, block{4, 2, 3};
  const uint32_t w = grid.x * block.x, h = grid.y * block.y, d = grid.z * block.z, total = w * h * d;
  ASSERT_OK_AND_ASSIGN(Buffer pos, Buffer::alloc(dev_, total * 4));
  ASSERT_OK_AND_ASSIGN(Buffer dims, Buffer::alloc(dev_, total * 4));
  ASSERT_OK(stream_.memset(pos, 0, 0xFF, total * 4));
  ASSERT_OK(stream_.launch(k, grid, block, KernelArgs().buffer(pos).buffer(dims)));
  std::vector<int32_t> p(total), dm(total);
  ASSERT_OK(stream_.copy_d2h(p.data(), pos, 0, total * 4));
  ASSERT_OK(stream_.copy_d2h(dm.data(), dims, 0, total * 4));
  ASSERT_OK(stream_.synchronize());
  const int32_t want_dims = static_cast<int32_t>(grid.x | grid.y << 4 | grid.z << 8 | block.x << 12 | block.y << 18 |
                                                 block.z << 24);
  for (uint32_t z = 0; z < d; ++z)
    for (uint32_t y = 0; y < h; ++y)
      for (uint32_t x = 0; x < w; ++x) {
        uint32_t i = x + w * (y + h * z);
        ASSERT_EQ(p[i], static_cast<int32_t>(x | y << 10 | z << 20)) << x << "," << y << "," << z;
        ASSERT_EQ(dm[i], want_dims) << x << "," << y << "," << z;
      }
}

TEST_P(Conformance, StreamRunsWorkInOrder) {
  // Each round uploads fresh x, accumulates y = 2y + x on the device, then downloads y; nothing
  // synchronizes until the end, so any reordering shows up in the per-round snapshots.
  ASSERT_OK_AND_ASSIGN(Kernel axpy, compile(kAxpyIr, "axpy"));
  constexpr int n = 4096, rounds = 12;
  ASSERT_OK_AND_ASSIGN(Buffer y, Buffer::alloc(dev_, n * 4));
  ASSERT_OK_AND_ASSIGN(Buffer x, Buffer::alloc(dev_, n * 4));
  ASSERT_OK(stream_.memset(y, 0, 0, n * 4));
  std::vector<std::vector<float>> xs(rounds), snaps(rounds, std::vector<float>(n));
  std::vector<Buffer> pinned(rounds);
  for (int r = 0; r < rounds; ++r) {
    xs[r].resize(n);
    for (int i = 0; i < n; ++i) xs[r][i] = static_cast<float>((i * 7 + r * 3) % 11);
    ASSERT_OK_AND_ASSIGN(pinned[r], Buffer::alloc(dev_, n * 4, MemoryKind::kHostPinned));
    std::memcpy(pinned[r].host_pointer(), xs[r].data(), n * 4);
    ASSERT_OK(stream_.copy_d2d(x, 0, pinned[r], 0, n * 4));
    ASSERT_OK(stream_.launch(axpy, {n / 256}, {256}, KernelArgs().buffer(y).buffer(x).f32(2.0f).i32(n)));
    ASSERT_OK(stream_.copy_d2h(snaps[r].data(), y, 0, n * 4));
  }
  ASSERT_OK(stream_.synchronize());
  std::vector<float> want(n, 0.0f);
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < n; ++i) want[i] = want[i] * 2.0f + xs[r][i];
    ASSERT_EQ(snaps[r], want) << "round " << r;
  }
}

TEST_P(Conformance, EventsMeasureTime) {
  ASSERT_OK_AND_ASSIGN(Kernel axpy, compile(kAxpyIr, "axpy"));
  constexpr int n = 1 << 20;
  ASSERT_OK_AND_ASSIGN(Buffer y, Buffer::alloc(dev_, n * 4));
  ASSERT_OK_AND_ASSIGN(Buffer x, Buffer::alloc(dev_, n * 4));
  ASSERT_OK(stream_.memset(y, 0, 0, n * 4));
  ASSERT_OK(stream_.memset(x, 0, 0, n * 4));
  ASSERT_OK_AND_ASSIGN(Event start, Event::create(dev_));
  ASSERT_OK_AND_ASSIGN(Event end, Event::create(dev_));
  // Never recorded: a clean error.
  EXPECT_EQ(Event::elapsed_ms(start, end).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_OK(start.record(stream_));
  for (int i = 0; i < 5; ++i)
    ASSERT_OK(stream_.launch(axpy, {n / 256}, {256}, KernelArgs().buffer(y).buffer(x).f32(0.5f).i32(n)));
  ASSERT_OK(end.record(stream_));
  ASSERT_OK(end.synchronize());
  ASSERT_OK_AND_ASSIGN(float ms, Event::elapsed_ms(start, end));
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 10000.0f);
}

TEST_P(Conformance, BadModuleIsAnErrorWithTheLog) {
  if (is_cuda()) {
    auto m = Module::load_ptx(dev_, "this is not PTX");
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("cuModuleLoadDataEx"), std::string::npos) << m.status().to_string();
    // A well-formed header with a bad instruction: the JIT's log names the problem.
    const char* ptx = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n  frobnicate.u32 %r0;\n  ret;\n}\n";
    auto bad = Module::load_ptx(dev_, ptx);
    ASSERT_FALSE(bad.ok());
    const std::string msg = bad.status().to_string();
    EXPECT_NE(msg.find("JIT log:"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("(empty)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("line"), std::string::npos) << msg;
    // A shared object is not a cuda module.
    EXPECT_EQ(Module::load_shared_object(dev_, "/nonexistent.so").status().code(), StatusCode::kInvalidArgument);
  } else if (is_amdgpu()) {
    const std::string junk = "this is not a code object";
    auto m = Module::load_code_object(dev_, {reinterpret_cast<const uint8_t*>(junk.data()), junk.size()});
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find("not an AMDGPU code object"), std::string::npos) << m.status().to_string();
    EXPECT_EQ(Module::load_ptx(dev_, ".version 8.0").status().code(), StatusCode::kInvalidArgument);
  } else {
    EXPECT_EQ(Module::load_ptx(dev_, ".version 8.0").status().code(), StatusCode::kInvalidArgument);
    auto missing = Module::load_shared_object(dev_, "/nonexistent/kernels.so");
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.status().to_string().find("/nonexistent/kernels.so"), std::string::npos);
    auto not_elf = Module::load_shared_object(dev_, LOOM_SOURCE_DIR "/tests/hrx/hrx_test_util.h");
    EXPECT_FALSE(not_elf.ok());
  }
}

TEST_P(Conformance, MissingKernelIsNotFound) {
  ir::Module ir = parse_ir(kVectorAddIr);
  ASSERT_OK_AND_ASSIGN(Module m, Module::compile(dev_, ir));
  auto k = m.kernel("vector_sub");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), StatusCode::kNotFound) << k.status().to_string();
  EXPECT_NE(k.status().message().find("vector_sub"), std::string::npos) << k.status().to_string();
  // A present kernel twice: the same handle.
  ASSERT_OK_AND_ASSIGN(Kernel k1, m.kernel("vector_add"));
  ASSERT_OK_AND_ASSIGN(Kernel k2, m.kernel("vector_add"));
  EXPECT_EQ(k1.raw(), k2.raw());
}

TEST_P(Conformance, BadLaunchShapesAreErrors) {
  ASSERT_OK_AND_ASSIGN(Kernel add, compile(kVectorAddIr, "vector_add"));
  ASSERT_OK_AND_ASSIGN(Buffer b, Buffer::alloc(dev_, 4096));
  KernelArgs args = KernelArgs().buffer(b).buffer(b).buffer(b).i32(0);
  auto code = [&](hrx::Dim3 g, hrx::Dim3 bl, uint32_t shared = 0) {
    Status s = stream_.launch(add, g, bl, args, shared);
    if (!s.ok()) {
      EXPECT_FALSE(s.message().empty());
    }
    return s.code();
  };
  EXPECT_EQ(code({1}, {1025}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({1}, {32, 32, 2}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({0}, {32}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({1, 0, 1}, {32}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({1}, {0}), StatusCode::kInvalidArgument);
  const uint32_t too_much_shared = dev_.props().max_shared_per_block_optin + 1;
  EXPECT_EQ(code({1}, {32}, too_much_shared), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({1}, {1024}), StatusCode::kOk);  // the limit itself is fine
  if (is_cuda()) {
    EXPECT_EQ(code({1}, {32}, 64 * 1024), StatusCode::kOk);  // > 48 KiB: opted in
  }
  ASSERT_OK(stream_.synchronize());
}

TEST_P(Conformance, GraphReplayMatchesDirectLaunches) {
  ASSERT_OK_AND_ASSIGN(Kernel axpy, compile(kAxpyIr, "axpy"));
  constexpr int n = 3000, launches = 6, replays = 4;
  const uint32_t blocks = (n + 127) / 128;
  std::vector<float> x0(n), y0(n);
  for (int i = 0; i < n; ++i) {
    x0[i] = static_cast<float>(i % 5);
    y0[i] = static_cast<float>(i % 3);
  }
  ASSERT_OK_AND_ASSIGN(Buffer x, Buffer::alloc(dev_, n * 4));
  ASSERT_OK_AND_ASSIGN(Buffer y, Buffer::alloc(dev_, n * 4));
  ASSERT_OK_AND_ASSIGN(Buffer y_pinned, Buffer::alloc(dev_, n * 4, MemoryKind::kHostPinned));
  std::memcpy(y_pinned.host_pointer(), y0.data(), n * 4);
  ASSERT_OK(stream_.copy_h2d(x, 0, x0.data(), n * 4));
  auto enqueue_step = [&](Stream& s) -> Status {
    // The scale differs per launch: captured argument values must be kept per launch.
    for (int l = 0; l < launches; ++l) {
      KernelArgs args;
      args.buffer(y).buffer(x).f32(l % 2 ? 2.0f : -1.0f).i32(n);
      LOOM_RETURN_IF_ERROR(s.launch(axpy, {blocks}, {128}, args));
    }
    return Status();
  };
  // Direct launches.
  ASSERT_OK(stream_.copy_h2d(y, 0, y0.data(), n * 4));
  for (int r = 0; r < replays; ++r) ASSERT_OK(enqueue_step(stream_));
  std::vector<float> direct(n), replayed(n), untouched(n);
  ASSERT_OK(stream_.copy_d2h(direct.data(), y, 0, n * 4));
  ASSERT_OK(stream_.synchronize());

  // The same through a graph (the reset copy captured too, from pinned memory).
  ASSERT_OK(stream_.copy_h2d(y, 0, y0.data(), n * 4));
  ASSERT_OK(stream_.synchronize());
  ASSERT_OK(stream_.begin_capture());
  ASSERT_OK(stream_.copy_d2d(y, 0, y_pinned, 0, n * 4));
  ASSERT_OK(enqueue_step(stream_));
  ASSERT_OK_AND_ASSIGN(Graph g, stream_.end_capture());
  ASSERT_EQ(hrx_live_handles(HRX_HANDLE_GRAPH) >= 1, true);
  // Capturing ran nothing.
  ASSERT_OK(stream_.memset(y, 0, 0, 0));
  ASSERT_OK(stream_.copy_d2h(untouched.data(), y, 0, n * 4));
  ASSERT_OK(stream_.synchronize());
  EXPECT_EQ(untouched, y0);
  ASSERT_OK(g.launch(stream_));  // resets y, then one step
  // Later replays must not reset y: a second graph holds the step alone.
  ASSERT_OK(stream_.begin_capture());
  ASSERT_OK(enqueue_step(stream_));
  ASSERT_OK_AND_ASSIGN(Graph step, stream_.end_capture());
  for (int r = 1; r < replays; ++r) ASSERT_OK(step.launch(stream_));
  ASSERT_OK(stream_.copy_d2h(replayed.data(), y, 0, n * 4));
  ASSERT_OK(stream_.synchronize());
  EXPECT_EQ(replayed, direct);
  // The direct result is not trivially the input.
  EXPECT_NE(direct, y0);

  // Graphs replay on another stream of the same device too.
  ASSERT_OK_AND_ASSIGN(Stream other, Stream::create(dev_));
  ASSERT_OK(g.launch(other));
  for (int r = 1; r < replays; ++r) ASSERT_OK(step.launch(other));
  std::vector<float> again(n);
  ASSERT_OK(other.copy_d2h(again.data(), y, 0, n * 4));
  ASSERT_OK(other.synchronize());
  EXPECT_EQ(again, direct);
  // end_capture without begin_capture: a clean error.
  EXPECT_FALSE(stream_.end_capture().ok());
}

TEST_P(Conformance, ManyHandlesCreatedAndFreedLeakNothing) {
  int64_t before[HRX_HANDLE_KIND_COUNT];
  for (int k = 0; k < HRX_HANDLE_KIND_COUNT; ++k) before[k] = hrx_live_handles(static_cast<hrx_handle_kind>(k));
  ir::Module ir = parse_ir(kVectorAddIr);
  ASSERT_OK_AND_ASSIGN(Module compiled, Module::compile(dev_, ir));
  // A module the cache does not hold: loaded directly from its code each round.
  std::string code_path_or_ptx;
  std::vector<uint8_t> code_object;
  if (is_amdgpu()) {
    auto co = codegen::amdgpu_target().compile(ir, dev_.props().arch);
    ASSERT_TRUE(co.ok()) << co.status().to_string();
    code_object = co->binary;
  } else if (is_cuda()) {
    auto ptx = codegen::ptx_target().emit(ir, "sm_80");
    ASSERT_TRUE(ptx.ok()) << ptx.status().to_string();
    code_path_or_ptx = *ptx;
  } else {
    auto src = codegen::cpp_target().emit(ir, "native");
    ASSERT_TRUE(src.ok());
    auto so = codegen::compile_shared_object(*src);
    ASSERT_TRUE(so.ok()) << so.status().to_string();
    code_path_or_ptx = *so;
  }
  const int64_t modules_with_cache = hrx_live_handles(HRX_HANDLE_MODULE);
  for (int round = 0; round < 40; ++round) {
    std::vector<Buffer> bufs;
    for (int i = 0; i < 8; ++i) {
      ASSERT_OK_AND_ASSIGN(Buffer b, Buffer::alloc(dev_, 1024 * (i + 1), i % 2 ? MemoryKind::kHostPinned
                                                                                : MemoryKind::kDevice));
      bufs.push_back(std::move(b));
    }
    ASSERT_OK_AND_ASSIGN(Stream s, Stream::create(dev_));
    ASSERT_OK_AND_ASSIGN(Event e, Event::create(dev_));
    Module m;
    if (is_amdgpu()) {
      ASSERT_OK_AND_ASSIGN(m, Module::load_code_object(dev_, code_object));
    } else if (is_cuda()) {
      ASSERT_OK_AND_ASSIGN(m, Module::load_ptx(dev_, code_path_or_ptx));
    } else {
      ASSERT_OK_AND_ASSIGN(m, Module::load_shared_object(dev_, code_path_or_ptx));
    }
    ASSERT_OK_AND_ASSIGN(Kernel k, m.kernel("vector_add"));
    m.reset();  // the kernel keeps its module alive
    EXPECT_EQ(hrx_live_handles(HRX_HANDLE_MODULE), modules_with_cache + 1);
    ASSERT_OK(s.begin_capture());
    ASSERT_OK(s.launch(k, {4}, {256}, KernelArgs().buffer(bufs[0]).buffer(bufs[2]).buffer(bufs[4]).i32(256)));
    ASSERT_OK_AND_ASSIGN(Graph g, s.end_capture());
    ASSERT_OK(g.launch(s));
    ASSERT_OK(e.record(s));
    ASSERT_OK(e.synchronize());
    EXPECT_EQ(hrx_live_handles(HRX_HANDLE_BUFFER), before[HRX_HANDLE_BUFFER] + 8);
    EXPECT_EQ(hrx_live_handles(HRX_HANDLE_STREAM), before[HRX_HANDLE_STREAM] + 1);
    EXPECT_EQ(hrx_live_handles(HRX_HANDLE_GRAPH), before[HRX_HANDLE_GRAPH] + 1);
  }
  EXPECT_EQ(hrx_live_handles(HRX_HANDLE_MODULE), modules_with_cache);
  compiled.reset();
  hrx::clear_compile_cache(dev_);
  for (int k = 0; k < HRX_HANDLE_KIND_COUNT; ++k)
    EXPECT_LE(hrx_live_handles(static_cast<hrx_handle_kind>(k)), before[k]) << "handle kind " << k;
}

TEST_P(Conformance, CompilingTheSameIrTwiceIsFree) {
  ir::Module ir = parse_ir(kAxpyIr);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(Module a, Module::compile(dev_, ir));
  auto t1 = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(Module b, Module::compile(dev_, ir));
  auto t2 = std::chrono::steady_clock::now();
  EXPECT_EQ(a.raw(), b.raw());
  EXPECT_GE(hrx::compile_cache_size(dev_), 1u);
  // The second call only emits and hashes: far below a compile or JIT load.
  EXPECT_LT(std::chrono::duration<double>(t2 - t1).count(), 0.05);
  (void)t0;
}

TEST_P(Conformance, StreamsOnSeveralThreads) {
  ASSERT_OK_AND_ASSIGN(Kernel axpy, compile(kAxpyIr, "axpy"));
  constexpr int n = 2048, iters = 50, threads = 3;
  std::vector<std::string> errors(threads);
  std::vector<std::vector<float>> results(threads, std::vector<float>(n));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      auto run = [&]() -> Status {
        LOOM_ASSIGN_OR_RETURN(Stream s, Stream::create(dev_));
        LOOM_ASSIGN_OR_RETURN(Buffer y, Buffer::alloc(dev_, n * 4));
        LOOM_ASSIGN_OR_RETURN(Buffer x, Buffer::alloc(dev_, n * 4));
        std::vector<float> ones(n, static_cast<float>(t + 1));
        LOOM_RETURN_IF_ERROR(s.memset(y, 0, 0, n * 4));
        LOOM_RETURN_IF_ERROR(s.copy_h2d(x, 0, ones.data(), n * 4));
        for (int i = 0; i < iters; ++i)
          LOOM_RETURN_IF_ERROR(s.launch(axpy, {n / 64}, {64}, KernelArgs().buffer(y).buffer(x).f32(1.0f).i32(n)));
        LOOM_RETURN_IF_ERROR(s.copy_d2h(results[t].data(), y, 0, n * 4));
        return s.synchronize();
      };
      Status st = run();
      if (!st.ok()) errors[t] = st.to_string();
    });
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(errors[t], "");
    EXPECT_EQ(results[t], std::vector<float>(n, static_cast<float>(iters * (t + 1)))) << "thread " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Conformance, ::testing::ValuesIn(hrx_device_specs()),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == ':') c = '_';
                           return name;
                         });

TEST(HrxDevices, OpenRejectsBadSpecs) {
  for (const char* spec : {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "cpu:0", "cuda:1x", "amdgpu:", "amdgpu:x",
                           "amdgpu:-1", "amdgpux", "amdgpu:0:0", "hip"}) {
    auto d = Device::open(spec);
    ASSERT_FALSE(d.ok()) << spec;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << spec << ": " << d.status().to_string();
  }
  auto far = Device::open("cuda:999");
  ASSERT_FALSE(far.ok());
  EXPECT_TRUE(far.status().code() == StatusCode::kNotFound || far.status().code() == StatusCode::kUnavailable)
      << far.status().to_string();
}

}  // namespace
}  // namespace loom::test
