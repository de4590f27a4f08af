// HRX device access for the evaluator, cache sizes and peak bandwidth (see device.h).
#include "loom/evolve/device.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "loom/codegen/cpp/host_compiler.h"
#include "loom/codegen/target.h"
#include "loom/ir/parser.h"
#include "loom/ir/verifier.h"
#include "loom/kernels/launch_args.h"
#include "loom/store/load.h"

namespace loom::evolve {
namespace {

// Reads 16-byte vectors grid-stride and keeps one sum per thread (so nothing is dead code).
constexpr std::string_view kReadKernel = R"(
kernel @evolve_read_bw(%src: ptr<global, f32>, %out: ptr<global, f32>, %n4: i32) {
  %tid = thread_id.x
  %bid = block_id.x
  %bdim = block_dim.x
  %gdim = grid_dim.x
  %base = mul %bid, %bdim
  %i0 = add %base, %tid
  %stride = mul %gdim, %bdim
  %z = const 0.0 : f32x4
  %acc = for %i = %i0 to %n4 step %stride iter(%a = %z) : f32x4 {
    %four = const 4 : i32
    %e = mul %i, %four
    %v = load %src[%e], align 16 : f32x4
    %a2 = add %a, %v
    yield %a2
  }
  %s0 = extract %acc[0]
  %s1 = extract %acc[1]
  %s2 = extract %acc[2]
  %s3 = extract %acc[3]
  %t0 = add %s0, %s1
  %t1 = add %s2, %s3
  %t = add %t0, %t1
  store %out[%i0], %t
}
)";

}  // namespace

Result<std::unique_ptr<EvalDevice>> EvalDevice::open(const std::string& spec) {
  LOOM_ASSIGN_OR_RETURN(hrx::Device d, hrx::Device::open(spec));
  LOOM_ASSIGN_OR_RETURN(hrx::Stream s, hrx::Stream::create(d));
  return std::unique_ptr<EvalDevice>(new EvalDevice(d, std::move(s)));
}

uint64_t EvalDevice::llc_bytes() const {
  if (dev_.driver() == hrx::DriverKind::kCuda) return props().l2_bytes ? props().l2_bytes : (50ull << 20);
  uint64_t b = host_llc_bytes();
  return b ? b : (32ull << 20);
}

Result<EvalDevice::Loaded> EvalDevice::load(const Instance& inst) {
  Loaded l;
  l.launches = inst.launches;
  switch (inst.kind) {
    case CandKind::kSchedule:
    case CandKind::kIr: {
      LOOM_RETURN_IF_ERROR(ir::verify(inst.gen.module, target()));
      LOOM_ASSIGN_OR_RETURN(l.module, hrx::Module::compile(dev_, inst.gen.module));
      for (const kernels::KernelLaunch& kl : inst.launches) {
        LOOM_ASSIGN_OR_RETURN(std::vector<ir::Type> types, kernels::scalar_param_types(inst.gen.module, kl));
        l.scalar_types.push_back(std::move(types));
      }
      break;
    }
    case CandKind::kCpp:
    case CandKind::kPtx:
    case CandKind::kCuda: {
      LOOM_ASSIGN_OR_RETURN(l.module, load_text_module(dev_, inst));
      l.scalar_types = inst.scalar_types;
      break;
    }
  }
  for (const kernels::KernelLaunch& kl : l.launches) {
    LOOM_ASSIGN_OR_RETURN(hrx::Kernel k, l.module.kernel(kl.kernel));
    l.kernels.push_back(std::move(k));
  }
  return l;
}

Status EvalDevice::run(const Loaded& l, const std::vector<uint64_t>& addrs) {
  for (size_t i = 0; i < l.launches.size(); ++i) {
    const kernels::KernelLaunch& kl = l.launches[i];
    LOOM_ASSIGN_OR_RETURN(hrx::KernelArgs ka,
                          kernels::bind_launch_args(kl, addrs, i < l.scalar_types.size() ? l.scalar_types[i]
                                                                                          : std::vector<ir::Type>()));
    LOOM_RETURN_IF_ERROR(stream_.launch(l.kernels[i], hrx::Dim3(kl.grid[0], kl.grid[1], kl.grid[2]),
                                        hrx::Dim3(kl.block[0], kl.block[1], kl.block[2]), ka)
                             .with_context("launching " + kl.kernel));
  }
  return stream_.synchronize();
}

Status prebuild(const Instance& inst, ir::TargetKind target) {
  if (target != ir::TargetKind::kCpp) return Status();
  switch (inst.kind) {
    case CandKind::kSchedule:
    case CandKind::kIr: {
      LOOM_RETURN_IF_ERROR(ir::verify(inst.gen.module, target));
      const codegen::Target* t = codegen::target(target);
      LOOM_ASSIGN_OR_RETURN(std::string text, t->emit(inst.gen.module, t->archs().front()));
      return codegen::compile_shared_object(text).status();
    }
    case CandKind::kCpp:
      return codegen::compile_shared_object(cpp_source_for_cpu(inst)).status();
    default:
      return Status();
  }
}

uint64_t host_llc_bytes() {
  uint64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f(fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/size", i));
    std::string s;
    if (!(f >> s) || s.empty()) continue;
    uint64_t v = std::strtoull(s.c_str(), nullptr, 10);
    char unit = s.back();
    if (unit == 'K') v <<= 10;
    else if (unit == 'M') v <<= 20;
    else if (unit == 'G') v <<= 30;
    best = std::max(best, v);
  }
  return best;
}

