// The planar weight layout of matvec_gpu (gguf/planar.h): the repacking round-trips and
// puts each piece where the layout says; on a CUDA device (LOOM_GPU_BENCH_PLANAR=FILE), the
// planar kernels at the Llama-3-8B shapes agree with the GGUF ones on the same weights and are
// timed against them (events around launches rotating over weight copies larger than the L2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/gguf/planar.h"
#include "loom/hrx/runtime.h"
#include "loom/kernels/op_list.h"
#include "loom/kernels/op_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::kernels {
namespace {

using llm::GgmlType;

TEST(MatvecGpuPlanar, RepackRoundTripsAndPlacesPieces) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    SCOPED_TRACE(llm::ggml_type_name(t));
    llm::PlanarGeometry g;
    ASSERT_TRUE(llm::planar_geometry(t, &g));
    const int64_t be = t == GgmlType::Q4_K || t == GgmlType::Q6_K ? 256 : 32;
    const int64_t rows = 3, n_in = 4 * be, nblk = rows * 4, bb = g.block_bytes();
    std::vector<uint8_t> src(static_cast<size_t>(nblk * bb)), pl(src.size()), back(src.size());
    std::mt19937_64 rng(7);
    for (auto& v : src) v = static_cast<uint8_t>(rng());
    ASSERT_TRUE(llm::to_planar(t, rows, n_in, src.data(), pl.data()).ok());
    ASSERT_NE(pl, src);
    ASSERT_TRUE(llm::from_planar(t, rows, n_in, pl.data(), back.data()).ok());
    EXPECT_EQ(back, src);
    // Block 5 (row 1, block 1): its last piece and its header where planar.h puts them.
    const int64_t k = 5, p = g.pieces - 1;
    EXPECT_EQ(std::memcmp(pl.data() + (p * nblk + k) * 16, src.data() + k * bb + g.body_offset() + 16 * p, 16), 0);
    EXPECT_EQ(std::memcmp(pl.data() + 16 * g.pieces * nblk + k * g.header_bytes, src.data() + k * bb + g.header_offset,
                          static_cast<size_t>(g.header_bytes)),
              0);
  }
  std::vector<uint8_t> a(64), b(64);
  EXPECT_FALSE(llm::to_planar(GgmlType::Q5_0, 1, 32, a.data(), b.data()).ok());
  EXPECT_FALSE(llm::to_planar(GgmlType::Q4_0, 1, 48, a.data(), b.data()).ok());
}

// One op launch set up on the device: weights in `copies` rotating copies.
struct Bench {
  hrx::Module mod;
  std::vector<hrx::Kernel> kernels;
  Generated g;
  std::vector<std::vector<hrx::Buffer>> bufs;  // per copy: the op's arguments
};

Result<Bench> setup(const hrx::Device& dev, hrx::Stream& s, const OpSpec& op, const Shape& shape,
                    const std::vector<HostArg>& host, int copies, const Schedule* sch = nullptr) {
  Bench bn;
  const Schedule def = op.default_schedule(shape, dev.target());
  LOOM_ASSIGN_OR_RETURN(bn.g, op.generate(shape, sch ? *sch : def, dev.target()));
  LOOM_ASSIGN_OR_RETURN(bn.mod, hrx::Module::compile(dev, bn.g.module));
  for (const KernelLaunch& l : bn.g.launches) {
    LOOM_ASSIGN_OR_RETURN(hrx::Kernel k, bn.mod.kernel(l.kernel));
    bn.kernels.push_back(std::move(k));
  }
  const std::vector<ArgSpec> specs = op.args(shape);
  for (int c = 0; c < copies; ++c) {
    std::vector<hrx::Buffer> v;
    for (size_t i = 0; i < specs.size(); ++i) {
      const bool weight = specs[i].role == ArgRole::kInput && specs[i].name != "xq";
      if (c > 0 && !weight) {  // activations and outputs: one buffer shared by the copies
        v.push_back(hrx::Buffer());
        continue;
      }
      LOOM_ASSIGN_OR_RETURN(hrx::Buffer b, hrx::Buffer::alloc(dev, static_cast<uint64_t>(specs[i].bytes)));
      if (specs[i].role == ArgRole::kInput) LOOM_RETURN_IF_ERROR(s.copy_h2d(b, 0, host[i].bytes.data(), host[i].bytes.size()));
      v.push_back(std::move(b));
    }
    bn.bufs.push_back(std::move(v));
  }
  return bn;
}

