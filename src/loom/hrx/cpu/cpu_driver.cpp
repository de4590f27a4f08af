// The cpu driver: kernels from Loom's cpp backend (shared objects, cpu_abi.h) run over a thread
// pool. Streams execute work synchronously at enqueue, which is in-order by construction, so
// synchronize() has nothing to wait for; graphs record the enqueued work and replay it.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <new>
#include <thread>
#include <vector>

#include "loom/base/options.h"
#include "loom/base/thread_pool.h"
#include "loom/codegen/cpp/host_compiler.h"
#include "loom/hrx/driver.h"

namespace loom::hrx {
namespace {

using Clock = std::chrono::steady_clock;
using Op = std::function<Status()>;

std::string cpuinfo_field(const char* key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  return "";
}

class CpuDevice final : public hrx_device {
 public:
  CpuDevice() : pool_(default_thread_count()) {
    std::string name = cpuinfo_field("model name");
    std::snprintf(props.name, sizeof props.name, "%s", name.empty() ? "unknown CPU" : name.c_str());
    std::snprintf(props.spec, sizeof props.spec, "cpu");
    std::snprintf(props.arch, sizeof props.arch, "cpu");
    props.driver = HRX_DRIVER_CPU;
    props.ordinal = 0;
    props.compute_units = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    props.worker_threads = pool_.n_threads();
    props.clock_khz = static_cast<int32_t>(std::atof(cpuinfo_field("cpu MHz").c_str()) * 1000.0);
    props.warp_size = 32;  // the cpp backend emulates 32-lane warps (shuffles, warp reductions)
    props.max_threads_per_block = codegen::kMaxBlockThreads;
    // The cpp backend keeps shared arrays on the stack of the thread running a block.
    props.max_shared_per_block = 48 * 1024;
    props.max_shared_per_block_optin = 0;  // no dynamic shared memory in the cpp ABI
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    props.memory_bytes = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    props.l2_bytes = l2 > 0 ? static_cast<uint64_t>(l2) : 0;
  }

  Result<hrx_buffer*> alloc(uint64_t bytes, hrx_memory_kind kind) override;
  Result<hrx_stream*> create_stream() override;
  Result<hrx_event*> create_event() override;
  Result<hrx_module*> load_ptx(std::string_view) override {
    return invalid_argument("the cpu device cannot load PTX (PTX modules are for cuda devices)");
  }
  Result<hrx_module*> load_shared_object(const std::string& path) override;
  Status synchronize() override { return Status(); }

  // Runs blocks [0, n) of a launch (`name`: the kernel's, for LOOM_HRX_PROFILE).
  Status run(codegen::CpuKernelFn fn, void* const* args, const hrx_launch_config& c, const std::string& name) {
    if (!profile_) return run_blocks(fn, args, c);
    const auto t0 = Clock::now();
    Status st = run_blocks(fn, args, c);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(profile_mu_);
    ProfileEntry& e = profile_by_name_[name];
    e.launches += 1;
    e.us += us;
    e.blocks += uint64_t{c.grid[0]} * c.grid[1] * c.grid[2];
    return st;
  }

  // LOOM_HRX_PROFILE=1: launches, blocks and wall time per kernel name, printed to stderr at
  // exit (most expensive first). Costs two clock reads per launch.
  void print_profile() {
    std::lock_guard<std::mutex> lock(profile_mu_);
    std::vector<std::pair<std::string, ProfileEntry>> v(profile_by_name_.begin(), profile_by_name_.end());
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
    double total = 0;
    for (const auto& [n, e] : v) total += e.us;
    std::fprintf(stderr, "hrx cpu profile (%d worker threads): %.1f ms in %zu kernels\n", pool_.n_threads(),
                 total / 1e3, v.size());
    std::fprintf(stderr, "%10s %6s %10s %10s %8s  %s\n", "ms", "%", "launches", "us/launch", "blocks", "kernel");
    for (const auto& [n, e] : v)
      std::fprintf(stderr, "%10.2f %6.1f %10llu %10.2f %8.0f  %s\n", e.us / 1e3, 100 * e.us / std::max(total, 1e-9),
                   static_cast<unsigned long long>(e.launches), e.us / static_cast<double>(e.launches),
                   static_cast<double>(e.blocks) / static_cast<double>(e.launches), n.c_str());
  }

 private:
  // Decode issues hundreds of tiny launches per token, and handing blocks to the pool's workers
  // (a wake-up, a join, and on a loaded machine a worker that is not running when the caller
  // waits for its chunk) costs more than small kernels do. So a launch runs inline on the caller
  // when it has one block, when the pool has one thread, or when its kernel at this grid size
  // proved cheap: the first kSamples launches of each (kernel, grid) run inline and are timed,
  // and the fastest decides (below kInlineUs: inline from then on; a pool hand-off and wake-up
  // costs a few microseconds). Each block computes the same values on any thread, so results do
  // not change.
  static constexpr int kSamples = 3;
  static constexpr double kInlineUs = 8.0;
  struct InlineStat {
    int samples = 0;
    double best_us = 1e30;
    bool decided = false, run_inline = false;
  };

