// Device-timed benchmark of the weight-streaming ops on a CUDA device: each op is first
// checked against its reference (check_op), then launched from a captured graph that rotates
// over enough copies of the weights to defeat the L2 cache, timed with events. Results go to
// the JSON-lines file named by LOOM_GPU_BENCH (one object per op, shape and schedule), with a
// device-to-device copy measured in the same process as the bandwidth ceiling.
//   LOOM_GPU_BENCH=/tmp/bench.jsonl test_ops --gtest_filter='GpuBench.*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/gguf/quant.h"
#include "loom/hrx/runtime.h"
#include "loom/kernels/op_harness.h"
#include "loom/kernels/op_list.h"
#include "loom/ref/ops_ref.h"
#include "compiled_op.h"
#include "gpu_time_util.h"

namespace loom::kernels {
namespace {

// GB/s of a device-to-device copy of 1 GiB (bytes read + written), median of 10.
Result<double> copy_gbs(const hrx::Device& dev, hrx::Stream& s) {
  const uint64_t n = uint64_t{1} << 30;
  LOOM_ASSIGN_OR_RETURN(hrx::Buffer a, hrx::Buffer::alloc(dev, n));
  LOOM_ASSIGN_OR_RETURN(hrx::Buffer b, hrx::Buffer::alloc(dev, n));
  LOOM_RETURN_IF_ERROR(s.memset(a, 0, 0x5A, n));
  LOOM_ASSIGN_OR_RETURN(hrx::Event e0, hrx::Event::create(dev));
  LOOM_ASSIGN_OR_RETURN(hrx::Event e1, hrx::Event::create(dev));
  std::vector<double> t;
  for (int r = 0; r < 12; ++r) {
    LOOM_RETURN_IF_ERROR(e0.record(s));
    LOOM_RETURN_IF_ERROR(s.copy_d2d(b, 0, a, 0, n));
    LOOM_RETURN_IF_ERROR(e1.record(s));
    LOOM_RETURN_IF_ERROR(e1.synchronize());
    LOOM_ASSIGN_OR_RETURN(float ms, hrx::Event::elapsed_ms(e0, e1));
    if (r >= 2) t.push_back(2.0 * static_cast<double>(n) / (ms * 1e6));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Timed {
  double us = 0;
  double gbs = 0;
  double tflops = 0;
};

// Device buffers of one shape, shared by every op and schedule timed on it: inputs larger than
// 256 KiB (the weights) get enough copies to span 512 MiB, beyond the 60 MB L2.
struct ShapeBuffers {
  std::vector<ArgSpec> specs;
  std::vector<HostArg> host;
  std::vector<std::vector<hrx::Buffer>> bufs;
  int copies = 1;
};

Result<ShapeBuffers> make_buffers(const OpSpec& op, const Shape& shape, const hrx::Device& dev, hrx::Stream& s) {
  ShapeBuffers sb;
  sb.specs = op.args(shape);
  sb.host.resize(sb.specs.size());
  std::mt19937_64 rng(3);
  op.fill_inputs(shape, rng, sb.host);
  for (size_t i = 0; i < sb.specs.size(); ++i)
    if (sb.specs[i].role == ArgRole::kInput && sb.specs[i].bytes > (256 << 10))
      sb.copies = std::max<int>(sb.copies, static_cast<int>(std::min<int64_t>(512, (int64_t{512} << 20) / sb.specs[i].bytes + 1)));
  sb.bufs.resize(sb.specs.size());
  for (size_t i = 0; i < sb.specs.size(); ++i) {
    const bool big = sb.specs[i].role == ArgRole::kInput && sb.specs[i].bytes > (256 << 10);
    for (int k = 0; k < (big ? sb.copies : 1); ++k) {
      LOOM_ASSIGN_OR_RETURN(hrx::Buffer buf,
                            hrx::Buffer::alloc(dev, static_cast<uint64_t>(std::max<int64_t>(sb.specs[i].bytes, 4))));
      if (!sb.host[i].bytes.empty()) LOOM_RETURN_IF_ERROR(s.copy_h2d(buf, 0, sb.host[i].bytes.data(), sb.host[i].bytes.size()));
      sb.bufs[i].push_back(std::move(buf));
    }
  }
  LOOM_RETURN_IF_ERROR(s.synchronize());
  return sb;
}

// The expected outputs at a sample of weight rows (every row when the shape is small), computed
// on the host from the same inputs: y[t][r] for r in rows, t < n_tokens.
using RowRef = std::function<double(int64_t row, int64_t token)>;

// Generates, compiles, checks against `ref` at sampled rows, then times from a captured graph.
Result<Timed> bench_one(const OpSpec& op, const Shape& shape, const Schedule& sch, const hrx::Device& dev,
                        hrx::Stream& s, ShapeBuffers& sb, const RowRef& ref) {
  LOOM_ASSIGN_OR_RETURN(CompiledOp compiled, compile_op(op, shape, sch, dev));
  auto enqueue = [&](int it) -> Status {
    return compiled.enqueue(s, [&](int ai) -> const hrx::Buffer& {
      auto& v = sb.bufs[static_cast<size_t>(ai)];
      return v[static_cast<size_t>(it) % v.size()];
    });
  };
  // Validate: output poisoned, one run, sampled rows against the reference.
  const size_t yi = sb.specs.size() - 1;
  const int64_t n_out = shape.at("n_out"), nt = shape.at("n_tokens");
  LOOM_RETURN_IF_ERROR(s.memset(sb.bufs[yi][0], 0, 0xFF, static_cast<uint64_t>(sb.specs[yi].bytes)));
  LOOM_RETURN_IF_ERROR(enqueue(0));
  std::vector<float> y(static_cast<size_t>(n_out * nt));
  LOOM_RETURN_IF_ERROR(s.copy_d2h(y.data(), sb.bufs[yi][0], 0, y.size() * 4));
  LOOM_RETURN_IF_ERROR(s.synchronize());
  const Tolerance tol = op.tolerance(shape);
  const int64_t step = std::max<int64_t>(1, n_out / 97);
  for (int64_t r = 0; r < n_out; r += step)
    for (int64_t t = 0; t < nt; t += std::max<int64_t>(1, nt / 7)) {
      const double want = ref(r, t), got = y[static_cast<size_t>(t * n_out + r)];
      if (!(std::fabs(got - want) <= tol.atol + tol.rtol * std::fabs(want)))
        return failed_precondition("{} {} {}: y[{}][{}] = {}, reference {}", op.name(), shape.key(), schedule_key(sch), t, r,
                                   got, want);
    }
  const int per_graph = std::max(sb.copies, 20);
  LOOM_RETURN_IF_ERROR(s.begin_capture());
  for (int it = 0; it < per_graph; ++it) {
    Status st = enqueue(it);
    if (!st.ok()) {
      (void)s.end_capture();
      return st;
    }
  }
  LOOM_ASSIGN_OR_RETURN(hrx::Graph graph, s.end_capture());
  LOOM_ASSIGN_OR_RETURN(double us, time_graph(graph, s, dev, per_graph, 15));
  Timed t;
  t.us = us;
  const Cost c = op.cost(shape);
  t.gbs = c.bytes / (us * 1e3);
  t.tflops = c.flops / (us * 1e6);
  return t;
}

// Schedules worth timing for matvec_gpu beyond its default: rows per thread, warps and prefetch
// around the default's lanes per row, and half / double the lanes with the default's placement.
std::vector<Schedule> matvec_gpu_sweep(const OpSpec& op, const Shape& s) {
  std::vector<Schedule> out = {op.default_schedule(s, ir::TargetKind::kPtx)};
  const Schedule d = out[0];
  auto add = [&](Schedule c) {
    if (c.at("lanes_per_row") < 1 || c.at("lanes_per_row") > 32) return;
    for (const Schedule& o : out)
      if (o == c) return;
    out.push_back(c);
  };
  if (s.at("n_tokens") > 1) {  // batches: only the placement knobs (lanes per row fix the bits)
    for (int64_t rpt : {1, 2})
      for (int64_t prefetch : {0, 1}) {
        Schedule c = d;
        c["rows_per_thread"] = rpt;
        c["prefetch"] = prefetch;
        add(c);
      }
    return out;
  }
  for (int64_t prefetch : {0, 1}) {
    for (int64_t rpt : {1, 2, 4})
      for (int64_t warps : {4, 8})
        add({{"warps", warps}, {"lanes_per_row", d.at("lanes_per_row")}, {"rows_per_thread", rpt}, {"passes", 1},
             {"prefetch", prefetch}});
    for (int64_t lpr : {d.at("lanes_per_row") / 2, d.at("lanes_per_row") * 2}) {
      Schedule c = d;
      c["lanes_per_row"] = lpr;
      c["prefetch"] = prefetch;
      add(c);
    }
  }
  return out;
}

struct BenchEnv {
  hrx::Device dev;
  hrx::Stream stream;
  double peak = 0;
  std::ofstream out;
};

// Times `ops` (all sharing one argument layout) on each shape: the first op that accepts the
// shape fills the inputs; every op and schedule is checked against `make_ref`'s rows first.
void run_shapes(BenchEnv& env, const std::vector<std::string>& opnames, const std::vector<std::string>& shapes,
                const std::function<RowRef(const std::string& op, const Shape&, ShapeBuffers&)>& make_ref, bool sweep) {
  for (const std::string& key : shapes) {
    auto shape = Shape::parse(key);
    ASSERT_TRUE(shape.ok()) << key;
    const OpSpec* filler = nullptr;
    for (const std::string& n : opnames)
      if (const OpSpec* o = find_op(n); o && o->validate(*shape).ok()) {
        filler = o;
        break;
      }
    if (!filler) continue;
    auto sb = make_buffers(*filler, *shape, env.dev, env.stream);
    ASSERT_TRUE(sb.ok()) << sb.status().to_string();
    for (const std::string& opname : opnames) {
      const OpSpec* op = find_op(opname);
      ASSERT_NE(op, nullptr) << opname;
      if (!op->validate(*shape).ok()) continue;
      RowRef ref = make_ref(opname, *shape, *sb);
      std::vector<Schedule> schedules = {op->default_schedule(*shape, ir::TargetKind::kPtx)};
      if (sweep && opname == "matvec_gpu") schedules = matvec_gpu_sweep(*op, *shape);
      double best = 1e30;
      std::string best_key;
      for (size_t i = 0; i < schedules.size(); ++i) {
        auto t = bench_one(*op, *shape, schedules[i], env.dev, env.stream, *sb, ref);
        nlohmann::json j = {{"what", "op"}, {"op", opname}, {"shape", key}, {"schedule", schedule_key(schedules[i])},
                            {"default", i == 0}, {"device", env.dev.props().name}, {"copies", sb->copies}};
        if (!t.ok()) {
          j["error"] = t.status().to_string();
          ADD_FAILURE() << opname << " " << key << " " << schedule_key(schedules[i]) << ": " << t.status().to_string();
        } else {
          j["us"] = t->us;
          j["gbs"] = t->gbs;
          j["tflops"] = t->tflops;
          j["fraction_of_copy"] = t->gbs / env.peak;
          if (t->us < best) {
            best = t->us;
            best_key = schedule_key(schedules[i]);
          }
          if (i == 0)
            std::printf("%-10s %-44s default %-50s %9.2f us %6.0f GB/s %4.0f%% %6.1f TFLOP/s\n", opname.c_str(), key.c_str(),
                        schedule_key(schedules[i]).c_str(), t->us, t->gbs, 100 * t->gbs / env.peak, t->tflops);
        }
        env.out << j.dump() << "\n";
        env.out.flush();
      }
      if (schedules.size() > 1 && best < 1e30) {
        const double gbs = op->cost(*shape).bytes / (best * 1e3);
        std::printf("%-10s %-44s best    %-50s %9.2f us %6.0f GB/s %4.0f%%\n", opname.c_str(), key.c_str(), best_key.c_str(),
                    best, gbs, 100 * gbs / env.peak);
      }
    }
  }
}

std::unique_ptr<BenchEnv> open_env(const char* path) {
  auto dev = hrx::Device::open("cuda");
  if (!dev.ok()) return nullptr;
  auto env = std::make_unique<BenchEnv>();
  env->dev = *dev;
  auto stream = hrx::Stream::create(env->dev);
  if (!stream.ok()) return nullptr;
  env->stream = std::move(*stream);
  env->out.open(path, std::ios::app);
  auto copy = copy_gbs(env->dev, env->stream);
  if (!copy.ok()) return nullptr;
  env->peak = *copy;
  env->out << nlohmann::json{{"what", "copy_d2d"}, {"device", env->dev.props().name}, {"bytes", 2.0 * (1 << 30)},
                             {"gbs", env->peak}}.dump()
           << "\n";
  std::printf("copy d2d: %.0f GB/s (read + write)\n", env->peak);
  return env;
}

// matvec / matvec_gpu: y[r] = vec_dot(W row r, xq) (llm::ref).
RowRef vec_dot_ref(const Shape& shape, ShapeBuffers& sb) {
  const auto wt = static_cast<llm::GgmlType>(shape.at("wtype"));
  const int64_t n_in = shape.at("n_in"), n_out = shape.at("n_out"), nt = shape.at("n_tokens");
  const int64_t wr = sb.specs[0].bytes / n_out, xr = sb.specs[1].bytes / nt;
  return [&sb, wt, n_in, wr, xr](int64_t r, int64_t t) {
    return static_cast<double>(llm::ref::vec_dot(wt, sb.host[0].bytes.data() + r * wr, sb.host[1].bytes.data() + t * xr, n_in));
  };
}

TEST(GpuBench, WeightStreamingOpsAtLlamaShapes) {
  const char* path = std::getenv("LOOM_GPU_BENCH");
  if (!path) GTEST_SKIP() << "a GPU benchmark: set LOOM_GPU_BENCH=FILE (JSON lines) on a machine with a CUDA device";
  auto env = open_env(path);
  if (!env) GTEST_SKIP() << "no usable CUDA device";
  std::vector<std::string> shapes = {
      "n_in=4096,n_out=14336,n_tokens=1,wtype=2",    // Llama-3-8B gate/up, Q4_0
      "n_in=14336,n_out=4096,n_tokens=1,wtype=2",    // down
      "n_in=4096,n_out=4096,n_tokens=1,wtype=2",     // q / o
      "n_in=4096,n_out=1024,n_tokens=1,wtype=2",     // k / v
      "n_in=4096,n_out=128256,n_tokens=1,wtype=14",  // output, Q6_K
      "n_in=4096,n_out=14336,n_tokens=1,wtype=12",   // Q4_K_M-like: gate/up Q4_K
      "n_in=14336,n_out=4096,n_tokens=1,wtype=14",   // down Q6_K
      "n_in=4096,n_out=4096,n_tokens=1,wtype=12",
      "n_in=4096,n_out=4096,n_tokens=1,wtype=8",     // Q8_0
      "n_in=4096,n_out=14336,n_tokens=1,wtype=8",
      "n_in=4096,n_out=14336,n_tokens=1,wtype=3",    // Q4_1
      "n_in=576,n_out=1536,n_tokens=1,wtype=2",      // SmolLM2 up, Q4_0
      "n_in=576,n_out=49152,n_tokens=1,wtype=8",     // SmolLM2 output, Q8_0
  };
  run_shapes(*env, {"matvec_gpu", "matvec"}, shapes,
             [](const std::string&, const Shape& s, ShapeBuffers& sb) { return vec_dot_ref(s, sb); },
             std::getenv("LOOM_GPU_BENCH_SWEEP") != nullptr);
}

TEST(GpuBench, PromptMatmulAtLlamaShapes) {
  const char* path = std::getenv("LOOM_GPU_BENCH");
  if (!path) GTEST_SKIP() << "a GPU benchmark: set LOOM_GPU_BENCH=FILE (JSON lines) on a machine with a CUDA device";
  auto env = open_env(path);
  if (!env) GTEST_SKIP() << "no usable CUDA device";
  std::vector<std::string> shapes = {
      "n_in=4096,n_out=14336,n_tokens=512,wtype=2", "n_in=14336,n_out=4096,n_tokens=512,wtype=2",
      "n_in=4096,n_out=4096,n_tokens=512,wtype=2",  "n_in=4096,n_out=1024,n_tokens=512,wtype=2",
      "n_in=4096,n_out=14336,n_tokens=512,wtype=12", "n_in=14336,n_out=4096,n_tokens=512,wtype=14",
      "n_in=4096,n_out=128256,n_tokens=512,wtype=14",
  };
  // matmul_mma: dequantized rows (llm::dequantize) times the f32 activations, in double.
  auto mma_ref = [](const Shape& s, ShapeBuffers& sb) -> RowRef {
    const auto wt = static_cast<llm::GgmlType>(s.at("wtype"));
    const int64_t n_in = s.at("n_in"), wr = sb.specs[0].bytes / s.at("n_out");
    auto cache = std::make_shared<std::map<int64_t, std::vector<float>>>();
    return [&sb, wt, n_in, wr, cache](int64_t r, int64_t t) {
      auto& row = (*cache)[r];
      if (row.empty()) {
        row.resize(static_cast<size_t>(n_in));
        (void)llm::dequantize(wt, sb.host[0].bytes.data() + r * wr, row.data(), n_in);
      }
      const float* x = reinterpret_cast<const float*>(sb.host[1].bytes.data()) + t * n_in;
      double acc = 0;
      for (int64_t k = 0; k < n_in; ++k) acc += static_cast<double>(row[static_cast<size_t>(k)]) * x[k];
      return acc;
    };
  };
  run_shapes(*env, {"matmul_mma"}, shapes, [&](const std::string&, const Shape& s, ShapeBuffers& sb) { return mma_ref(s, sb); },
             false);
  // The CUDA-core matmul on quantized activations, at the same shapes, for comparison.
  run_shapes(*env, {"matmul"}, {shapes[0], shapes[1]},
             [](const std::string&, const Shape& s, ShapeBuffers& sb) { return vec_dot_ref(s, sb); }, false);
}

// Batched decode: matvec_gpu for 1..16 tokens (each weight read once for all of them)
// against matmul_mma at 16 tokens, at SmolLM2's and Llama-3-8B's rows.
TEST(GpuBench, SmallBatchMatvec) {
  const char* path = std::getenv("LOOM_GPU_BENCH");
  if (!path) GTEST_SKIP() << "a GPU benchmark: set LOOM_GPU_BENCH=FILE (JSON lines) on a machine with a CUDA device";
  auto env = open_env(path);
  if (!env) GTEST_SKIP() << "no usable CUDA device";
  std::vector<std::string> shapes;
  const std::pair<const char*, int> rows[] = {{"n_in=576,n_out=1536", 2},   {"n_in=1536,n_out=576", 2},
                                              {"n_in=4096,n_out=14336", 2}, {"n_in=14336,n_out=4096", 2},
                                              {"n_in=4096,n_out=14336", 12}};
  for (const auto& [r, wtype] : rows)
    for (int nt : {1, 2, 4, 8, 16}) shapes.push_back(fmt::format("{},n_tokens={},wtype={}", r, nt, wtype));
  run_shapes(*env, {"matvec_gpu"}, shapes,
             [](const std::string&, const Shape& s, ShapeBuffers& sb) { return vec_dot_ref(s, sb); }, true);
  std::vector<std::string> mma_shapes;
  for (const std::string& k : shapes)
    if (k.find("n_tokens=16,") != std::string::npos) mma_shapes.push_back(k);
  auto mma_ref = [](const Shape& s, ShapeBuffers& sb) -> RowRef {
    const auto wt = static_cast<llm::GgmlType>(s.at("wtype"));
    const int64_t n_in = s.at("n_in"), wr = sb.specs[0].bytes / s.at("n_out");
    return [&sb, wt, n_in, wr](int64_t r, int64_t t) {
      std::vector<float> row(static_cast<size_t>(n_in));
      (void)llm::dequantize(wt, sb.host[0].bytes.data() + r * wr, row.data(), n_in);
      const float* x = reinterpret_cast<const float*>(sb.host[1].bytes.data()) + t * n_in;
      double acc = 0;
      for (int64_t k = 0; k < n_in; ++k) acc += static_cast<double>(row[static_cast<size_t>(k)]) * x[k];
      return acc;
    };
  };
  run_shapes(*env, {"matmul_mma"}, mma_shapes,
             [&](const std::string&, const Shape& s, ShapeBuffers& sb) { return mma_ref(s, sb); }, false);
}

// quantize_act at the 8B activation rows (one token, and 16): the cooperative layout (the GPU
// default) against one thread per block.
TEST(GpuBench, QuantizeAct) {
  const char* path = std::getenv("LOOM_GPU_BENCH");
  if (!path) GTEST_SKIP() << "a GPU benchmark: set LOOM_GPU_BENCH=FILE (JSON lines) on a machine with a CUDA device";
  auto env = open_env(path);
  if (!env) GTEST_SKIP() << "no usable CUDA device";
  const OpSpec* op = find_op("quantize_act");
  ASSERT_NE(op, nullptr);
  for (const char* key : {"dtype=8,n_in=4096,n_tokens=1", "dtype=8,n_in=14336,n_tokens=1", "dtype=15,n_in=4096,n_tokens=1",
                          "dtype=15,n_in=14336,n_tokens=1", "dtype=8,n_in=4096,n_tokens=16", "dtype=9,n_in=576,n_tokens=1"}) {
    auto shape = Shape::parse(key);
    ASSERT_TRUE(shape.ok());
    auto sb = make_buffers(*op, *shape, env->dev, env->stream);
    ASSERT_TRUE(sb.ok()) << sb.status().to_string();
    for (int64_t coop : {1, 0}) {
      const Schedule sch = {{"threads", 128}, {"coop", coop}};
      auto g = op->generate(*shape, sch, ir::TargetKind::kPtx);
      ASSERT_TRUE(g.ok()) << g.status().to_string();
      auto mod = hrx::Module::compile(env->dev, g->module);
      ASSERT_TRUE(mod.ok()) << mod.status().to_string();
      auto k = mod->kernel(g->launches[0].kernel);
      ASSERT_TRUE(k.ok());
      const KernelLaunch& l = g->launches[0];
      hrx::KernelArgs a;
      a.buffer(sb->bufs[0][0]).buffer(sb->bufs[1][0]);
      // Checked byte for byte against the reference first.
      ASSERT_TRUE(env->stream.launch(*k, {l.grid[0], l.grid[1], l.grid[2]}, {l.block[0], l.block[1], l.block[2]}, a).ok());
      std::vector<uint8_t> got(static_cast<size_t>(sb->specs[1].bytes));
      ASSERT_TRUE(env->stream.copy_d2h(got.data(), sb->bufs[1][0], 0, got.size()).ok());
      ASSERT_TRUE(env->stream.synchronize().ok());
      std::vector<HostArg> want = sb->host;
      ASSERT_TRUE(op->reference(*shape, want).ok());
      ASSERT_EQ(got, want[1].bytes) << key << " coop=" << coop;
      ASSERT_TRUE(env->stream.begin_capture().ok());
      for (int i = 0; i < 50; ++i)
        ASSERT_TRUE(env->stream.launch(*k, {l.grid[0], l.grid[1], l.grid[2]}, {l.block[0], l.block[1], l.block[2]}, a).ok());
      auto graph = env->stream.end_capture();
      ASSERT_TRUE(graph.ok()) << graph.status().to_string();
      auto us = time_graph(*graph, env->stream, env->dev, 50, 15);
      ASSERT_TRUE(us.ok()) << us.status().to_string();
      std::printf("quantize_act %-34s coop=%d %7.2f us (graph replay)\n", key, static_cast<int>(coop), *us);
      env->out << nlohmann::json{{"what", "op"}, {"op", "quantize_act"}, {"shape", key}, {"schedule", schedule_key(sch)},
                                 {"device", env->dev.props().name}, {"us", *us}}.dump()
               << "\n";
    }
  }
}

}  // namespace
}  // namespace loom::kernels
