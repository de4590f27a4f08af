// HrxBackend: for each step shape, fuses the Program it is handed (fuse.h), lowers every launch
// to one op-library call (lowering.h), compiles the calls as one module with every kernel
// argument bound to a fixed device address (a Plan: hrx_plan.h, hrx_compile.cpp), and runs the
// step as a list of launches or a captured graph replay.
#include "loom/exec/hrx_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "loom/base/log.h"
#include "loom/base/thread_pool.h"
#include "loom/base/options.h"
#include "loom/exec/fuse.h"
#include "loom/exec/hrx_plan.h"
#include "loom/exec/lowering.h"
#include "loom/exec/weight_plan.h"
#include "loom/gguf/ggml_types.h"
#include "loom/gguf/planar.h"
#include "loom/hrx/runtime.h"
#include "loom/ir/ir.h"
#include "loom/kernels/op_spec.h"
#include "loom/model/model.h"
#include "loom/ref/ops_ref.h"

namespace loom::exec {
namespace {

using kernels::ArgRole;
using kernels::OpSpec;
using kernels::Shape;
using llm::GgmlType;
using llm::Launch;
using llm::OpCode;
using llm::Program;
using namespace hrx_detail;

// The process-wide profile table (LOOM_PROFILE).
struct ProfileTable {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, OpProfile> ops;
  std::map<std::string, int64_t> steps;
};
ProfileTable& profile_table() {
  static ProfileTable t;
  return t;
}

// The fusion settings of a target from LOOM_FUSE (gpu | 0 | 1) and LOOM_DECODE_ATTENTION_MAX.
FuseOptions default_fuse_options(ir::TargetKind target) {
  FuseOptions f;
  const std::string fuse = opt::get_string(opt::Opt::kFuse);
  f.fuse = fuse == "1" || (fuse == "gpu" && target == ir::TargetKind::kPtx);
  if (!opt::get_string(opt::Opt::kDumpValues).empty()) f.fuse = false;  // every value is written
  f.decode_attention_max = opt::get_int(opt::Opt::kDecodeAttentionMax);
  return f;
}

class HrxBackend final : public llm::Backend {
 public:
  explicit HrxBackend(HrxBackendOptions o) : opt_(std::move(o)) {}

  std::string_view name() const override { return name_; }

