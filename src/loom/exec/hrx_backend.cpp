// HrxBackend: lowers each step Program to op-library kernels once per step shape (a Plan),
// compiles them as one module, binds every kernel argument to a fixed device address, and runs
// the step as a list of launches (or a captured graph replay). The plan types and the compile
// step are in hrx_plan.h / hrx_compile.cpp.
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
#include "loom/exec/fusion_plan.h"
#include "loom/exec/hrx_plan.h"
#include "loom/exec/planar_weights.h"
#include "loom/gguf/ggml_types.h"
#include "loom/gguf/planar.h"
#include "loom/hrx/runtime.h"
#include "loom/ir/ir.h"
#include "loom/kernels/elementwise_util.h"
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

int64_t pad_tokens(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

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

class HrxBackend final : public llm::Backend {
 public:
  explicit HrxBackend(HrxBackendOptions o) : opt_(std::move(o)) {
    if (opt_.lowering) {
      low_ = *opt_.lowering;
    } else {
      std::vector<std::string> warnings;
      low_ = LoweringOptions::from_env(&warnings);
      for (const std::string& w : warnings) log_warn("{}", w);
    }
  }

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
    // Weights, in their stored layout; on cuda the ones only matvec_gpu and matmul_mma read in
    // the planar layout (issue 7: coalesced weight loads; LOOM_PLANAR=0 keeps GGUF rows).
    weights_.resize(model.weights().size());
    planar_.assign(model.weights().size(), false);
    if (low_.planar_layout()) planar_ = planar_weights(model, dev_.target());
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
      if (planar_[i]) {
        repacked.resize(bytes);
        LOOM_RETURN_IF_ERROR(llm::to_planar(v.type, v.n_out, v.n_in, v.data, repacked.data()));
        src = repacked.data();
      }
      LOOM_RETURN_IF_ERROR(stream_.copy_h2d(weights_[i], 0, src, bytes));
      if (planar_[i]) LOOM_RETURN_IF_ERROR(stream_.synchronize());  // before `repacked` is reused
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

  Status execute(const Program& p, const llm::StepInputs& in, float* logits) override {
    if (!model_) return failed_precondition("backend used before init");
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      if (in.positions[t] < 0 || in.positions[t] >= n_ctx_)
        return resource_exhausted("position {} is beyond the context of {} tokens", in.positions[t], n_ctx_);
      if (in.seq_ids && (in.seq_ids[t] < 0 || in.seq_ids[t] >= n_seq_))
        return out_of_range("sequence {} outside the cache's {} slots", in.seq_ids[t], n_seq_);
    }
    for (int64_t i = 0; i < p.n_outputs; ++i)
      if (in.output_rows[i] < 0 || in.output_rows[i] >= p.n_tokens)
        return out_of_range("output row {} outside the batch of {}", in.output_rows[i], p.n_tokens);
    // Plans are built for padded sizes (powers of two, tokens and output rows alike), so a
    // server whose batch changes every step meets a handful of plans, not one per (tokens,
    // outputs) mix: each new plan compiles a module, which stalls every request in the batch.
    int64_t plan_tokens = pad_tokens(p.n_tokens);
    if (plan_tokens > n_ctx_) plan_tokens = p.n_tokens;  // tiny contexts: no padding
    const int64_t plan_outputs = p.n_outputs == 0 ? 0 : std::min(pad_tokens(p.n_outputs), plan_tokens);
    auto key = std::make_pair(plan_tokens, plan_outputs);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      auto plan = build_plan(plan_tokens, plan_outputs);
      if (!plan.ok()) return std::move(plan).status().with_context(fmt::format("preparing a step of {} tokens on {}", p.n_tokens, name_));
      it = plans_.emplace(key, std::move(plan).value()).first;
    }
    Plan& plan = *it->second;
    // Step inputs: real tokens, then padding (token 0 at positions 0.. of the scratch slot).
    int32_t* h = plan.host_step.data();
    const int64_t T = plan.n_padded;
    for (int64_t t = 0; t < T; ++t) {
      const bool real = t < p.n_tokens;
      h[plan.tokens_off / 4 + t] = real ? in.tokens[t] : 0;
      h[plan.pos_off / 4 + t] = real ? in.positions[t] : static_cast<int32_t>(t - p.n_tokens);
      h[plan.seq_off / 4 + t] = real ? (in.seq_ids ? in.seq_ids[t] : 0) : static_cast<int32_t>(n_seq_);
    }
    // Output rows past the step's own repeat its last one (their logits are not copied back).
    for (int64_t i = 0; i < plan.n_outputs; ++i)
      h[plan.rows_off / 4 + i] = in.output_rows[std::min<int64_t>(i, p.n_outputs - 1)];
    LOOM_RETURN_IF_ERROR(stream_.copy_h2d(plan.step, 0, h, plan.host_step.size() * 4));
    // Programmatic dependent launch (hrx.h) for decode-sized steps; prompts only with
    // LOOM_GPU_PDL_PROMPT=1. H200 (docs/performance.md, session 5): SmolLM2 tg128 ~872 -> ~1030
    // tok/s with it; its pp512 lost with it (57.9K -> 52.7K) as the sm_90 kernels trigger their
    // dependents early. A graph keeps the setting it was captured with.
    stream_.set_dependent_launch(pdl_ && (T <= 16 || low_.pdl_prompt));
    if (plan.graph.raw()) {
      LOOM_RETURN_IF_ERROR(plan.graph.launch(stream_));
    } else {
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
        if (dump_dir_ && l.dump_value >= 0) LOOM_RETURN_IF_ERROR(dump(plan, p.n_tokens, l.dump_value));
      }
    }
    const llm::ValueDesc& out = plan.program.values[static_cast<size_t>(plan.program.logits)];
    LOOM_RETURN_IF_ERROR(stream_.copy_d2h(logits, plan.slots[static_cast<size_t>(out.slot)], 0,
                                          static_cast<uint64_t>(std::min(out.rows, p.n_outputs) * out.cols) * 4));
    LOOM_RETURN_IF_ERROR(stream_.synchronize());
    if (profile_) LOOM_RETURN_IF_ERROR(record_profile(plan));
    // After a first eager run proved the launches, later steps of this shape replay a graph.
    if (++plan.runs == 1 && opt_.use_graphs && !dump_dir_ && !profile_ && !std::getenv("LOOM_NO_GRAPHS")) {
      LOOM_RETURN_IF_ERROR(stream_.begin_capture());
      Status s;
      for (const BoundLaunch& l : plan.launches)
        if (s.ok()) s = stream_.launch(l.kernel, l.grid, l.block, l.args);
      auto g = stream_.end_capture();
      LOOM_RETURN_IF_ERROR(s);
      if (!g.ok()) return std::move(g).status().with_context("capturing the step graph");
      plan.graph = std::move(g).value();
    }
    return Status();
  }

  // Builds the plan a step of this size would use (same padding as execute), ahead of time.
  Result<bool> prepare(int64_t n_tokens, int64_t n_outputs) override {
    if (!model_) return failed_precondition("backend used before init");
    if (n_tokens < 1 || n_outputs < 0 || n_outputs > n_tokens || n_tokens > n_ctx_)
      return invalid_argument("cannot prepare a step of {} tokens with {} outputs (context {})", n_tokens, n_outputs, n_ctx_);
    int64_t plan_tokens = pad_tokens(n_tokens);
    if (plan_tokens > n_ctx_) plan_tokens = n_tokens;
    const int64_t plan_outputs = n_outputs == 0 ? 0 : std::min(pad_tokens(n_outputs), plan_tokens);
    const auto key = std::make_pair(plan_tokens, plan_outputs);
    if (plans_.count(key)) return false;
    auto plan = build_plan(plan_tokens, plan_outputs);
    if (!plan.ok()) return std::move(plan).status().with_context(fmt::format("preparing a step of {} tokens on {}", n_tokens, name_));
    plans_.emplace(key, std::move(plan).value());
    return true;
  }

 private:
  Status record_profile(const Plan& plan) {
    const std::string step = plan.n_tokens == 1 ? "decode" : "prompt";
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
  Status dump(const Plan& plan, int64_t n_real, int32_t v) {
    const llm::ValueDesc& d = plan.program.values[static_cast<size_t>(v)];
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

  Result<std::unique_ptr<Plan>> build_plan(int64_t n_tokens, int64_t n_outputs) {
    auto plan = std::make_unique<Plan>();
    plan->n_tokens = n_tokens;
    plan->n_outputs = n_outputs;
    plan->n_padded = pad_tokens(n_tokens);
    if (plan->n_padded > n_ctx_)
      plan->n_padded = n_tokens;  // tiny contexts: no padding (the scratch slot holds n_ctx cells)
    plan->program = model_->build_program(plan->n_padded, n_outputs);
    const Program& p = plan->program;
    const int64_t T = plan->n_padded;
    // Step inputs.
    plan->tokens_off = 0;
    plan->pos_off = static_cast<uint64_t>(T) * 4;
    plan->seq_off = plan->pos_off + static_cast<uint64_t>(T) * 4;
    plan->rows_off = plan->seq_off + static_cast<uint64_t>(T) * 4;
    plan->host_step.assign(static_cast<size_t>(3 * T + std::max<int64_t>(n_outputs, 1)), 0);
    LOOM_ASSIGN_OR_RETURN(plan->step, hrx::Buffer::alloc(dev_, plan->host_step.size() * 4));
    for (int64_t f : p.slot_floats) {
      LOOM_ASSIGN_OR_RETURN(hrx::Buffer b, hrx::Buffer::alloc(dev_, static_cast<uint64_t>(std::max<int64_t>(f, 1)) * 4));
      plan->slots.push_back(std::move(b));
    }
    LOOM_ASSIGN_OR_RETURN(std::vector<OpCall> calls, lower(*plan));
    return compile_plan(dev_, stored_used_, std::move(plan), std::move(calls));
  }

  uint64_t value_addr(const Plan& plan, int32_t v) const {
    return plan.slots[static_cast<size_t>(plan.program.values[static_cast<size_t>(v)].slot)].address();
  }
  uint64_t weight_addr(int32_t w) const { return weights_[static_cast<size_t>(w)].address(); }

  Result<uint64_t> scratch(Plan& plan, uint64_t bytes) { return plan_scratch(dev_, plan, bytes); }


  // Program launches -> op calls. Rope launches are held back and fused with the KV store that
  // follows them (rope_kv rotates q in place and writes the rotated k and v into the cache).
  Result<std::vector<OpCall>> lower(Plan& plan) {
    const Program& p = plan.program;
    const int64_t T = plan.n_padded;
    const uint64_t pos = plan.step.address() + plan.pos_off, seq = plan.step.address() + plan.seq_off;
    std::vector<OpCall> calls;
    std::vector<const Launch*> pending_rope, deferred;
    std::set<int32_t> held;  // values produced by held-back launches
    // Quantized activations: one buffer per (value, format), valid until the value is rewritten.
    std::map<std::pair<int32_t, int>, uint64_t> xq;
    auto op = [&](std::string_view name) -> Result<const OpSpec*> {
      const OpSpec* o = kernels::find_op(name);
      if (!o) return internal_error("the op library has no op '{}'", name);
      return o;
    };
    auto rows_of = [&](int32_t v) { return p.values[static_cast<size_t>(v)].rows; };
    auto cols_of = [&](int32_t v) { return p.values[static_cast<size_t>(v)].cols; };
    auto vname = [&](int32_t v) { return p.values[static_cast<size_t>(v)].name; };
    const FusionPlanner planner(*model_, dev_.target(), dump_dir_ != nullptr, low_);
    LOOM_ASSIGN_OR_RETURN(Fusions fu, planner.plan(p, T));
    // The address of value v's activations in format xt (quantized once per value and format,
    // by a quantize_act call placed before the first reader).
    auto activations = [&](int32_t v, GgmlType xt, int64_t n_in, int64_t nt) -> Result<uint64_t> {
      if (xt == GgmlType::F32) return value_addr(plan, v);
      auto key = std::make_pair(v, static_cast<int>(xt));
      auto found = xq.find(key);
      if (found != xq.end()) return found->second;
      OpCall q;
      LOOM_ASSIGN_OR_RETURN(q.op, op("quantize_act"));
      q.shape.dims = {{"dtype", static_cast<int64_t>(xt)}, {"n_in", n_in}, {"n_tokens", nt}};
      const uint64_t bytes = xt == GgmlType::F16 ? static_cast<uint64_t>(2 * n_in * nt)
                                                 : llm::ref::quantized_row_bytes(xt, n_in) * static_cast<uint64_t>(nt);
      LOOM_ASSIGN_OR_RETURN(uint64_t buf, scratch(plan, bytes));
      q.bind = {{"x", value_addr(plan, v)}, {"xq", buf}};
      q.label = fmt::format("quantize_act {} -> {}", vname(v), xt == GgmlType::F16 ? "f16" : llm::ggml_type_name(xt));
      calls.push_back(std::move(q));
      xq.emplace(key, buf);
      return buf;
    };
    std::function<Status(const Launch&)> step = [&](const Launch& l) -> Status {
      // A value that is written stops being the source of its quantized copies.
      if (l.out >= 0)
        for (auto it = xq.begin(); it != xq.end();) it = it->first.first == l.out ? xq.erase(it) : std::next(it);
      if (fu.absorbed.count(&l)) return Status();  // computed by a fused call (FusionPlanner)
      // A launch that reads a rotated (or deferred) value before the KV store (Gemma 3 scales q
      // there) runs after the fused rope_kv, in its original order.
      if (l.op != OpCode::kRope && l.op != OpCode::kKvStore && !pending_rope.empty() &&
          (held.count(l.in0) || held.count(l.in1))) {
        deferred.push_back(&l);
        if (l.out >= 0) held.insert(l.out);
        return Status();
      }
      OpCall call;
      call.label = fmt::format("{} -> {}", llm::op_name(l.op), l.out >= 0 ? vname(l.out) : "kv cache");
      call.out_value = l.out;
      switch (l.op) {
        case OpCode::kGetRows: {
          const llm::ref::WeightView& w = model_->weight(l.weight).view;
          LOOM_ASSIGN_OR_RETURN(call.op, op("get_rows"));
          call.shape.dims = {{"wtype", static_cast<int64_t>(w.type)}, {"n_in", w.n_in}, {"n_vocab", w.n_out},
                             {"n_ids", rows_of(l.out)}};
          call.bind = {{"table", weight_addr(l.weight)}, {"ids", plan.step.address() + plan.tokens_off},
                       {"out", value_addr(plan, l.out)}};
          break;
        }
        case OpCode::kRmsNorm: {
          if (auto nq = fu.norm_q8.find(&l); nq != fu.norm_q8.end()) {
            // rms_norm_q8: the matmuls' Q8 blocks straight from the norm (and the add before it).
            const GgmlType xt = nq->second;
            const int64_t rows = rows_of(l.out), n = cols_of(l.out);
            auto ad = fu.norm_add.find(&l);
            const Launch* add = ad == fu.norm_add.end() ? nullptr : ad->second;
            LOOM_ASSIGN_OR_RETURN(call.op, op("rms_norm_q8"));
            call.shape = kernels::elt::make_shape({{"n_rows", rows}, {"n", n}, {"has_weight", l.weight >= 0 ? 1 : 0},
                                                   {"dtype", static_cast<int64_t>(xt)}, {"add", add ? 1 : 0}},
                                                  {{"eps_f32", l.eps}});
            LOOM_ASSIGN_OR_RETURN(uint64_t buf, scratch(plan, llm::ref::quantized_row_bytes(xt, n) * static_cast<uint64_t>(rows)));
            if (add) {
              call.bind = {{"a", value_addr(plan, add->in0)}, {"b", value_addr(plan, add->in1)},
                           {"sum", value_addr(plan, add->out)}};
              // A sum written over an input: one CTA per row (no CTA may overwrite what another reads).
              if (call.bind["sum"] == call.bind["a"] || call.bind["sum"] == call.bind["b"]) call.shape.dims["inplace"] = 1;
              call.label = fmt::format("add + rms_norm_q8 -> {}, {}", vname(add->out), vname(l.out));
            } else {
              call.bind = {{"x", value_addr(plan, l.in0)}};
              call.label = fmt::format("rms_norm_q8 -> {}", vname(l.out));
            }
            call.out_value = add ? add->out : -1;  // the norm's f32 output is not written
            call.bind["xq"] = buf;
            if (l.weight >= 0) call.bind["w"] = weight_addr(l.weight);
            xq[std::make_pair(l.out, static_cast<int>(xt))] = buf;
            break;
          }
          if (auto ad = fu.norm_add.find(&l); ad != fu.norm_add.end()) {
            // add_rms_norm: the residual add fused in front (sum and the normalized row written).
            const Launch& a = *ad->second;
            LOOM_ASSIGN_OR_RETURN(call.op, op("add_rms_norm"));
            const int64_t n = rows_of(l.out) * cols_of(l.out);
            call.shape = kernels::elt::make_shape(
                {{"n_rows", n / l.group}, {"n", l.group}, {"has_weight", l.weight >= 0 ? 1 : 0}}, {{"eps_f32", l.eps}});
            call.bind = {{"a", value_addr(plan, a.in0)}, {"b", value_addr(plan, a.in1)}, {"sum", value_addr(plan, a.out)},
                         {"y", value_addr(plan, l.out)}};
            if (l.weight >= 0) call.bind["w"] = weight_addr(l.weight);
            call.label = fmt::format("add + rms_norm -> {}, {}", vname(a.out), vname(l.out));
            break;
          }
          LOOM_ASSIGN_OR_RETURN(call.op, op("rms_norm"));
          const int64_t n = rows_of(l.out) * cols_of(l.out);
          call.shape = kernels::elt::make_shape({{"n_rows", n / l.group}, {"n", l.group}, {"has_weight", l.weight >= 0 ? 1 : 0}},
                                                {{"eps_f32", l.eps}});
          call.bind = {{"x", value_addr(plan, l.in0)}, {"y", value_addr(plan, l.out)}};
          if (l.weight >= 0) call.bind["w"] = weight_addr(l.weight);
          break;
        }
        case OpCode::kMatMul: {
          const llm::ref::WeightView& w = model_->weight(l.weight).view;
          const int64_t nt = rows_of(l.in0);
          LOOM_ASSIGN_OR_RETURN(MatmulChoice mc, planner.choose_matmul(l, nt));
          LOOM_ASSIGN_OR_RETURN(uint64_t xaddr, activations(l.in0, mc.xtype, w.n_in, nt));
          call.op = mc.op;
          call.shape = mc.shape;
          call.bind = {{"w", weight_addr(l.weight)}, {mc.op->name() == "matmul_mma" ? "x" : "xq", xaddr},
                       {"y", value_addr(plan, l.out)}};
          if (planar_[static_cast<size_t>(l.weight)]) {  // planar weights: only these two ops read them
            if (mc.op->name() != "matvec_gpu" && mc.op->name() != "matmul_mma")
              return internal_error("planar weight {} lowered to {}", model_->weight(l.weight).name, mc.op->name());
            call.shape.dims["planar"] = 1;
          }
          if (auto g = fu.groups.find(&l); g != fu.groups.end()) {
            // One matvec_gpu launch for the group's weights (FusionPlanner checked the shape).
            const std::vector<const Launch*>& ms = g->second;
            auto glu = fu.glu.find(&l);
            call.shape.dims["n_w"] = static_cast<int64_t>(ms.size());
            std::string names = vname(l.out);
            for (size_t m = 1; m < ms.size(); ++m) {
              call.shape.dims[fmt::format("n_out{}", m)] = model_->weight(ms[m]->weight).view.n_out;
              call.bind[fmt::format("w{}", m)] = weight_addr(ms[m]->weight);
              if (glu == fu.glu.end()) call.bind[fmt::format("y{}", m)] = value_addr(plan, ms[m]->out);
              names += "|" + vname(ms[m]->out);
              if (planar_[static_cast<size_t>(ms[m]->weight)] != planar_[static_cast<size_t>(l.weight)])
                return internal_error("matvec_gpu group mixes planar and GGUF weights ({})", vname(l.out));
            }
            if (glu != fu.glu.end()) {
              call.shape.dims["glu"] = 1;
              call.bind["y"] = value_addr(plan, glu->second->out);
              call.out_value = glu->second->out;
              call.label = fmt::format("matmul + swiglu -> {} ({})", vname(glu->second->out), names);
            } else {
              call.label = fmt::format("matmul -> {}", names);
            }
          }
          break;
        }
        case OpCode::kAdd:
        case OpCode::kSwiGlu:
        case OpCode::kGeGlu: {
          const char* name = l.op == OpCode::kAdd ? "add" : l.op == OpCode::kSwiGlu ? "swiglu" : "geglu";
          LOOM_ASSIGN_OR_RETURN(call.op, op(name));
          call.shape.dims = {{"n", rows_of(l.out) * cols_of(l.out)}};
          LOOM_RETURN_IF_ERROR(bind_inputs(call, {value_addr(plan, l.in0), value_addr(plan, l.in1)}, value_addr(plan, l.out)));
          break;
        }
        case OpCode::kScale:
        case OpCode::kSoftcap: {
          const bool sc = l.op == OpCode::kScale;
          LOOM_ASSIGN_OR_RETURN(call.op, op(sc ? "scale" : "softcap"));
          call.shape = kernels::elt::make_shape({{"n", rows_of(l.out) * cols_of(l.out)}}, {{sc ? "s_f32" : "cap_f32", l.f}});
          LOOM_RETURN_IF_ERROR(bind_inputs(call, {value_addr(plan, l.in0)}, value_addr(plan, l.out)));
          break;
        }
        case OpCode::kRope:
          if (l.out != l.in0 && value_addr(plan, l.out) != value_addr(plan, l.in0)) {
            // rope_kv works in place on q; the recipes rotate in place, so this is not expected.
            return unimplemented("rope into a different value ({} -> {})", vname(l.in0), vname(l.out));
          }
          pending_rope.push_back(&l);
          held.insert(l.out);
          return Status();
        case OpCode::kKvStore: {
          const Launch* rq = nullptr;
          const Launch* rk = nullptr;
          for (const Launch* r : pending_rope) (r->out == l.in0 ? rk : rq) = r;
          if (!rq || !rk || pending_rope.size() != 2)
            return unimplemented("a KV store without exactly one rotated q and k before it");
          for (const Launch* d : deferred)
            if (d->out == l.in0 || d->out == l.in1)
              return unimplemented("a KV store of a value computed from a rotated one");
          pending_rope.clear();
          held.clear();
          const llm::ref::RopeParams& rp = rk->rope;
          LOOM_ASSIGN_OR_RETURN(call.op, op("rope_kv"));
          call.out_value = rq->out;
          call.shape = kernels::elt::make_shape(
              {{"n_tokens", T}, {"n_head", rq->n_head}, {"n_head_kv", rk->n_head}, {"head_dim", rk->head_dim},
               {"n_dims", rp.n_dims}, {"mode", static_cast<int64_t>(rp.mode)}, {"n_seq", n_seq_ + 1}, {"n_ctx", n_ctx_},
               {"has_ff", rp.freq_factors ? 1 : 0}, {"n_ctx_orig", rp.n_ctx_orig}},
              {{"freq_base_f32", rp.freq_base}, {"freq_scale_f32", rp.freq_scale}, {"ext_factor_f32", rp.ext_factor},
               {"attn_factor_f32", rp.attn_factor}, {"beta_fast_f32", rp.beta_fast}, {"beta_slow_f32", rp.beta_slow}});
          call.bind = {{"q", value_addr(plan, rq->out)}, {"k", value_addr(plan, l.in0)}, {"v", value_addr(plan, l.in1)},
                       {"pos", pos}, {"seq", seq}, {"k_cache", k_cache_[static_cast<size_t>(l.layer)].address()},
                       {"v_cache", v_cache_[static_cast<size_t>(l.layer)].address()}};
          if (rp.freq_factors) {
            if (rp.freq_factors != model_->rope_freqs() || !rope_ff_.raw())
              return unimplemented("rope frequency factors other than the model's rope_freqs");
            call.bind["ff"] = rope_ff_.address();
          }
          break;
        }
        case OpCode::kAttention: {
          const llm::ref::AttentionParams& a = l.attn;
          if (a.head_dim_k != a.head_dim_v) return unimplemented("attention with different K and V head sizes");
          LOOM_ASSIGN_OR_RETURN(call.op, op(T <= low_.decode_attention_max ? "attention_decode" : "attention_prompt"));
          call.shape = kernels::elt::make_shape(
              {{"n_tokens", T}, {"n_head", a.n_head}, {"n_head_kv", a.n_head_kv}, {"head_dim", a.head_dim_k},
               {"n_seq", n_seq_ + 1}, {"n_ctx", n_ctx_}, {"n_swa", a.n_swa}},
              {{"scale_f32", a.scale}, {"softcap_f32", a.softcap}});
          call.bind = {{"q", value_addr(plan, l.in0)}, {"pos", pos}, {"seq", seq},
                       {"k_cache", k_cache_[static_cast<size_t>(l.layer)].address()},
                       {"v_cache", v_cache_[static_cast<size_t>(l.layer)].address()}, {"out", value_addr(plan, l.out)}};
          if (auto aq = fu.attn_q.find(&l); aq != fu.attn_q.end() && call.op->name() == "attention_decode") {
            // The o projection's activation blocks written by the attention itself (FusionPlanner).
            const GgmlType xt = aq->second;
            call.shape.dims["out_q"] = static_cast<int64_t>(xt);
            LOOM_ASSIGN_OR_RETURN(uint64_t buf, scratch(plan, llm::ref::quantized_row_bytes(xt, cols_of(l.out)) *
                                                              static_cast<uint64_t>(T)));  // the op's rows
            call.bind["xq"] = buf;
            call.label = fmt::format("attention + quantize -> {}, {}", vname(l.out), llm::ggml_type_name(xt));
            xq[std::make_pair(l.out, static_cast<int>(xt))] = buf;
          }
          break;
        }
        case OpCode::kGatherRows: {
          LOOM_ASSIGN_OR_RETURN(call.op, op("gather_rows"));
          call.shape.dims = {{"n_rows", rows_of(l.in0)}, {"n_cols", cols_of(l.in0)}, {"n_out", rows_of(l.out)}};
          call.bind = {{"x", value_addr(plan, l.in0)}, {"rows", plan.step.address() + plan.rows_off},
                       {"out", value_addr(plan, l.out)}};
          break;
        }
      }
      calls.push_back(std::move(call));
      if (l.op == OpCode::kKvStore && !deferred.empty()) {
        std::vector<const Launch*> again;
        again.swap(deferred);
        for (const Launch* d : again) LOOM_RETURN_IF_ERROR(step(*d));
      }
      return Status();
    };
    for (const Launch& l : p.launches) LOOM_RETURN_IF_ERROR(step(l));
    if (!pending_rope.empty()) return unimplemented("a rotation without a KV store after it");
    return calls;
  }

  // Element-wise ops take their inputs in the op's own argument order, then one output.
  Status bind_inputs(OpCall& call, std::vector<uint64_t> in, uint64_t out) {
    std::vector<kernels::ArgSpec> args = call.op->args(call.shape);
    size_t i = 0;
    for (const kernels::ArgSpec& a : args) {
      if (a.role == ArgRole::kInput) {
        if (i >= in.size()) return internal_error("{}: more inputs than the launch gives", call.op->name());
        call.bind[a.name] = in[i++];
      } else if (a.role == ArgRole::kOutput) {
        call.bind[a.name] = out;
      }
    }
    return Status();
  }

  HrxBackendOptions opt_;
  LoweringOptions low_;  // opt_.lowering, or the environment's
  std::set<std::string> stored_used_;  // stored kernels announced once (op|shape|id)
  std::string name_ = "hrx";
  hrx::Device dev_;
  hrx::Stream stream_;
  // Programmatic dependent launch: supported and on (hrx.h); also for prompt steps.
  bool pdl_ = false;
  const llm::Model* model_ = nullptr;
  int64_t n_ctx_ = 0, n_seq_ = 1, k_row_ = 0, v_row_ = 0;
  std::vector<hrx::Buffer> weights_, k_cache_, v_cache_;
  std::vector<bool> planar_;  // per weight: uploaded in the planar layout (exec/planar_weights.h)
  hrx::Buffer rope_ff_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Plan>> plans_;
  const char* dump_dir_ = std::getenv("LOOM_DUMP_VALUES");
  const bool profile_ = profiling_enabled();
};

}  // namespace

