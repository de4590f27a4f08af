// Differential checking and timing of ops (see op_harness.h). The cpu OpDevice compiles with the
// cpp target and launches on a ThreadPool; it is the seam HRX devices will replace.
#include "loom/kernels/op_harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "loom/base/stats.h"
#include "loom/base/thread_pool.h"
#include "loom/codegen/cpp/host_compiler.h"
#include "loom/hrx/runtime.h"
#include "loom/ir/verifier.h"
#include "loom/kernels/launch_args.h"
#include "loom/kernels/output_compare.h"

namespace loom::kernels {
namespace {

// What a Program's `buffers` hold (host pointers or device addresses), as bind_launch_args takes them.
std::vector<uint64_t> addresses(const std::vector<void*>& buffers) {
  std::vector<uint64_t> a;
  a.reserve(buffers.size());
  for (void* p : buffers) a.push_back(reinterpret_cast<uint64_t>(p));
  return a;
}

class CpuDevice final : public OpDevice {
 public:
  explicit CpuDevice(int threads) : pool_(threads > 0 ? threads : default_thread_count()) {}
  std::string name() const override { return "cpu"; }
  ir::TargetKind target() const override { return ir::TargetKind::kCpp; }

  class CpuProgram final : public Program {
   public:
    CpuProgram(codegen::CpuModule m, std::vector<KernelLaunch> launches, std::vector<codegen::CpuKernelFn> fns,
               std::vector<std::vector<ir::Type>> scalar_types, ThreadPool* pool)
        : module_(std::move(m)), launches_(std::move(launches)), fns_(std::move(fns)),
          scalar_types_(std::move(scalar_types)), pool_(pool) {}
    // `buffers` hold host pointers; the cpu ABI takes each argument through a pointer to its
    // slot, which is what KernelArgs::data() gives.
    Status run(const std::vector<void*>& buffers) override {
      const std::vector<uint64_t> addrs = addresses(buffers);
      for (size_t i = 0; i < launches_.size(); ++i) {
        const KernelLaunch& l = launches_[i];
        LOOM_ASSIGN_OR_RETURN(hrx::KernelArgs ka, bind_launch_args(l, addrs, scalar_types_[i]));
        LOOM_RETURN_IF_ERROR(codegen::launch_cpu(fns_[i], ka.data(), l.grid, l.block, *pool_));
      }
      return Status();
    }

   private:
    codegen::CpuModule module_;
    std::vector<KernelLaunch> launches_;
    std::vector<codegen::CpuKernelFn> fns_;
    std::vector<std::vector<ir::Type>> scalar_types_;
    ThreadPool* pool_;
  };

  Result<std::unique_ptr<Program>> compile(const Generated& g, const std::vector<ArgSpec>&) override {
    LOOM_RETURN_IF_ERROR(ir::verify(g.module, ir::TargetKind::kCpp));
    LOOM_ASSIGN_OR_RETURN(codegen::CpuModule m, codegen::compile_cpu_module(g.module));
    std::vector<codegen::CpuKernelFn> fns;
    std::vector<std::vector<ir::Type>> st;
    for (const KernelLaunch& l : g.launches) {
      LOOM_ASSIGN_OR_RETURN(codegen::CpuKernelFn fn, m.kernel(l.kernel));
      fns.push_back(fn);
      LOOM_ASSIGN_OR_RETURN(std::vector<ir::Type> types, scalar_param_types(g.module, l));
      st.push_back(std::move(types));
    }
    return std::unique_ptr<Program>(new CpuProgram(std::move(m), g.launches, std::move(fns), std::move(st), &pool_));
  }

 private:
  ThreadPool pool_;
};


// Any HRX device ("cpu", "cuda:N"): buffers in device memory, launches on one stream.
class HrxDevice final : public OpDevice {
 public:
  explicit HrxDevice(hrx::Device d, hrx::Stream s) : dev_(d), stream_(std::move(s)) {}
  std::string name() const override { return "hrx:" + dev_.props().spec; }
  ir::TargetKind target() const override { return dev_.target(); }
  hrx::Device& device() { return dev_; }
  hrx::Stream& stream() { return stream_; }

  class HrxProgram final : public Program {
   public:
    HrxProgram(HrxDevice* d, hrx::Module m, std::vector<KernelLaunch> launches, std::vector<hrx::Kernel> ks,
               std::vector<std::vector<ir::Type>> scalar_types)
        : d_(d), module_(std::move(m)), launches_(std::move(launches)), kernels_(std::move(ks)),
          scalar_types_(std::move(scalar_types)) {}
    // `buffers` hold device addresses (as pointers) for this device.
    Status run(const std::vector<void*>& buffers) override {
      const std::vector<uint64_t> addrs = addresses(buffers);
      for (size_t i = 0; i < launches_.size(); ++i) {
        const KernelLaunch& l = launches_[i];
        LOOM_ASSIGN_OR_RETURN(hrx::KernelArgs ka, bind_launch_args(l, addrs, scalar_types_[i]));
        LOOM_RETURN_IF_ERROR(d_->stream().launch(kernels_[i], hrx::Dim3(l.grid[0], l.grid[1], l.grid[2]),
                                                 hrx::Dim3(l.block[0], l.block[1], l.block[2]), ka)
                                 .with_context(fmt::format("launching {}", l.kernel)));
      }
      return d_->stream().synchronize();
    }

