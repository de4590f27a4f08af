// `loom hrx bench-launch`: HRX's per-launch overhead on a device, side by side with the driver's
// own launch call on the same kernel (cuLaunchKernel on cuda; a direct call of the compiled
// function on cpu) and with graph replay, then a chain of dependent launches with and without
// programmatic dependent launch (hrx.h). Validates first, warms up, then reports the median and
// spread over repetitions, interleaving the variants so drift hits all alike.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "loom/base/stats.h"
#include "loom/codegen/cpp/cpu_abi.h"
#include "loom/hrx/cuda_api.h"
#include "loom/hrx/runtime.h"
#include "loom/ir/parser.h"

namespace loom::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kBenchIr = R"(
kernel @empty(%p: ptr<global, i32>) {
}
kernel @touch(%p: ptr<global, i32>, %v: i32) {
  %c0 = const 0 : i32
  store %p[%c0], %v
}
kernel @chain(%p: ptr<global, i32>) {
  %c0 = const 0 : i32
  %c1 = const 1 : i32
  %tid = thread_id.x
  %first = cmp.eq %tid, %c0
  if %first {
    %v = load %p[%c0]
    %w = add %v, %c1
    store %p[%c0], %w
  }
}
)";

struct Options {
  std::string device = "";
  int launches = 2000;
  int reps = 30;
  int graph_size = 100;
  bool json = false;
  int chain = 1000;
};

struct Variant {
  std::string name;
  std::string what;
  // Enqueues `n` launches (no synchronization).
  std::function<Status(int n)> enqueue;
  std::vector<double> enqueue_us, total_us;  // per launch, one entry per repetition
};

nlohmann::ordered_json stats(const std::vector<double>& v) {
  const Spread s = spread(v);
  auto r = [](double x) { return std::round(x * 1000.0) / 1000.0; };
  return {{"median_us", r(s.median)}, {"stdev_us", r(s.stdev)}, {"min_us", r(s.min)}, {"max_us", r(s.max)}};
}