Status launch(Bench& bn, hrx::Stream& s, int c) {
  for (size_t li = 0; li < bn.g.launches.size(); ++li) {
    const KernelLaunch& l = bn.g.launches[li];
    hrx::KernelArgs args;
    for (int ai : l.args) {
      const hrx::Buffer& own = bn.bufs[static_cast<size_t>(c)][static_cast<size_t>(ai)];
      args.buffer(own.raw() ? own : bn.bufs[0][static_cast<size_t>(ai)]);
    }
    LOOM_RETURN_IF_ERROR(s.launch(bn.kernels[li], {l.grid[0], l.grid[1], l.grid[2]}, {l.block[0], l.block[1], l.block[2]}, args));
  }
  return Status();
}

// Median microseconds per launch over 7 timings of 60 launches rotating over the copies.
Result<double> time_us(Bench& bn, hrx::Stream& s, const hrx::Device& dev) {
  LOOM_ASSIGN_OR_RETURN(hrx::Event e0, hrx::Event::create(dev));
  LOOM_ASSIGN_OR_RETURN(hrx::Event e1, hrx::Event::create(dev));
  const int copies = static_cast<int>(bn.bufs.size());
  for (int c = 0; c < copies; ++c) LOOM_RETURN_IF_ERROR(launch(bn, s, c));
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    LOOM_RETURN_IF_ERROR(e0.record(s));
    for (int i = 0; i < 60; ++i) LOOM_RETURN_IF_ERROR(launch(bn, s, i % copies));
    LOOM_RETURN_IF_ERROR(e1.record(s));
    LOOM_RETURN_IF_ERROR(e1.synchronize());
    LOOM_ASSIGN_OR_RETURN(float ms, hrx::Event::elapsed_ms(e0, e1));
    t.push_back(1000.0 * ms / 60);
  }
  std::sort(t.begin(), t.end());
  return t[3];
}

Result<std::vector<float>> read_out(Bench& bn, hrx::Stream& s, const OpSpec& op, const Shape& shape) {
  const std::vector<ArgSpec> specs = op.args(shape);
  std::vector<float> all;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].role != ArgRole::kOutput) continue;
    std::vector<float> y(static_cast<size_t>(specs[i].bytes / 4));
    LOOM_RETURN_IF_ERROR(s.copy_d2h(y.data(), bn.bufs[0][i], 0, y.size() * 4));
    all.insert(all.end(), y.begin(), y.end());
  }
  LOOM_RETURN_IF_ERROR(s.synchronize());
  return all;
}