  Status init(const llm::Model& model, int64_t n_ctx, int64_t n_seq) override {
    LOOM_ASSIGN_OR_RETURN(dev_, hrx::Device::open(opt_.device));
    name_ = "hrx:" + dev_.props().spec;
    LOOM_ASSIGN_OR_RETURN(stream_, hrx::Stream::create(dev_));
    pdl_ = stream_.dependent_launch();  // programmatic dependent launch where HRX supports it
    model_ = &model;
    n_ctx_ = n_ctx;
    n_seq_ = n_seq;
    const llm::ModelConfig& c = model.config();
    // The layout and kernel of every weight, decided once (weight_plan.h); the fusion options.
    wplan_ = WeightPlan::make(model, dev_.target(), prefill_matmul_option(), dev_.props().arch == std::string_view("sm_90"));
    fuse_ = fuse_options(dev_.target());
    weights_.resize(model.weights().size());
    const std::vector<bool>& planar = wplan_.planar_flags();
    std::vector<uint8_t> repacked;
    uint64_t total = 0;
    for (const llm::Weight& w : model.weights()) total += w.view.row_stride * static_cast<uint64_t>(w.view.n_out);
    Progress progress("uploading weights to " + dev_.props().spec, static_cast<double>(total) / (1 << 20), "MiB");
    uint64_t done = 0;
    for (size_t i = 0; i < model.weights().size(); ++i) {
      const llm::ref::WeightView& v = model.weights()[i].view;
      const uint64_t bytes = v.row_stride * static_cast<uint64_t>(v.n_out);
      LOOM_ASSIGN_OR_RETURN(weights_[i], hrx::Buffer::alloc(dev_, std::max<uint64_t>(bytes, 4)));
      const uint8_t* src = v.data;
      if (planar[i]) {
        repacked.resize(bytes);
        LOOM_RETURN_IF_ERROR(llm::to_planar(v.type, v.n_out, v.n_in, v.data, repacked.data()));
        src = repacked.data();
      }
      LOOM_RETURN_IF_ERROR(stream_.copy_h2d(weights_[i], 0, src, bytes));
      if (planar[i]) LOOM_RETURN_IF_ERROR(stream_.synchronize());  // before `repacked` is reused
      done += bytes;
      progress.update(static_cast<double>(done) / (1 << 20));
    }
    progress.finish();
    if (model.rope_freqs()) {
      const uint64_t bytes = static_cast<uint64_t>(c.n_rot / 2) * 4;
      LOOM_ASSIGN_OR_RETURN(rope_ff_, hrx::Buffer::alloc(dev_, bytes));
      LOOM_RETURN_IF_ERROR(stream_.copy_h2d(rope_ff_, 0, model.rope_freqs(), bytes));
    }
    // The KV cache: n_seq slots of n_ctx cells, plus one slot that padding tokens write.
    const uint64_t cells = static_cast<uint64_t>(n_seq + 1) * static_cast<uint64_t>(n_ctx);
    k_row_ = static_cast<int64_t>(c.n_head_kv) * c.head_dim_k;
    v_row_ = static_cast<int64_t>(c.n_head_kv) * c.head_dim_v;
    for (int64_t l = 0; l < c.n_layer; ++l) {
      LOOM_ASSIGN_OR_RETURN(hrx::Buffer k, hrx::Buffer::alloc(dev_, cells * static_cast<uint64_t>(k_row_) * 2));
      LOOM_ASSIGN_OR_RETURN(hrx::Buffer v, hrx::Buffer::alloc(dev_, cells * static_cast<uint64_t>(v_row_) * 2));
      LOOM_RETURN_IF_ERROR(stream_.memset(k, 0, 0, k.size()));
      LOOM_RETURN_IF_ERROR(stream_.memset(v, 0, 0, v.size()));
      k_cache_.push_back(std::move(k));
      v_cache_.push_back(std::move(v));
    }
    return stream_.synchronize();
  }

  // Padded to powers of two (tokens and output rows alike), so that a server whose batch
  // changes every step meets a handful of plans, not one per (tokens, outputs) mix: each new
  // plan compiles a module, which stalls every request in the batch. Tiny contexts: no padding
  // (the padding slot holds n_ctx cells).
  llm::StepShape step_shape(int64_t n_tokens, int64_t n_outputs) const override {
    int64_t t = pad_pow2(n_tokens);
    if (t > n_ctx_) t = n_tokens;
    return {t, n_outputs == 0 ? 0 : std::min(pad_pow2(n_outputs), t)};
  }

  // Cells of sequence s are [s * n_ctx, (s + 1) * n_ctx) of each layer's K and V buffers, as
  // the attention kernels index them: a prefix is one device-to-device copy per buffer.
  Status copy_cells(int64_t src, int64_t dst, int64_t n) override {
    if (!model_) return failed_precondition("backend used before init");
    if (src < 0 || dst < 0 || src >= n_seq_ || dst >= n_seq_ || n < 0 || n > n_ctx_)
      return out_of_range("cannot copy {} cells from sequence {} to {} ({} sequences of {} cells)", n, src, dst, n_seq_,
                          n_ctx_);
    if (src == dst || n == 0) return Status();
    const auto bytes = [&](int64_t cells, int64_t row) { return static_cast<uint64_t>(cells * row) * 2; };
    for (size_t l = 0; l < k_cache_.size(); ++l) {
      LOOM_RETURN_IF_ERROR(stream_.copy_d2d(k_cache_[l], bytes(dst * n_ctx_, k_row_), k_cache_[l],
                                            bytes(src * n_ctx_, k_row_), bytes(n, k_row_)));
      LOOM_RETURN_IF_ERROR(stream_.copy_d2d(v_cache_[l], bytes(dst * n_ctx_, v_row_), v_cache_[l],
                                            bytes(src * n_ctx_, v_row_), bytes(n, v_row_)));
    }
    return stream_.synchronize();
  }