// Programmatic edges among the kernel nodes that `capture` enqueues on `stream` (cuda only;
// -1 when the driver cannot tell).
Result<int> programmatic_edges(hrx::Stream& stream, const std::function<Status()>& capture) {
  LOOM_ASSIGN_OR_RETURN(const hrx::cuda::Api* cu, hrx::cuda::api());
  auto cs = static_cast<hrx::cuda::CUstream>(hrx_stream_native_handle(stream.raw()));
  LOOM_RETURN_IF_ERROR(hrx::cuda::check(cu->cuStreamBeginCapture(cs, hrx::cuda::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                                        "cuStreamBeginCapture"));
  Status st = capture();
  hrx::cuda::CUgraph g = nullptr;
  Status end = hrx::cuda::check(cu->cuStreamEndCapture(cs, &g), "cuStreamEndCapture");
  LOOM_RETURN_IF_ERROR(st);
  LOOM_RETURN_IF_ERROR(end);
  int programmatic = -1;
  if (cu->cuGraphGetEdges_v2) {
    size_t n = 0;
    Status q = hrx::cuda::check(cu->cuGraphGetEdges_v2(g, nullptr, nullptr, nullptr, &n), "cuGraphGetEdges_v2");
    std::vector<hrx::cuda::CUgraphNode> from(n), to(n);
    std::vector<hrx::cuda::CUgraphEdgeData> data(n);
    if (q.ok() && n > 0)
      q = hrx::cuda::check(cu->cuGraphGetEdges_v2(g, from.data(), to.data(), data.data(), &n), "cuGraphGetEdges_v2");
    if (q.ok()) {
      programmatic = 0;
      for (size_t i = 0; i < n; ++i) programmatic += data[i].type == hrx::cuda::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    }
  }
  (void)cu->cuGraphDestroy(g);
  return programmatic;
}

Status bench_chain(const Options& o, const hrx::Device& dev, const hrx::Module& mod, hrx::Stream& stream,
                   const hrx::Buffer& buf, nlohmann::ordered_json* out) {
  LOOM_ASSIGN_OR_RETURN(hrx::Kernel chain, mod.kernel("chain"));
  const bool cuda = dev.driver() == hrx::DriverKind::kCuda;
  const bool was_on = stream.dependent_launch();
  const bool supported = stream.set_dependent_launch(true);
  hrx::KernelArgs kargs;
  kargs.buffer(buf);
  const int n = o.chain;
  auto enqueue = [&](int count) -> Status {
    for (int i = 0; i < count; ++i) LOOM_RETURN_IF_ERROR(stream.launch(chain, {1}, {32}, kargs));
    return Status();
  };
  struct ChainVariant {
    std::string name;
    bool pdl, graph;
    hrx::Graph g;
    std::vector<double> us;
  };
  std::vector<ChainVariant> vs;
  for (bool graph : {false, true})
    for (bool pdl : {false, true}) {
      if (pdl && !supported) continue;
      vs.push_back({fmt::format("{}_{}", graph ? "graph" : "eager", pdl ? "pdl" : "plain"), pdl, graph, {}, {}});
    }
  nlohmann::ordered_json edges = nlohmann::ordered_json::object();
  for (ChainVariant& v : vs) {
    stream.set_dependent_launch(v.pdl);
    if (!v.graph) continue;
    LOOM_RETURN_IF_ERROR(stream.begin_capture());
    if (Status s = enqueue(n); !s.ok()) {
      (void)stream.end_capture();
      return s;
    }
    LOOM_ASSIGN_OR_RETURN(v.g, stream.end_capture());
    if (cuda) {
      LOOM_ASSIGN_OR_RETURN(int pe, programmatic_edges(stream, [&] { return enqueue(n); }));
      edges[v.name] = {{"edges", n - 1}, {"programmatic", pe}};
    }
  }
  for (int rep = -2; rep < o.reps; ++rep) {
    for (ChainVariant& v : vs) {
      stream.set_dependent_launch(v.pdl);
      int32_t got = -1;
      LOOM_RETURN_IF_ERROR(stream.memset(buf, 0, 0, 4));
      LOOM_RETURN_IF_ERROR(stream.synchronize());
      auto t0 = Clock::now();
      LOOM_RETURN_IF_ERROR((v.graph ? v.g.launch(stream) : enqueue(n)).with_context(v.name));
      LOOM_RETURN_IF_ERROR(stream.synchronize());
      auto t1 = Clock::now();
      LOOM_RETURN_IF_ERROR(stream.copy_d2h(&got, buf, 0, 4));
      LOOM_RETURN_IF_ERROR(stream.synchronize());
      if (got != n) return internal_error("dependent chain {}: counter {} after {} launches", v.name, got, n);
      if (rep >= 0) v.us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
    }
  }
  stream.set_dependent_launch(was_on);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const ChainVariant& v : vs)
    rows.push_back({{"variant", v.name}, {"dependent_launch", v.pdl}, {"graph", v.graph}, {"per_launch", stats(v.us)}});
  *out = {{"kernel", "chain (thread 0 increments a counter), grid 1, block 32"},
          {"launches", n},
          {"dependent_launch_supported", supported},
          {"variants", rows},
          {"graph_edges", edges}};
  return Status();
}