  // True when this launch should run inline; times it when still sampling (`sample_start` set).
  bool choose_inline(codegen::CpuKernelFn fn, uint64_t blocks, InlineStat** sampling) {
    *sampling = nullptr;
    std::lock_guard<std::mutex> lock(inline_mu_);
    InlineStat& st = inline_stats_[{reinterpret_cast<uintptr_t>(fn), blocks}];
    if (st.decided) return st.run_inline;
    *sampling = &st;  // map nodes are stable
    return true;
  }
  void record_inline(InlineStat* st, double us) {
    std::lock_guard<std::mutex> lock(inline_mu_);
    st->best_us = std::min(st->best_us, us);
    if (++st->samples >= kSamples) {
      st->decided = true;
      st->run_inline = st->best_us < kInlineUs;
    }
  }

  Status run_blocks(codegen::CpuKernelFn fn, void* const* args, const hrx_launch_config& c) {
    codegen::LaunchDims d{{c.grid[0], c.grid[1], c.grid[2]}, {c.block[0], c.block[1], c.block[2]}, 0, 0};
    const uint64_t blocks = uint64_t{c.grid[0]} * c.grid[1] * c.grid[2];
    if (blocks == 1 || pool_.n_threads() == 1) {
      d.block_end = blocks;
      fn(args, &d);
      return Status();
    }
    InlineStat* sampling = nullptr;
    if (choose_inline(fn, blocks, &sampling)) {
      d.block_end = blocks;
      if (!sampling) {
        fn(args, &d);
        return Status();
      }
      const auto t0 = Clock::now();
      fn(args, &d);
      record_inline(sampling, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      return Status();
    }
    // The pool takes one caller at a time; streams on several threads share it.
    std::lock_guard<std::mutex> lock(pool_mu_);
    return codegen::launch_cpu(fn, args, {c.grid[0], c.grid[1], c.grid[2]}, {c.block[0], c.block[1], c.block[2]}, pool_);
  }

  struct ProfileEntry {
    uint64_t launches = 0, blocks = 0;
    double us = 0;
  };
  ThreadPool pool_;
  std::mutex pool_mu_;
  std::mutex inline_mu_;
  std::map<std::pair<uintptr_t, uint64_t>, InlineStat> inline_stats_;
  const bool profile_ = opt::get_bool(opt::Opt::kHrxProfile);
  std::mutex profile_mu_;
  std::map<std::string, ProfileEntry> profile_by_name_;
};

struct CpuBuffer final : hrx_buffer {
  using hrx_buffer::hrx_buffer;
  ~CpuBuffer() override { std::free(host); }
};

Result<hrx_buffer*> CpuDevice::alloc(uint64_t bytes, hrx_memory_kind kind) {
  auto b = std::make_unique<CpuBuffer>(this);
  b->kind = kind;
  b->size = bytes;
  if (bytes > 0) {
    constexpr uint64_t kAlign = 64;
    if (bytes > (uint64_t{1} << 62))
      return resource_exhausted("cpu: cannot allocate {} bytes (more than the address space)", bytes);
    void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    if (!p) return resource_exhausted("cpu: out of memory allocating {} bytes", bytes);
    b->host = p;
    b->address = reinterpret_cast<uint64_t>(p);
  }
  return b.release();
}

struct CpuKernel final : hrx_kernel {
  codegen::CpuKernelFn fn = nullptr;
  void* native_handle() const override { return reinterpret_cast<void*>(fn); }
};

struct CpuModule final : hrx_module {
  CpuModule(hrx_device* d, codegen::CpuModule m) : hrx_module(d), mod(std::move(m)) {}
  Result<std::unique_ptr<hrx_kernel>> lookup(const std::string& name) override {
    LOOM_ASSIGN_OR_RETURN(codegen::CpuKernelFn fn, mod.kernel(name));
    auto k = std::make_unique<CpuKernel>();
    k->fn = fn;
    return std::unique_ptr<hrx_kernel>(std::move(k));
  }
  codegen::CpuModule mod;
};

Result<hrx_module*> CpuDevice::load_shared_object(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(codegen::CpuModule m, codegen::CpuModule::load(path));
  return new CpuModule(this, std::move(m));
}

struct CpuGraph final : hrx_graph {
  CpuGraph(hrx_device* d, std::vector<Op> o) : hrx_graph(d), ops(std::move(o)) {}
  Status launch(hrx_stream* s) override;
  std::vector<Op> ops;
};

class CpuStream final : public hrx_stream {
 public:
  explicit CpuStream(CpuDevice* d) : hrx_stream(d), dev_(d) {}