  Status execute(const Program& p, const llm::StepInputs& in, float* logits) override {
    if (!model_) return failed_precondition("backend used before init");
    LOOM_RETURN_IF_ERROR(check_inputs(p, in));
    LOOM_ASSIGN_OR_RETURN(Plan * plan, plan_for(p));
    LOOM_RETURN_IF_ERROR(stage_inputs(*plan, p, in));
    // Programmatic dependent launch (hrx.h) for decode-sized steps only: it shortens the gaps
    // between the small launches of a decode step, while the prompt kernels trigger their
    // dependents early and lose with it. A graph keeps the setting it was captured with.
    stream_.set_dependent_launch(pdl_ && p.n_tokens <= 16);
    if (plan->graph.raw()) {
      LOOM_RETURN_IF_ERROR(plan->graph.launch(stream_));
    } else {
      LOOM_RETURN_IF_ERROR(launch_eagerly(*plan));
    }
    const llm::ValueDesc& out = plan->program.values[static_cast<size_t>(plan->program.logits)];
    LOOM_RETURN_IF_ERROR(stream_.copy_d2h(logits, plan->slots[static_cast<size_t>(out.slot)], 0, out.bytes()));
    LOOM_RETURN_IF_ERROR(stream_.synchronize());
    if (profile_) LOOM_RETURN_IF_ERROR(record_profile(*plan));
    // After a first eager run proved the launches, later steps of this shape replay a graph.
    if (++plan->runs == 1 && opt_.use_graphs && dump_dir_.empty() && !profile_ && !no_graphs_)
      LOOM_RETURN_IF_ERROR(capture(*plan));
    return Status();
  }

  Result<bool> prepare(const Program& p) override {
    if (!model_) return failed_precondition("backend used before init");
    if (plans_.count({p.n_tokens, p.n_outputs})) return false;
    LOOM_ASSIGN_OR_RETURN(Plan * plan, plan_for(p));
    (void)plan;
    return true;
  }

 private:
  Status record_profile(const Plan& plan) {
    const std::string step = plan.n_padded == 1 ? "decode" : "prompt";
    ProfileTable& t = profile_table();
    std::lock_guard<std::mutex> lock(t.mu);
    for (size_t i = 0; i < plan.launches.size(); ++i) {
      const BoundLaunch& l = plan.launches[i];
      LOOM_ASSIGN_OR_RETURN(float ms, hrx::Event::elapsed_ms(plan.prof_events[2 * i], plan.prof_events[2 * i + 1]));
      OpProfile& o = t.ops[{step, l.op}];
      o.step = step;
      o.op = l.op;
      ++o.launches;
      o.seconds += ms / 1e3;
      o.bytes += l.bytes;
      o.flops += l.flops;
    }
    ++t.steps[step];
    return Status();
  }

  // LOOM_DUMP_VALUES=DIR writes each value as it is computed to DIR/<value name>.f32 (the real
  // tokens' rows only), as the reference backend does: diff the two directories to find the
  // first op that diverges. Runs eagerly (no graph) and synchronizes after every op.
  Status dump(const Plan& plan, int32_t v) {
    const llm::ValueDesc& d = plan.program.values[static_cast<size_t>(v)];
    int64_t n_real = 0;  // the engine's padding tokens come last, in the padding slot
    while (n_real < plan.n_padded && plan.host_step[plan.seq_off / 4 + static_cast<size_t>(n_real)] != n_seq_) ++n_real;
    const int64_t rows = d.rows == plan.n_padded ? n_real : d.rows;
    std::vector<float> host(static_cast<size_t>(rows * d.cols));
    LOOM_RETURN_IF_ERROR(stream_.copy_d2h(host.data(), plan.slots[static_cast<size_t>(d.slot)], 0, host.size() * 4));
    LOOM_RETURN_IF_ERROR(stream_.synchronize());
    const std::string path = std::string(dump_dir_) + "/" + d.name + ".f32";
    if (FILE* fp = std::fopen(path.c_str(), "wb")) {
      std::fwrite(host.data(), sizeof(float), host.size(), fp);
      std::fclose(fp);
    }
    return Status();
  }