Status bench(const Options& o, nlohmann::ordered_json* out) {
  std::string spec = o.device;
  if (spec.empty()) spec = hrx::Device::cuda_status().ok() && hrx::Device::enumerate().size() > 1 ? "cuda:0" : "cpu";
  LOOM_ASSIGN_OR_RETURN(hrx::Device dev, hrx::Device::open(spec));
  LOOM_ASSIGN_OR_RETURN(ir::Module ir, ir::parse_module(kBenchIr, "bench-launch"));
  LOOM_ASSIGN_OR_RETURN(hrx::Module mod, hrx::Module::compile(dev, ir));
  LOOM_ASSIGN_OR_RETURN(hrx::Kernel empty, mod.kernel("empty"));
  LOOM_ASSIGN_OR_RETURN(hrx::Kernel touch, mod.kernel("touch"));
  LOOM_ASSIGN_OR_RETURN(hrx::Stream stream, hrx::Stream::create(dev));
  LOOM_ASSIGN_OR_RETURN(hrx::Buffer buf, hrx::Buffer::alloc(dev, 256));
  const bool cuda = dev.driver() == hrx::DriverKind::kCuda;

  // Validate: a launch through HRX really runs the kernel with our argument.
  {
    int32_t got = 0;
    LOOM_RETURN_IF_ERROR(stream.memset(buf, 0, 0, 4));
    LOOM_RETURN_IF_ERROR(stream.launch(touch, {1}, {1}, hrx::KernelArgs().buffer(buf).i32(0x5eed)));
    LOOM_RETURN_IF_ERROR(stream.copy_d2h(&got, buf, 0, 4));
    LOOM_RETURN_IF_ERROR(stream.synchronize());
    if (got != 0x5eed) return internal_error("validation launch wrote {:#x}, expected 0x5eed", got);
  }

  uint64_t addr = buf.address();
  void* params[] = {&addr};
  const uint32_t sizes[] = {8};
  hrx::KernelArgs kargs;
  kargs.buffer(buf);
  const hrx::Dim3 grid1{1}, block{32};
  // cpu: a grid of one block runs inline; a grid of many goes through the thread pool.
  const uint32_t pool_blocks = static_cast<uint32_t>(std::max(2, dev.props().worker_threads * 4));

  std::vector<Variant> vs;
  if (cuda) {
    LOOM_ASSIGN_OR_RETURN(const hrx::cuda::Api* cu, hrx::cuda::api());
    auto fn = static_cast<hrx::cuda::CUfunction>(hrx_kernel_native_handle(empty.raw()));
    auto cs = static_cast<hrx::cuda::CUstream>(hrx_stream_native_handle(stream.raw()));
    void** pp = params;
    vs.push_back({"cuLaunchKernel", "bare driver call on the same CUfunction and stream", [=](int n) {
                    for (int i = 0; i < n; ++i) {
                      hrx::cuda::CUresult r = cu->cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, cs, pp, nullptr);
                      if (r != hrx::cuda::CUDA_SUCCESS) return hrx::cuda::check(r, "cuLaunchKernel");
                    }
                    return Status();
                  }});
  } else {
    auto fn = reinterpret_cast<codegen::CpuKernelFn>(hrx_kernel_native_handle(empty.raw()));
    vs.push_back({"direct_call", "the compiled kernel function called directly (one block)", [=](int n) {
                    codegen::LaunchDims d{{1, 1, 1}, {32, 1, 1}, 0, 1};
                    for (int i = 0; i < n; ++i) fn(params, &d);
                    return Status();
                  }});
  }
  vs.push_back({"hrx_launch", "C API hrx_launch, kernelParams array", [&](int n) {
                  hrx_launch_config c{{1, 1, 1}, {32, 1, 1}, 0};
                  for (int i = 0; i < n; ++i)
                    if (hrx_launch(stream.raw(), empty.raw(), &c, params, 1, sizes) != HRX_OK)
                      return internal_error("hrx_launch: {}", hrx_last_error());
                  return Status();
                }});
  vs.push_back({"hrx_stream_launch", "C++ Stream::launch with a KernelArgs builder", [&](int n) {
                  for (int i = 0; i < n; ++i) LOOM_RETURN_IF_ERROR(stream.launch(empty, grid1, block, kargs));
                  return Status();
                }});
  if (!cuda)
    vs.push_back({"hrx_launch_pool", fmt::format("C API hrx_launch, {} blocks over the thread pool", pool_blocks),
                  [&](int n) {
                    hrx_launch_config c{{pool_blocks, 1, 1}, {32, 1, 1}, 0};
                    for (int i = 0; i < n; ++i)
                      if (hrx_launch(stream.raw(), empty.raw(), &c, params, 1, sizes) != HRX_OK)
                        return internal_error("hrx_launch: {}", hrx_last_error());
                    return Status();
                  }});
  // Graph replay: graph_size launches captured once, replayed; reported per kernel.
  LOOM_RETURN_IF_ERROR(stream.begin_capture());
  for (int i = 0; i < o.graph_size; ++i) {
    Status s = stream.launch(empty, grid1, block, kargs);
    if (!s.ok()) {
      (void)stream.end_capture();
      return s;
    }
  }
  LOOM_ASSIGN_OR_RETURN(hrx::Graph graph, stream.end_capture());
  vs.push_back({"hrx_graph_replay", fmt::format("graph of {} launches replayed; time per kernel", o.graph_size),
                [&](int n) {
                  for (int i = 0; i < n / o.graph_size; ++i) LOOM_RETURN_IF_ERROR(graph.launch(stream));
                  return Status();
                }});

  const int n = std::max(o.graph_size, o.launches / o.graph_size * o.graph_size);
  for (int rep = -2; rep < o.reps; ++rep) {  // two warm-up rounds
    for (Variant& v : vs) {
      LOOM_RETURN_IF_ERROR(stream.synchronize());
      auto t0 = Clock::now();
      LOOM_RETURN_IF_ERROR(v.enqueue(n).with_context(v.name));
      auto t1 = Clock::now();
      LOOM_RETURN_IF_ERROR(stream.synchronize());
      auto t2 = Clock::now();
      if (rep < 0) continue;
      v.enqueue_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
      v.total_us.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count() / n);
    }
  }

  // Dependent chains: each launch increments a counter its predecessor wrote, so every launch
  // waits for the one before. With and without programmatic dependent launch (hrx.h), eager and
  // as a captured graph; the counter validates every variant. The graph edges are read back to
  // check that capture kept them programmatic.
  nlohmann::ordered_json chain = nlohmann::ordered_json::object();
  if (o.chain > 0) LOOM_RETURN_IF_ERROR(bench_chain(o, dev, mod, stream, buf, &chain));

  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const Variant& v : vs)
    results.push_back({{"variant", v.name}, {"what", v.what}, {"enqueue", stats(v.enqueue_us)},
                       {"enqueue_and_sync", stats(v.total_us)}});
  const auto& p = dev.props();
  *out = {{"device", p.name},
          {"device_spec", p.spec},
          {"arch", p.arch},
          {"driver_version", p.driver_version},
          {"worker_threads", p.worker_threads},
          {"kernel", "empty (one pointer parameter), grid 1, block 32"},
          {"launches_per_rep", n},
          {"reps", o.reps},
          {"warmup_reps", 2},
          {"results", results},
          {"dependent_chain", chain}};
  if (cuda) {
    const double raw = median(vs[0].enqueue_us), hrx = median(vs[1].enqueue_us);
    (*out)["hrx_over_bare_enqueue"] = std::round(hrx / raw * 1000.0) / 1000.0;
  }
  return Status();
}