namespace {

// The cpu peak is measured the way kernels are timed (same pool, same launch path, median of
// launches): a C++ kernel whose blocks each sum one 64 KiB chunk with 32-byte loads; a launch
// reads 4 MiB, launches rotate through 256 MiB. A median of short launches is robust to the
// preemption of a shared machine, where one long pass would be slowed by whatever else runs.
constexpr std::string_view kCpuReadKernel = R"(// launch evolve_read grid=64,1,1 block=1,1,1 args=0,1
#include <immintrin.h>
extern "C" void evolve_read(void* const* args, const LoomLaunchDims* d) {
  const unsigned char* src = *static_cast<const unsigned char* const*>(args[0]);
  unsigned long long* out = *static_cast<unsigned long long* const*>(args[1]);
  for (unsigned long long blk = d->block_begin; blk < d->block_end; ++blk) {
    const __m256i* p = reinterpret_cast<const __m256i*>(src + blk * 65536);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (int i = 0; i < 2048; i += 4) {
      a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(p + i));
      a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(p + i + 1));
      a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(p + i + 2));
      a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(p + i + 3));
    }
    alignas(32) unsigned long long l[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(l), _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    out[blk] = l[0] + l[1] + l[2] + l[3];
  }
}
)";

Result<double> measure_cpu_read_gbps(EvalDevice& d) {
  using clock = std::chrono::steady_clock;
  Instance inst;
  inst.kind = CandKind::kCpp;
  inst.source = std::string(kCpuReadKernel);
  kernels::KernelLaunch kl;
  kl.kernel = "evolve_read";
  kl.grid = {64, 1, 1};
  kl.args = {0, 1};
  inst.launches = {kl};
  inst.scalar_types = {{}};
  LOOM_ASSIGN_OR_RETURN(EvalDevice::Loaded l, d.load(inst));
  const uint64_t launch_bytes = 64ull << 16, total = 256ull << 20, n = total / launch_bytes;
  LOOM_ASSIGN_OR_RETURN(hrx::Buffer src, hrx::Buffer::alloc(d.device(), total));
  LOOM_ASSIGN_OR_RETURN(hrx::Buffer out, hrx::Buffer::alloc(d.device(), 64 * 8));
  LOOM_RETURN_IF_ERROR(d.stream().memset(src, 0, 1, total));
  LOOM_RETURN_IF_ERROR(d.stream().synchronize());
  for (uint64_t i = 0; i < 2 * n; ++i)  // warm-up: two passes
    LOOM_RETURN_IF_ERROR(d.run(l, {src.address() + (i % n) * launch_bytes, out.address()}));
  std::vector<double> t;
  for (uint64_t i = 0; i < 6 * n; ++i) {
    auto t0 = clock::now();
    LOOM_RETURN_IF_ERROR(d.run(l, {src.address() + (i % n) * launch_bytes, out.address()}));
    t.push_back(std::chrono::duration<double>(clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return static_cast<double>(launch_bytes) / t[t.size() / 2] / 1e9;
}

}  // namespace

Result<double> measure_read_gbps(EvalDevice& d) {
  using clock = std::chrono::steady_clock;
  if (d.props().driver != hrx::DriverKind::kCuda) return measure_cpu_read_gbps(d);
  LOOM_ASSIGN_OR_RETURN(ir::Module m, ir::parse_module(kReadKernel, "read_bw.loom"));
  Instance inst;
  inst.kind = CandKind::kIr;
  const uint64_t bytes = 1ull << 30;
  const int32_t n4 = static_cast<int32_t>(bytes / 16);
  kernels::KernelLaunch kl;
  kl.kernel = "evolve_read_bw";
  const uint32_t blocks = static_cast<uint32_t>(std::max(1, d.props().compute_units) * 8);
  kl.grid = {blocks, 1, 1};
  kl.block = {256, 1, 1};
  kl.args = {0, 1};
  kl.scalars = {n4};
  inst.gen.module = std::move(m);
  inst.gen.launches = {kl};
  inst.launches = {kl};
  LOOM_ASSIGN_OR_RETURN(EvalDevice::Loaded l, d.load(inst));
  LOOM_ASSIGN_OR_RETURN(hrx::Buffer src, hrx::Buffer::alloc(d.device(), bytes));
  LOOM_ASSIGN_OR_RETURN(hrx::Buffer out, hrx::Buffer::alloc(d.device(), uint64_t{blocks} * 256 * 4));
  LOOM_RETURN_IF_ERROR(d.stream().memset(src, 0, 0, bytes));
  std::vector<uint64_t> addrs = {src.address(), out.address()};
  LOOM_RETURN_IF_ERROR(d.run(l, addrs));
  double best = 0;
  for (int pass = 0; pass < 5; ++pass) {
    auto t0 = clock::now();
    LOOM_RETURN_IF_ERROR(d.run(l, addrs));
    double s = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

std::string read_gbps_method(EvalDevice& d) {
  if (d.props().driver != hrx::DriverKind::kCuda)
    return fmt::format("{} worker threads summing 4 MiB per launch through 256 MiB, median of 384 launches",
                       d.props().worker_threads);
  return "a Loom IR kernel reading 1 GiB with 16-byte loads, best of 5";
}

}  // namespace loom::evolve