  static int64_t pad_pow2(int64_t n) {
    int64_t p = 1;
    while (p < n) p <<= 1;
    return p;
  }

  FuseOptions fuse_options(ir::TargetKind target) const { return opt_.fuse ? *opt_.fuse : default_fuse_options(target); }

  Status check_inputs(const Program& p, const llm::StepInputs& in) const {
    // The padding slot (n_seq) is for the engine's padding tokens (step_shape).
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      if (in.positions[t] < 0 || in.positions[t] >= n_ctx_)
        return resource_exhausted("position {} is beyond the context of {} tokens", in.positions[t], n_ctx_);
      if (in.seq_ids && (in.seq_ids[t] < 0 || in.seq_ids[t] > n_seq_))
        return out_of_range("sequence {} outside the cache's {} slots", in.seq_ids[t], n_seq_);
    }
    for (int64_t i = 0; i < p.n_outputs; ++i)
      if (in.output_rows[i] < 0 || in.output_rows[i] >= p.n_tokens)
        return out_of_range("output row {} outside the batch of {}", in.output_rows[i], p.n_tokens);
    return Status();
  }

  // The plan of this Program's step shape, built (and compiled) on first sight.
  Result<Plan*> plan_for(const Program& p) {
    const auto key = std::make_pair(p.n_tokens, p.n_outputs);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      auto plan = build_plan(p);
      if (!plan.ok())
        return std::move(plan).status().with_context(fmt::format("preparing a step of {} tokens on {}", p.n_tokens, name_));
      it = plans_.emplace(key, std::move(plan).value()).first;
    }
    return it->second.get();
  }