   private:
    HrxDevice* d_;
    hrx::Module module_;
    std::vector<KernelLaunch> launches_;
    std::vector<hrx::Kernel> kernels_;
    std::vector<std::vector<ir::Type>> scalar_types_;
  };

  Result<std::unique_ptr<Program>> compile(const Generated& g, const std::vector<ArgSpec>&) override {
    LOOM_RETURN_IF_ERROR(ir::verify(g.module, target()));
    LOOM_ASSIGN_OR_RETURN(hrx::Module m, hrx::Module::compile(dev_, g.module));
    std::vector<hrx::Kernel> ks;
    std::vector<std::vector<ir::Type>> st;
    for (const KernelLaunch& l : g.launches) {
      LOOM_ASSIGN_OR_RETURN(hrx::Kernel k, m.kernel(l.kernel));
      ks.push_back(std::move(k));
      LOOM_ASSIGN_OR_RETURN(std::vector<ir::Type> types, scalar_param_types(g.module, l));
      st.push_back(std::move(types));
    }
    return std::unique_ptr<Program>(new HrxProgram(this, std::move(m), g.launches, std::move(ks), std::move(st)));
  }

 private:
  hrx::Device dev_;
  hrx::Stream stream_;
};

constexpr size_t kGuard = 256;  // bytes of canary before and after each buffer
uint8_t canary(size_t i) { return static_cast<uint8_t>(0xA5 ^ (i * 37)); }

// Buffers with guards: host images (canary, data, canary) that are the device memory itself on
// the direct cpu device, or copied to and from HRX device buffers.
struct GuardedBuffers {
  std::vector<std::vector<uint8_t>> mem;  // host image per argument
  std::vector<size_t> begin;              // offset of the data in the image
  std::vector<void*> ptrs;                // what kernels get (host pointer or device address)
  std::vector<hrx::Buffer> dev;
  HrxDevice* hd = nullptr;

  Status init(const std::vector<ArgSpec>& specs, const std::vector<HostArg>& host, OpDevice& d) {
    hd = dynamic_cast<HrxDevice*>(&d);
    for (size_t i = 0; i < specs.size(); ++i) {
      const size_t n = specs[i].kind == ArgKind::kBuffer ? static_cast<size_t>(specs[i].bytes) : 0;
      mem.emplace_back(n + 2 * kGuard + 64);
      std::vector<uint8_t>& m = mem.back();
      for (size_t j = 0; j < m.size(); ++j) m[j] = canary(j);
      size_t pad = hd ? 0 : (64 - reinterpret_cast<uintptr_t>(m.data() + kGuard) % 64) % 64;
      begin.push_back(kGuard + pad);
      if (specs[i].role != ArgRole::kOutput && host[i].bytes.size() == n && n)
        std::memcpy(m.data() + begin.back(), host[i].bytes.data(), n);
      if (specs[i].kind != ArgKind::kBuffer) {
        ptrs.push_back(nullptr);
        dev.emplace_back();
        continue;
      }
      if (!hd) {
        ptrs.push_back(m.data() + begin.back());
        dev.emplace_back();
        continue;
      }
      LOOM_ASSIGN_OR_RETURN(hrx::Buffer b, hrx::Buffer::alloc(hd->device(), m.size()));
      LOOM_RETURN_IF_ERROR(hd->stream().copy_h2d(b, 0, m.data(), m.size()));
      ptrs.push_back(reinterpret_cast<void*>(b.address() + begin.back()));
      dev.push_back(std::move(b));
    }
    return hd ? hd->stream().synchronize() : Status();
  }
  // Brings device images back to the host (no-op on the direct cpu device).
  Status fetch() {
    if (!hd) return Status();
    for (size_t i = 0; i < mem.size(); ++i)
      if (dev[i].raw()) LOOM_RETURN_IF_ERROR(hd->stream().copy_d2h(mem[i].data(), dev[i], 0, mem[i].size()));
    return hd->stream().synchronize();
  }
  const uint8_t* data(size_t i) const { return mem[i].data() + begin[i]; }
  // First damaged guard byte, as text; empty if intact.
  std::string guard_damage(const std::vector<ArgSpec>& specs) const {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].kind != ArgKind::kBuffer) continue;
      const std::vector<uint8_t>& m = mem[i];
      size_t b = begin[i], e = b + static_cast<size_t>(specs[i].bytes);
      for (size_t j = 0; j < m.size(); ++j) {
        if (j >= b && j < e) continue;
        if (m[j] != canary(j))
          return fmt::format("guard byte {} {} buffer '{}' was overwritten", j < b ? b - j : j - e + 1,
                             j < b ? "before" : "after", specs[i].name);
      }
    }
    return {};
  }
};

}  // namespace