  Status copy_h2d(hrx_buffer* dst, uint64_t off, const void* src, uint64_t bytes) override {
    char* to = static_cast<char*>(dst->host) + off;
    return submit([=] { std::memcpy(to, src, bytes); return Status(); });
  }
  Status copy_d2h(void* dst, const hrx_buffer* src, uint64_t off, uint64_t bytes) override {
    const char* from = static_cast<const char*>(src->host) + off;
    return submit([=] { std::memcpy(dst, from, bytes); return Status(); });
  }
  Status copy_d2d(hrx_buffer* dst, uint64_t dst_off, const hrx_buffer* src, uint64_t src_off,
                  uint64_t bytes) override {
    char* to = static_cast<char*>(dst->host) + dst_off;
    const char* from = static_cast<const char*>(src->host) + src_off;
    return submit([=] { std::memmove(to, from, bytes); return Status(); });
  }
  Status memset(hrx_buffer* dst, uint64_t off, uint8_t value, uint64_t bytes) override {
    char* to = static_cast<char*>(dst->host) + off;
    return submit([=] { std::memset(to, value, bytes); return Status(); });
  }

  Status launch(const LaunchRequest& r) override {
    if (r.config.shared_bytes != 0)
      return invalid_argument("launch of {}: the cpu driver has no dynamic shared memory ({} bytes asked)",
                              r.kernel->name, r.config.shared_bytes);
    auto fn = static_cast<CpuKernel*>(r.kernel)->fn;
    if (!capturing_) return dev_->run(fn, r.args, r.config, r.kernel->name);
    // Captured: keep copies of the argument values (at most 8 bytes each, like every Loom IR
    // parameter), zero-extended into 8-byte slots of a node the graph shares; the pointer array
    // into them is built once, so a replay is one indirect call per launch.
    struct LaunchNode {
      CpuDevice* dev;
      codegen::CpuKernelFn fn;
      hrx_launch_config config;
      std::vector<uint64_t> values;
      std::vector<void*> ptrs;
      std::string name;
    };
    auto node = std::make_shared<LaunchNode>(
        LaunchNode{dev_, fn, r.config, std::vector<uint64_t>(r.n_args, 0), {}, r.kernel->name});
    for (uint32_t i = 0; i < r.n_args; ++i) {
      uint32_t size = r.arg_sizes ? r.arg_sizes[i] : 8;
      if (size > 8)
        return invalid_argument("launch of {}: parameter {} has {} bytes; the cpu driver captures at most 8",
                                r.kernel->name, i, size);
      std::memcpy(&node->values[i], r.args[i], size);
    }
    for (uint64_t& v : node->values) node->ptrs.push_back(&v);
    ops_.push_back([node] { return node->dev->run(node->fn, node->ptrs.data(), node->config, node->name); });
    return Status();
  }

  Status synchronize() override {
    if (capturing_) return failed_precondition("cannot synchronize a stream that is capturing");
    return Status();
  }
  Status begin_capture() override {
    if (capturing_) return failed_precondition("stream is already capturing");
    capturing_ = true;
    ops_.clear();
    return Status();
  }
  Result<hrx_graph*> end_capture() override {
    if (!capturing_) return failed_precondition("end_capture on a stream that is not capturing");
    capturing_ = false;
    return new CpuGraph(device, std::move(ops_));
  }
  bool capturing() const { return capturing_; }

  // Runs `op` now, or records it while capturing.
  Status submit(Op op) {
    if (capturing_) {
      ops_.push_back(std::move(op));
      return Status();
    }
    return op();
  }

 private:
  CpuDevice* dev_;
  bool capturing_ = false;
  std::vector<Op> ops_;
};

Status CpuGraph::launch(hrx_stream* s) {
  auto* cs = static_cast<CpuStream*>(s);
  if (cs->capturing()) {  // a graph inside a capture: record its work
    for (const Op& op : ops) LOOM_RETURN_IF_ERROR(cs->submit(op));
    return Status();
  }
  for (const Op& op : ops) LOOM_RETURN_IF_ERROR(op());
  return Status();
}

Result<hrx_stream*> CpuDevice::create_stream() { return new CpuStream(this); }

class CpuEvent final : public hrx_event {
 public:
  using hrx_event::hrx_event;
  Status record(hrx_stream* s) override {
    if (static_cast<CpuStream*>(s)->capturing())
      return unimplemented("the cpu driver cannot record events while a stream is capturing");
    // Work before this point already ran (streams run at enqueue), so now is when it completed.
    at_ = Clock::now();
    recorded_ = true;
    return Status();
  }
  Status synchronize() override {
    if (!recorded_) return failed_precondition("event synchronize before the event was recorded");
    return Status();
  }
  Result<float> elapsed_ms_since(hrx_event* start) override {
    auto* s = static_cast<CpuEvent*>(start);
    if (!recorded_ || !s->recorded_) return failed_precondition("elapsed time of an event that was never recorded");
    return std::chrono::duration<float, std::milli>(at_ - s->at_).count();
  }

 private:
  Clock::time_point at_{};
  bool recorded_ = false;
};

Result<hrx_event*> CpuDevice::create_event() { return new CpuEvent(this); }

}  // namespace

hrx_device* cpu_device() {
  // Process lifetime on purpose (see hrx.h): never destroyed, so no handle outlives its device.
  static CpuDevice* dev = [] {
    auto* d = new CpuDevice();
    if (opt::get_bool(opt::Opt::kHrxProfile))
      std::atexit([] { static_cast<CpuDevice*>(cpu_device())->print_profile(); });
    return d;
  }();
  return dev;
}

}  // namespace loom::hrx