  Status stage_inputs(Plan& plan, const Program& p, const llm::StepInputs& in) {
    int32_t* h = plan.host_step.data();
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      h[plan.tokens_off / 4 + t] = in.tokens[t];
      h[plan.pos_off / 4 + t] = in.positions[t];
      h[plan.seq_off / 4 + t] = in.seq_ids ? in.seq_ids[t] : 0;
    }
    for (int64_t i = 0; i < p.n_outputs; ++i) h[plan.rows_off / 4 + i] = in.output_rows[i];
    return stream_.copy_h2d(plan.step, 0, h, plan.host_step.size() * 4);
  }

  Status launch_eagerly(Plan& plan) {
    if (profile_ && plan.prof_events.size() != 2 * plan.launches.size()) {
      plan.prof_events.clear();
      for (size_t i = 0; i < 2 * plan.launches.size(); ++i) {
        LOOM_ASSIGN_OR_RETURN(hrx::Event e, hrx::Event::create(dev_));
        plan.prof_events.push_back(std::move(e));
      }
    }
    for (size_t i = 0; i < plan.launches.size(); ++i) {
      const BoundLaunch& l = plan.launches[i];
      if (profile_) LOOM_RETURN_IF_ERROR(plan.prof_events[2 * i].record(stream_));
      Status s = stream_.launch(l.kernel, l.grid, l.block, l.args);
      if (!s.ok()) return std::move(s).with_context(l.label);
      if (profile_) LOOM_RETURN_IF_ERROR(plan.prof_events[2 * i + 1].record(stream_));
      if (!dump_dir_.empty() && l.dump_value >= 0) LOOM_RETURN_IF_ERROR(dump(plan, l.dump_value));
    }
    return Status();
  }

  Status capture(Plan& plan) {
    LOOM_RETURN_IF_ERROR(stream_.begin_capture());
    Status s;
    for (const BoundLaunch& l : plan.launches)
      if (s.ok()) s = stream_.launch(l.kernel, l.grid, l.block, l.args);
    auto g = stream_.end_capture();
    LOOM_RETURN_IF_ERROR(s);
    if (!g.ok()) return std::move(g).status().with_context("capturing the step graph");
    plan.graph = std::move(g).value();
    return Status();
  }

  Result<std::unique_ptr<Plan>> build_plan(const Program& model_program) {
    auto plan = std::make_unique<Plan>();
    LOOM_ASSIGN_OR_RETURN(plan->program, fuse_program(model_program, *model_, wplan_, fuse_));
    const Program& p = plan->program;
    const int64_t T = p.n_tokens;
    plan->n_padded = T;
    plan->n_outputs = p.n_outputs;
    // Step inputs.
    plan->tokens_off = 0;
    plan->pos_off = static_cast<uint64_t>(T) * 4;
    plan->seq_off = plan->pos_off + static_cast<uint64_t>(T) * 4;
    plan->rows_off = plan->seq_off + static_cast<uint64_t>(T) * 4;
    plan->host_step.assign(static_cast<size_t>(3 * T + std::max<int64_t>(p.n_outputs, 1)), 0);
    LOOM_ASSIGN_OR_RETURN(plan->step, hrx::Buffer::alloc(dev_, plan->host_step.size() * 4));
    for (uint64_t b : p.slot_bytes) {
      LOOM_ASSIGN_OR_RETURN(hrx::Buffer buf, hrx::Buffer::alloc(dev_, std::max<uint64_t>(b, 4)));
      plan->slots.push_back(std::move(buf));
    }
    Bindings at;
    const Plan& pl = *plan;
    at.value = [&pl](int32_t v) {
      const int32_t slot = pl.program.values[static_cast<size_t>(v)].slot;
      return slot < 0 ? uint64_t{0} : pl.slots[static_cast<size_t>(slot)].address();
    };
    at.weight = [this](int32_t w) { return weights_[static_cast<size_t>(w)].address(); };
    at.k_cache = [this](int32_t l) { return k_cache_[static_cast<size_t>(l)].address(); };
    at.v_cache = [this](int32_t l) { return v_cache_[static_cast<size_t>(l)].address(); };
    at.tokens = plan->step.address() + plan->tokens_off;
    at.positions = plan->step.address() + plan->pos_off;
    at.seq_ids = plan->step.address() + plan->seq_off;
    at.output_rows = plan->step.address() + plan->rows_off;
    at.rope_freqs = rope_ff_.raw() ? rope_ff_.address() : 0;
    at.n_seq_slots = n_seq_ + 1;
    at.n_ctx = n_ctx_;
    const LoweringContext ctx{*model_, wplan_, at, fuse_.decode_attention_max};
    std::vector<OpCall> calls;
    calls.reserve(p.launches.size());
    for (const Launch& l : p.launches) {
      LOOM_ASSIGN_OR_RETURN(OpCall call, lower_launch(p, l, ctx));
      calls.push_back(std::move(call));
    }
    return compile_plan(dev_, stored_used_, std::move(plan), std::move(calls));
  }

  HrxBackendOptions opt_;
  std::set<std::string> stored_used_;  // stored kernels announced once (op|shape|id)
  std::string name_ = "hrx";
  hrx::Device dev_;
  hrx::Stream stream_;
  // Programmatic dependent launch: supported and on (hrx.h); also for prompt steps.
  bool pdl_ = false;
  const llm::Model* model_ = nullptr;
  int64_t n_ctx_ = 0, n_seq_ = 1, k_row_ = 0, v_row_ = 0;
  std::vector<hrx::Buffer> weights_, k_cache_, v_cache_;
  WeightPlan wplan_;
  FuseOptions fuse_;
  hrx::Buffer rope_ff_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Plan>> plans_;
  const std::string dump_dir_ = opt::get_string(opt::Opt::kDumpValues);
  const bool no_graphs_ = opt::get_bool(opt::Opt::kNoGraphs);
  const bool profile_ = profiling_enabled();
};

}  // namespace