namespace {
std::atomic<int> g_profiling{-1};  // -1: $LOOM_PROFILE decides
}  // namespace

void set_profiling(bool on) { g_profiling.store(on ? 1 : 0, std::memory_order_relaxed); }

bool profiling_enabled() {
  if (int p = g_profiling.load(std::memory_order_relaxed); p >= 0) return p == 1;
  const char* e = std::getenv("LOOM_PROFILE");
  return e && *e && std::string_view(e) != "0";
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
  if (const char* env = std::getenv("LOOM_DEVICE"); env && *env) return env;
  // Enumerating opens the CUDA driver: once per process is enough.
  static const std::string first_gpu = [] {
    for (const hrx::Device& d : hrx::Device::enumerate())
      if (d.props().spec.rfind("cuda", 0) == 0) return d.props().spec;
    return std::string("cpu-ref");
  }();
  return first_gpu;
}

Result<std::unique_ptr<llm::Backend>> make_backend(std::string_view device, int n_threads) {
  const std::string dev = device.empty() ? default_device() : std::string(device);
  if (dev == "cpu-ref") return llm::make_ref_backend(n_threads);
  HrxBackendOptions o;
  o.device = dev;
  o.n_threads = n_threads;
  return make_hrx_backend(o);
}

}  // namespace loom::exec