TEST(MatvecGpuPlanar, EightBShapesOnCuda) {
  const char* path = std::getenv("LOOM_GPU_BENCH_PLANAR");
  if (!path) GTEST_SKIP() << "a GPU benchmark: set LOOM_GPU_BENCH_PLANAR=FILE (JSON lines) with a CUDA device";
  auto dev = hrx::Device::open("cuda");
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  auto stream = hrx::Stream::create(*dev);
  ASSERT_TRUE(stream.ok());
  const OpSpec* op = find_op("matvec_gpu");
  ASSERT_NE(op, nullptr);
  std::ofstream out(path, std::ios::app);
  const std::vector<std::string> keys = {
      "n_in=14336,n_out=4096,n_tokens=1,wtype=2",                         // down Q4_0
      "glu=1,n_in=4096,n_out=14336,n_out1=14336,n_tokens=1,n_w=2,wtype=2",  // gate|up + SwiGLU
      "n_in=4096,n_out=4096,n_out1=1024,n_out2=1024,n_tokens=1,n_w=3,wtype=2",  // q|k|v
      "n_in=4096,n_out=4096,n_tokens=1,wtype=2",                          // o
      "n_in=14336,n_out=4096,n_tokens=4,wtype=2",                         // down, 4 streams
      "glu=1,n_in=4096,n_out=14336,n_out1=14336,n_tokens=1,n_w=2,wtype=12",  // Q4_K_M-like
      "n_in=4096,n_out=4096,n_out1=1024,n_out2=1024,n_tokens=1,n_w=3,wtype=12",
      "n_in=14336,n_out=4096,n_tokens=1,wtype=14",                        // down Q6_K
      "n_in=4096,n_out=14336,n_tokens=1,wtype=8",                         // Q8_0
      "n_in=4096,n_out=14336,n_tokens=1,wtype=3",                         // Q4_1
  };
  std::mt19937_64 rng(20261130);
  for (const std::string& key : keys) {
    auto shape = Shape::parse(key);
    ASSERT_TRUE(shape.ok()) << key;
    Shape pshape = *shape;
    pshape.dims["planar"] = 1;
    SCOPED_TRACE(key);
    const std::vector<ArgSpec> specs = op->args(*shape);
    std::vector<HostArg> host(specs.size()), phost;
    op->fill_inputs(*shape, rng, host);
    phost = host;
    double wbytes = 0;
    const auto wt = static_cast<GgmlType>(shape->at("wtype"));
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].role != ArgRole::kInput || specs[i].name == "xq") continue;
      wbytes += static_cast<double>(specs[i].bytes);
      const int64_t rows = specs[i].bytes / static_cast<int64_t>(llm::ref::quantized_row_bytes(wt, shape->at("n_in")));
      ASSERT_TRUE(llm::to_planar(wt, rows, shape->at("n_in"), host[i].bytes.data(), phost[i].bytes.data()).ok());
    }
    const int copies = static_cast<int>(std::max(2.0, std::ceil(320e6 / wbytes)));
    auto gg = setup(*dev, *stream, *op, *shape, host, copies);
    ASSERT_TRUE(gg.ok()) << gg.status().to_string();
    auto pp = setup(*dev, *stream, *op, pshape, phost, copies);
    ASSERT_TRUE(pp.ok()) << pp.status().to_string();
    auto tg = time_us(*gg, *stream, *dev);
    auto tp = time_us(*pp, *stream, *dev);
    ASSERT_TRUE(tg.ok() && tp.ok());
    // Same weights, two layouts: the results agree within the op's tolerance (the planar lanes
    // sum other blocks than the GGUF units, so not bit for bit).
    auto yg = read_out(*gg, *stream, *op, *shape);
    auto yp = read_out(*pp, *stream, *op, pshape);
    ASSERT_TRUE(yg.ok() && yp.ok());
    const Tolerance tol = op->tolerance(*shape);
    double worst = 0;
    for (size_t i = 0; i < yg->size(); ++i) {
      const double a = (*yg)[i], b = (*yp)[i];
      worst = std::max(worst, std::fabs(a - b));
      ASSERT_TRUE(std::fabs(a - b) <= 2 * (tol.atol + tol.rtol * std::fabs(a))) << i << ": " << a << " vs " << b;
    }
    // LOOM_GPU_PLANAR_SWEEP=1: planar schedules around the default (lanes per row, rows per
    // thread, warps, prefetch), for default_schedule's rule.
    nlohmann::json sweep = nlohmann::json::array();
    // One token only, and only where the default may be off (the 8B q|k|v, gate|up, down).
    const size_t ki = static_cast<size_t>(&key - keys.data());
    const bool sweep_here = ki == 0 || ki == 1 || ki == 2 || ki == 5;
    if (std::getenv("LOOM_GPU_PLANAR_SWEEP") && sweep_here) {
      const Schedule def = op->default_schedule(pshape, dev->target());
      for (int64_t lpr : {16, 32})
        for (int64_t rpt : {1, 2})
          for (int64_t warps : {4, 8})
            for (int64_t pf : {def.at("prefetch")}) {
              Schedule sch = def;
              sch["lanes_per_row"] = lpr, sch["rows_per_thread"] = rpt, sch["warps"] = warps, sch["prefetch"] = pf;
              auto bn = setup(*dev, *stream, *op, pshape, phost, copies, &sch);
              if (!bn.ok()) continue;
              auto t = time_us(*bn, *stream, *dev);
              if (t.ok()) sweep.push_back({{"schedule", schedule_key(sch)}, {"us", *t}});
            }
      double best = 1e30;
      std::string best_key;
      for (const auto& e : sweep)
        if (e["us"].get<double>() < best) best = e["us"].get<double>(), best_key = e["schedule"].get<std::string>();
      std::printf("  sweep: best %s %.2f us (default %.2f us)\n", best_key.c_str(), best, *tp);
    }
    const double gbs_g = wbytes / (*tg * 1e3), gbs_p = wbytes / (*tp * 1e3);
    std::printf("%-72s gguf %7.2f us (%6.0f GB/s)  planar %7.2f us (%6.0f GB/s)  %.2fx\n", key.c_str(), *tg, gbs_g, *tp,
                gbs_p, *tg / *tp);
    out << nlohmann::json{{"shape", key},
                          {"weight_bytes", wbytes},
                          {"copies", copies},
                          {"gguf_us", *tg},
                          {"planar_us", *tp},
                          {"gguf_weight_gbs", gbs_g},
                          {"planar_weight_gbs", gbs_p},
                          {"gguf_schedule", schedule_key(op->default_schedule(*shape, dev->target()))},
                          {"planar_schedule", schedule_key(op->default_schedule(pshape, dev->target()))},
                          {"max_abs_diff", worst},
                          {"sweep", sweep}}
               .dump()
        << "\n";
  }
}

}  // namespace
}  // namespace loom::kernels