namespace {
std::atomic<int> g_profiling{-1};  // -1: $LOOM_PROFILE decides
}  // namespace

void set_profiling(bool on) { g_profiling.store(on ? 1 : 0, std::memory_order_relaxed); }

bool profiling_enabled() {
  if (int p = g_profiling.load(std::memory_order_relaxed); p >= 0) return p == 1;
  return opt::get_bool(opt::Opt::kProfile);
}

std::vector<OpProfile> profile_snapshot() {
  ProfileTable& t = profile_table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::vector<OpProfile> out;
  for (const auto& [k, v] : t.ops) out.push_back(v);
  std::sort(out.begin(), out.end(), [](const OpProfile& a, const OpProfile& b) {
    return a.step != b.step ? a.step < b.step : a.seconds > b.seconds;
  });
  return out;
}

int64_t profile_steps(std::string_view step) {
  ProfileTable& t = profile_table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.steps.find(std::string(step));
  return it == t.steps.end() ? 0 : it->second;
}

void profile_reset() {
  ProfileTable& t = profile_table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.ops.clear();
  t.steps.clear();
}

Result<std::unique_ptr<llm::Backend>> make_hrx_backend(const HrxBackendOptions& options) {
  if (options.n_threads > 0 && options.device.rfind("cpu", 0) == 0)
    set_default_thread_count(options.n_threads);  // read when the cpu device opens
  std::unique_ptr<llm::Backend> b = std::make_unique<HrxBackend>(options);
  return b;
}

std::string default_device() {
  // The first CUDA device when one is present (LOOM_DEVICE overrides); otherwise the reference
  // CPU ops, which stay the CPU default until the HRX cpu kernels match their speed
  // (docs/engine.md). `--device` always wins.
  if (std::string d = opt::get_string(opt::Opt::kDevice); !d.empty()) return d;
  // Enumerating opens the CUDA driver: once per process is enough.
  static const std::string first_gpu = [] {
    for (const hrx::Device& d : hrx::Device::enumerate())
      if (d.props().spec.rfind("cuda", 0) == 0) return d.props().spec;
    return std::string("cpu-ref");
  }();
  return first_gpu;
}

Result<llm::Program> device_program(const llm::Model& model, std::string_view device, int64_t n_tokens,
                                    int64_t n_outputs) {
  const std::string dev = device.empty() ? default_device() : std::string(device);
  llm::Program p = model.build_program(n_tokens, n_outputs);
  if (dev == "cpu-ref") return p;
  ir::TargetKind target;
  if (dev.rfind("cuda", 0) == 0) target = ir::TargetKind::kPtx;
  else if (dev.rfind("amdgpu", 0) == 0) target = ir::TargetKind::kAmdgpu;
  else if (dev.rfind("cpu", 0) == 0) target = ir::TargetKind::kCpp;
  else return invalid_argument("unknown device '{}' (cpu-ref, cpu, cuda, cuda:N, amdgpu, amdgpu:N)", dev);
  return fuse_program(p, model, WeightPlan::make(model, target, prefill_matmul_option()),
                      default_fuse_options(target));
}

Result<std::unique_ptr<llm::Backend>> make_backend(std::string_view device, int n_threads, llm::KvCacheTypes kv) {
  const std::string dev = device.empty() ? default_device() : std::string(device);
  if (dev == "cpu-ref") return llm::make_ref_backend(n_threads, kv);
  if (!kv.is_default())
    return unimplemented("a {}/{} KV cache (--cache-type-k/--cache-type-v) runs on --device cpu-ref only, not {}",
                         llm::ggml_type_name(kv.k), llm::ggml_type_name(kv.v), dev);
  HrxBackendOptions o;
  o.device = dev;
  o.n_threads = n_threads;
  return make_hrx_backend(o);
}

}  // namespace loom::exec