Result<std::unique_ptr<OpDevice>> OpDevice::open(const std::string& name, int threads) {
  if (name == "cpu-direct") return std::unique_ptr<OpDevice>(new CpuDevice(threads));
  LOOM_ASSIGN_OR_RETURN(hrx::Device d, hrx::Device::open(name));
  LOOM_ASSIGN_OR_RETURN(hrx::Stream s, hrx::Stream::create(d));
  return std::unique_ptr<OpDevice>(new HrxDevice(d, std::move(s)));
}

std::vector<std::pair<std::string, std::string>> OpDevice::missing_devices() {
  std::vector<std::pair<std::string, std::string>> out;
  if (Status s = hrx::Device::cuda_status(); !s.ok()) out.push_back({"cuda", s.to_string()});
  else if (hrx::Device::enumerate().size() < 2) out.push_back({"cuda", "CUDA driver loaded, no devices"});
  return out;
}

Schedule random_schedule(const std::vector<Knob>& space, std::mt19937_64& rng) {
  Schedule s;
  for (const Knob& k : space) {
    std::uniform_int_distribution<size_t> d(0, k.choices.size() - 1);
    s[k.name] = k.choices[d(rng)];
  }
  return s;
}

CheckResult check_op(const OpSpec& op, const Shape& shape, const Schedule& schedule, OpDevice& dev, uint64_t seed) {
  CheckResult r;
  auto where = [&] {
    return fmt::format("op {} shape {{{}}} schedule {{{}}} device {} seed {}", op.name(), shape.key(),
                       schedule_key(schedule), dev.name(), seed);
  };
  auto fail = [&](std::string msg) {
    r.passed = false;
    r.message = where() + ": " + msg;
    return r;
  };
  if (Status s = op.validate(shape); !s.ok()) return fail(s.to_string());
  std::vector<ArgSpec> specs = op.args(shape);
  std::vector<HostArg> host(specs.size());
  std::mt19937_64 rng(seed);
  op.fill_inputs(shape, rng, host);
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].kind == ArgKind::kBuffer && specs[i].role != ArgRole::kOutput &&
        host[i].bytes.size() != static_cast<size_t>(specs[i].bytes))
      return fail(fmt::format("fill_inputs gave {} bytes for '{}', args() says {}", host[i].bytes.size(),
                              specs[i].name, specs[i].bytes));
  GuardedBuffers dbuf;  // inputs copied before the reference may touch in/out args
  if (Status s = dbuf.init(specs, host, dev); !s.ok()) return fail("buffers: " + s.to_string());
  std::vector<HostArg> want = host;
  if (Status s = op.reference(shape, want); !s.ok()) return fail("reference: " + s.to_string());
  auto gen = op.generate(shape, schedule, dev.target());
  if (!gen.ok()) return fail("generate: " + gen.status().to_string());
  auto prog = dev.compile(*gen, specs);
  if (!prog.ok()) return fail("compile: " + prog.status().to_string());
  if (Status s = (*prog)->run(dbuf.ptrs); !s.ok()) return fail("run: " + s.to_string());
  if (Status s = dbuf.fetch(); !s.ok()) return fail("copy back: " + s.to_string());
  if (std::string g = dbuf.guard_damage(specs); !g.empty()) return fail(g);
  std::vector<const uint8_t*> got(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) got[i] = dbuf.data(i);
  const OutputComparison cmp = compare_outputs(specs, got, host, want, op.tolerance(shape));
  r.max_abs_err = cmp.max_abs_err;
  r.max_rel_err = cmp.max_rel_err;
  if (!cmp.ok()) return fail(cmp.message);
  r.passed = true;
  r.message = where() + fmt::format(": ok (max |diff| {:.3g})", r.max_abs_err);
  return r;
}

Result<BenchResult> bench_op(const OpSpec& op, const Shape& shape, const Schedule& schedule, OpDevice& dev,
                             int warmup, int reps) {
  CheckResult c = check_op(op, shape, schedule, dev, 1);  // validate before timing
  if (!c.passed) return failed_precondition("{}", c.message);
  std::vector<ArgSpec> specs = op.args(shape);
  std::vector<HostArg> host(specs.size());
  std::mt19937_64 rng(2);
  op.fill_inputs(shape, rng, host);
  GuardedBuffers dbuf;
  LOOM_RETURN_IF_ERROR(dbuf.init(specs, host, dev));
  LOOM_ASSIGN_OR_RETURN(Generated g, op.generate(shape, schedule, dev.target()));
  LOOM_ASSIGN_OR_RETURN(auto prog, dev.compile(g, specs));
  for (int i = 0; i < warmup; ++i) LOOM_RETURN_IF_ERROR(prog->run(dbuf.ptrs));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    LOOM_RETURN_IF_ERROR(prog->run(dbuf.ptrs));
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  const Spread sp = spread(t);
  BenchResult b;
  b.reps = reps;
  b.median_us = sp.median;
  b.min_us = sp.min;
  b.max_us = sp.max;
  return b;
}

}  // namespace loom::kernels