int run_bench_launch(const Options& o) {
  nlohmann::ordered_json out;
  if (Status s = bench(o, &out); !s.ok()) return report(s.with_context("loom hrx bench-launch"));
  if (o.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%s (%s), %d launches x %d reps, median [min, max] us per launch\n",
              out["device"].get<std::string>().c_str(), out["device_spec"].get<std::string>().c_str(),
              out["launches_per_rep"].get<int>(), o.reps);
  for (const auto& r : out["results"])
    std::printf("  %-20s enqueue %8.3f [%.3f, %.3f]   enqueue+sync %8.3f   (%s)\n",
                r["variant"].get<std::string>().c_str(), r["enqueue"]["median_us"].get<double>(),
                r["enqueue"]["min_us"].get<double>(), r["enqueue"]["max_us"].get<double>(),
                r["enqueue_and_sync"]["median_us"].get<double>(), r["what"].get<std::string>().c_str());
  if (out.contains("hrx_over_bare_enqueue"))
    std::printf("  hrx_launch / cuLaunchKernel (enqueue medians): %.3f\n", out["hrx_over_bare_enqueue"].get<double>());
  if (const auto& c = out["dependent_chain"]; c.contains("variants")) {
    std::printf("dependent chain of %d launches (dependent launch %s), us per launch, enqueue to done:\n",
                c["launches"].get<int>(), c["dependent_launch_supported"].get<bool>() ? "supported" : "not supported");
    for (const auto& r : c["variants"])
      std::printf("  %-12s %8.3f [%.3f, %.3f]\n", r["variant"].get<std::string>().c_str(),
                  r["per_launch"]["median_us"].get<double>(), r["per_launch"]["min_us"].get<double>(),
                  r["per_launch"]["max_us"].get<double>());
    for (const auto& e : c["graph_edges"].items())
      std::printf("  %s graph: %d of %d edges programmatic\n", e.key().c_str(), e.value()["programmatic"].get<int>(),
                  e.value()["edges"].get<int>());
  }
  return 0;
}

LOOM_COMMAND(kHrx, "hrx", "HRX runtime tools (launch benchmark)", [](CLI::App& sub) -> Action {
  auto o = std::make_shared<Options>();
  auto which = std::make_shared<std::string>();
  sub.require_subcommand(1);
  CLI::App* b = sub.add_subcommand("bench-launch", "Per-launch overhead: HRX vs the bare driver call vs graph replay");
  b->add_option("--device", o->device, "cpu, cuda or cuda:N (default: cuda:0 when present, else cpu)");
  b->add_option("--launches", o->launches, "launches per repetition")->check(CLI::Range(100, 10000000));
  b->add_option("--reps", o->reps, "timed repetitions")->check(CLI::Range(3, 10000));
  b->add_option("--graph-size", o->graph_size, "launches per captured graph")->check(CLI::Range(1, 100000));
  b->add_flag("--json", o->json, "print JSON");
  b->add_option("--chain", o->chain, "launches in the dependent chain (0: skip it)")->check(CLI::Range(0, 1000000));
  b->callback([which] { *which = "bench-launch"; });
  return [=]() -> int {
    if (*which == "bench-launch") return run_bench_launch(*o);
    return report(invalid_argument("loom hrx: choose a subcommand (bench-launch)"));
  };
});

}  // namespace
}  // namespace loom::cli
