// The lowering table (see lowering.h): one function per Program op.
#include "loom/exec/lowering.h"

#include <array>
#include <vector>

#include <fmt/format.h>

#include "loom/base/options.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::exec {
namespace {

using kernels::ArgRole;
using llm::GgmlType;
using llm::Launch;
using llm::OpCode;
using llm::Program;

// What one table entry sees.
struct Site {
  const Program& p;
  const Launch& l;
  const LoweringContext& c;
  const llm::ValueDesc& v(int32_t id) const { return p.values[static_cast<size_t>(id)]; }
  int64_t elems(int32_t id) const { return v(id).rows * v(id).cols; }
  uint64_t at(int32_t id) const { return c.at.value(id); }
  const std::string& name(int32_t id) const { return v(id).name; }
};

Result<const kernels::OpSpec*> op(std::string_view name) {
  const kernels::OpSpec* o = kernels::find_op(name);
  if (!o) return internal_error("the op library has no op '{}'", name);
  return o;
}

OpCall named(const Site& s, std::string label) {
  OpCall call;
  call.label = std::move(label);
  call.out_value = s.l.out >= 0 && s.v(s.l.out).type == GgmlType::F32 ? s.l.out : -1;
  return call;
}

// Element-wise ops take their inputs in the op's own argument order, then one output.
Status bind_elementwise(OpCall& call, std::vector<uint64_t> in, uint64_t out) {
  size_t i = 0;
  for (const kernels::ArgSpec& a : call.op->args(call.shape)) {
    if (a.role == ArgRole::kInput) {
      if (i >= in.size()) return internal_error("{}: more inputs than the launch gives", call.op->name());
      call.bind[a.name] = in[i++];
    } else if (a.role == ArgRole::kOutput) {
      call.bind[a.name] = out;
    }
  }
  return Status();
}

Result<OpCall> lower_get_rows(const Site& s) {
  const llm::ref::WeightView& w = s.c.model.weight(s.l.weight).view;
  OpCall call = named(s, fmt::format("get_rows -> {}", s.name(s.l.out)));
  LOOM_ASSIGN_OR_RETURN(call.op, op("get_rows"));
  call.shape.dims = {{"wtype", static_cast<int64_t>(w.type)}, {"n_in", w.n_in}, {"n_vocab", w.n_out},
                     {"n_ids", s.v(s.l.out).rows}};
  call.bind = {{"table", s.c.at.weight(s.l.weight)}, {"ids", s.c.at.tokens}, {"out", s.at(s.l.out)}};
  return call;
}

// rms_norm and add_rms_norm: normalized groups of l.group values.
Result<OpCall> lower_norm(const Site& s) {
  const bool add = s.l.op == OpCode::kAddRmsNorm;
  OpCall call = named(s, add ? fmt::format("add + rms_norm -> {}, {}", s.name(s.l.out1), s.name(s.l.out))
                             : fmt::format("rms_norm -> {}", s.name(s.l.out)));
  LOOM_ASSIGN_OR_RETURN(call.op, op(add ? "add_rms_norm" : "rms_norm"));
  const int64_t n = s.elems(s.l.out);
  call.shape = kernels::elt::make_shape({{"n_rows", n / s.l.group}, {"n", s.l.group}, {"has_weight", s.l.weight >= 0 ? 1 : 0}},
                                        {{"eps_f32", s.l.eps}});
  if (add) call.bind = {{"a", s.at(s.l.in0)}, {"b", s.at(s.l.in1)}, {"sum", s.at(s.l.out1)}, {"y", s.at(s.l.out)}};
  else call.bind = {{"x", s.at(s.l.in0)}, {"y", s.at(s.l.out)}};
  if (s.l.weight >= 0) call.bind["w"] = s.c.at.weight(s.l.weight);
  return call;
}

Result<OpCall> lower_norm_q8(const Site& s) {
  const bool add = s.l.in1 >= 0;
  const llm::ValueDesc& q = s.v(s.l.out);
  OpCall call = named(s, add ? fmt::format("add + rms_norm_q8 -> {}, {}", s.name(s.l.out1), q.name)
                             : fmt::format("rms_norm_q8 -> {}", q.name));
  call.out_value = add ? s.l.out1 : -1;  // the norm's f32 output is not written
  LOOM_ASSIGN_OR_RETURN(call.op, op("rms_norm_q8"));
  call.shape = kernels::elt::make_shape({{"n_rows", q.rows}, {"n", q.cols}, {"has_weight", s.l.weight >= 0 ? 1 : 0},
                                         {"dtype", static_cast<int64_t>(q.type)}, {"add", add ? 1 : 0}},
                                        {{"eps_f32", s.l.eps}});
  if (add) {
    call.bind = {{"a", s.at(s.l.in0)}, {"b", s.at(s.l.in1)}, {"sum", s.at(s.l.out1)}};
    // A sum written over an input: one CTA per row (no CTA may overwrite what another reads).
    if (call.bind["sum"] == call.bind["a"] || call.bind["sum"] == call.bind["b"]) call.shape.dims["inplace"] = 1;
  } else {
    call.bind = {{"x", s.at(s.l.in0)}};
  }
  call.bind["xq"] = s.at(s.l.out);
  if (s.l.weight >= 0) call.bind["w"] = s.c.at.weight(s.l.weight);
  return call;
}

Result<OpCall> lower_quantize(const Site& s) {
  const llm::ValueDesc& q = s.v(s.l.out);
  OpCall call = named(s, fmt::format("quantize_act {} -> {}", s.name(s.l.in0),
                                     q.type == GgmlType::F16 ? "f16" : llm::ggml_type_name(q.type)));
  LOOM_ASSIGN_OR_RETURN(call.op, op("quantize_act"));
  call.shape.dims = {{"dtype", static_cast<int64_t>(q.type)}, {"n_in", q.cols}, {"n_tokens", q.rows}};
  call.bind = {{"x", s.at(s.l.in0)}, {"xq", s.at(s.l.out)}};
  return call;
}

Result<OpCall> lower_matmul(const Site& s) {
  const llm::ValueDesc& x = s.v(s.l.in0);
  LOOM_ASSIGN_OR_RETURN(MatmulKernel k, s.c.plan.matmul(s.l.weight, x.rows));
  if (x.type != k.xtype)
    return internal_error("{} reads {} activations of {}, its kernel {} reads {}", s.c.model.weight(s.l.weight).name,
                          llm::ggml_type_name(x.type), x.name, k.op->name(), llm::ggml_type_name(k.xtype));
  OpCall call = named(s, fmt::format("matmul -> {}", s.name(s.l.out)));
  call.op = k.op;
  call.shape = k.shape;
  call.bind = {{"w", s.c.at.weight(s.l.weight)}, {std::string(k.x_arg()), s.at(s.l.in0)},
               {"y", s.at(s.l.out)}};
  if (s.l.weight1 < 0) return call;
  // One matvec_gpu launch for up to three weights of this input (the fusion pass checked it).
  if (!k.fast_matvec) return internal_error("a multi-weight matmul on {}", k.op->name());
  const std::array<int32_t, 2> more_w = {s.l.weight1, s.l.weight2}, more_y = {s.l.out1, s.l.out2};
  int64_t n_w = 1;
  std::string names = s.name(s.l.out);
  for (size_t m = 0; m < more_w.size() && more_w[m] >= 0; ++m, ++n_w) {
    call.shape.dims[fmt::format("n_out{}", n_w)] = s.c.model.weight(more_w[m]).view.n_out;
    call.bind[fmt::format("w{}", n_w)] = s.c.at.weight(more_w[m]);
    if (!s.l.glu) {
      call.bind[fmt::format("y{}", n_w)] = s.at(more_y[m]);
      names += "|" + s.name(more_y[m]);
    }
  }
  call.shape.dims["n_w"] = n_w;
  if (s.l.glu) {
    call.shape.dims["glu"] = 1;
    call.label = fmt::format("matmul + swiglu -> {}", s.name(s.l.out));
  } else {
    call.label = fmt::format("matmul -> {}", names);
  }
  return call;
}

Result<OpCall> lower_binary(const Site& s) {
  const char* name = s.l.op == OpCode::kAdd ? "add" : s.l.op == OpCode::kSwiGlu ? "swiglu" : "geglu";
  OpCall call = named(s, fmt::format("{} -> {}", name, s.name(s.l.out)));
  LOOM_ASSIGN_OR_RETURN(call.op, op(name));
  call.shape.dims = {{"n", s.elems(s.l.out)}};
  LOOM_RETURN_IF_ERROR(bind_elementwise(call, {s.at(s.l.in0), s.at(s.l.in1)}, s.at(s.l.out)));
  return call;
}

Result<OpCall> lower_unary(const Site& s) {
  const bool sc = s.l.op == OpCode::kScale;
  OpCall call = named(s, fmt::format("{} -> {}", sc ? "scale" : "softcap", s.name(s.l.out)));
  LOOM_ASSIGN_OR_RETURN(call.op, op(sc ? "scale" : "softcap"));
  call.shape = kernels::elt::make_shape({{"n", s.elems(s.l.out)}}, {{sc ? "s_f32" : "cap_f32", s.l.f}});
  LOOM_RETURN_IF_ERROR(bind_elementwise(call, {s.at(s.l.in0)}, s.at(s.l.out)));
  return call;
}

Result<OpCall> lower_rope_kv(const Site& s) {
  if (s.l.out != s.l.in0) return unimplemented("rope_kv into a different value ({} -> {})", s.name(s.l.in0), s.name(s.l.out));
  const llm::ref::RopeParams& rp = s.l.rope;
  OpCall call = named(s, fmt::format("rope_kv -> {}, cache {}", s.name(s.l.out), s.l.layer));
  LOOM_ASSIGN_OR_RETURN(call.op, op("rope_kv"));
  call.shape = kernels::elt::make_shape(
      {{"n_tokens", s.p.n_tokens}, {"n_head", s.l.n_head}, {"n_head_kv", s.l.n_head_kv}, {"head_dim", s.l.head_dim},
       {"n_dims", rp.n_dims}, {"mode", static_cast<int64_t>(rp.mode)}, {"n_seq", s.c.at.n_seq_slots},
       {"n_ctx", s.c.at.n_ctx}, {"has_ff", rp.freq_factors ? 1 : 0}, {"n_ctx_orig", rp.n_ctx_orig}},
      {{"freq_base_f32", rp.freq_base}, {"freq_scale_f32", rp.freq_scale}, {"ext_factor_f32", rp.ext_factor},
       {"attn_factor_f32", rp.attn_factor}, {"beta_fast_f32", rp.beta_fast}, {"beta_slow_f32", rp.beta_slow}});
  call.bind = {{"q", s.at(s.l.in0)}, {"k", s.at(s.l.in1)}, {"v", s.at(s.l.in2)}, {"pos", s.c.at.positions},
               {"seq", s.c.at.seq_ids}, {"k_cache", s.c.at.k_cache(s.l.layer)}, {"v_cache", s.c.at.v_cache(s.l.layer)}};
  if (rp.freq_factors) {
    if (rp.freq_factors != s.c.model.rope_freqs() || !s.c.at.rope_freqs)
      return unimplemented("rope frequency factors other than the model's rope_freqs");
    call.bind["ff"] = s.c.at.rope_freqs;
  }
  return call;
}

Result<OpCall> lower_attention(const Site& s) {
  const llm::ref::AttentionParams& a = s.l.attn;
  if (a.head_dim_k != a.head_dim_v) return unimplemented("attention with different K and V head sizes");
  const bool decode = s.p.n_tokens <= s.c.decode_attention_max;
  OpCall call = named(s, fmt::format("attention -> {}", s.name(s.l.out)));
  LOOM_ASSIGN_OR_RETURN(call.op, op(decode ? "attention_decode" : "attention_prompt"));
  call.shape = kernels::elt::make_shape(
      {{"n_tokens", s.p.n_tokens}, {"n_head", a.n_head}, {"n_head_kv", a.n_head_kv}, {"head_dim", a.head_dim_k},
       {"n_seq", s.c.at.n_seq_slots}, {"n_ctx", s.c.at.n_ctx}, {"n_swa", a.n_swa}},
      {{"scale_f32", a.scale}, {"softcap_f32", a.softcap}});
  // Prompts on PTX targets: the tensor-core kernel where it takes the shape (LOOM_PROMPT_ATTENTION).
  if (!decode && s.l.out1 < 0 && s.c.plan.target() == ir::TargetKind::kPtx &&
      opt::get_string(opt::Opt::kPromptAttention) == "mma") {
    LOOM_ASSIGN_OR_RETURN(const kernels::OpSpec* mma, op("attention_mma"));
    if (mma->validate(call.shape).ok()) call.op = mma;
  }
  call.bind = {{"q", s.at(s.l.in0)}, {"pos", s.c.at.positions}, {"seq", s.c.at.seq_ids},
               {"k_cache", s.c.at.k_cache(s.l.layer)}, {"v_cache", s.c.at.v_cache(s.l.layer)}, {"out", s.at(s.l.out)}};
  if (s.l.out1 >= 0) {
    // The o projection's activation blocks written by the attention itself.
    if (!decode) return internal_error("a quantizing attention in a step of {} tokens", s.p.n_tokens);
    const llm::ValueDesc& q = s.v(s.l.out1);
    call.shape.dims["out_q"] = static_cast<int64_t>(q.type);
    call.bind["xq"] = s.at(s.l.out1);
    call.label = fmt::format("attention + quantize -> {}, {}", s.name(s.l.out), llm::ggml_type_name(q.type));
  }
  return call;
}

Result<OpCall> lower_gather_rows(const Site& s) {
  OpCall call = named(s, fmt::format("gather_rows -> {}", s.name(s.l.out)));
  LOOM_ASSIGN_OR_RETURN(call.op, op("gather_rows"));
  const llm::ValueDesc& x = s.v(s.l.in0);
  call.shape.dims = {{"n_rows", x.rows}, {"n_cols", x.cols}, {"n_out", s.v(s.l.out).rows}};
  call.bind = {{"x", s.at(s.l.in0)}, {"rows", s.c.at.output_rows}, {"out", s.at(s.l.out)}};
  return call;
}

// The bias vector is a model weight, added to every row of in0.
Result<OpCall> lower_add_bias(const Site& s) {
  OpCall call = named(s, fmt::format("add_bias -> {}", s.name(s.l.out)));
  LOOM_ASSIGN_OR_RETURN(call.op, op("add_bias"));
  const llm::ValueDesc& x = s.v(s.l.in0);
  call.shape.dims = {{"n_rows", x.rows}, {"n", x.cols}};
  call.bind = {{"x", s.at(s.l.in0)}, {"b", s.c.at.weight(s.l.weight)}, {"y", s.at(s.l.out)}};
  return call;
}

// Expert mat-vecs: the chosen experts' rows of a stacked tensor, per (token, slot).
Result<OpCall> lower_matmul_id(const Site& s) {
  const llm::Weight& W = s.c.model.weight(s.l.weight);
  const llm::ValueDesc& x = s.v(s.l.in0);
  const llm::ValueDesc& ids = s.v(s.l.in1);
  LOOM_ASSIGN_OR_RETURN(MatmulKernel k, s.c.plan.matmul_id(s.l.weight, x.rows));
  if (x.type != k.xtype)
    return internal_error("{} reads {} activations of {}, matvec_id reads {}", W.name, llm::ggml_type_name(x.type), x.name,
                          llm::ggml_type_name(k.xtype));
  const int64_t n_in = W.view.n_in, n_used = ids.cols;
  if (x.cols != n_in && x.cols != n_used * n_in)
    return internal_error("{}: {} has {} cols, rows of {}", W.name, x.name, x.cols, n_in);
  OpCall call = named(s, fmt::format("matvec_id -> {}", s.name(s.l.out)));
  call.op = k.op;
  call.shape.dims = {{"wtype", static_cast<int64_t>(W.view.type)}, {"n_in", n_in}, {"n_out", W.expert_rows()},
                     {"n_tokens", x.rows}, {"n_expert", W.n_expert}, {"n_used", n_used},
                     {"x_per_slot", x.cols == n_in ? 0 : 1}};
  if (k.op->name() == "matmul_mmq_id") {
    if (s.l.glu) return internal_error("{}: a gate|up matmul_id in a step of {} tokens", W.name, x.rows);
    call.label = fmt::format("matmul_mmq_id -> {}", s.name(s.l.out));
  } else if (x.rows >= WeightPlan::kMatmulIdGroupedTokens) {
    // Steps of kMatmulIdGroupedTokens or more (prompts, large batches) list the pairs per expert
    // first and read each chosen expert's rows once; smaller ones read per (token, slot).
    if (s.l.glu) return internal_error("{}: a gate|up matmul_id in a step of {} tokens", W.name, x.rows);
    call.shape.dims["grouped"] = 1;
    call.label = fmt::format("matvec_id grouped -> {}", s.name(s.l.out));
  }
  call.bind = {{"w", s.c.at.weight(s.l.weight)}, {"xq", s.at(s.l.in0)}, {"ids", s.at(s.l.in1)}, {"y", s.at(s.l.out)}};
  if (s.l.glu) {
    call.shape.dims["glu"] = 1;
    call.bind["w1"] = s.c.at.weight(s.l.weight1);
    call.label = fmt::format("matvec_id + swiglu -> {}", s.name(s.l.out));
  }
  return call;
}

Result<OpCall> lower_moe_route(const Site& s) {
  OpCall call = named(s, fmt::format("moe_route -> {}, {}", s.name(s.l.out1), s.name(s.l.out)));
  LOOM_ASSIGN_OR_RETURN(call.op, op("moe_route"));
  const llm::ValueDesc& x = s.v(s.l.in0);
  call.shape.dims = {{"n_rows", x.rows}, {"n_expert", x.cols}, {"n_used", s.v(s.l.out).cols}, {"norm", s.l.norm_w ? 1 : 0}};
  call.bind = {{"logits", s.at(s.l.in0)}, {"ids", s.at(s.l.out1)}, {"w", s.at(s.l.out)}};
  return call;
}

Result<OpCall> lower_moe_sum(const Site& s) {
  OpCall call = named(s, fmt::format("moe_sum -> {}", s.name(s.l.out)));
  LOOM_ASSIGN_OR_RETURN(call.op, op("moe_sum"));
  const llm::ValueDesc& y = s.v(s.l.out);
  call.shape.dims = {{"n_rows", y.rows}, {"n_used", s.v(s.l.in1).cols}, {"n", y.cols}};
  call.bind = {{"x", s.at(s.l.in0)}, {"w", s.at(s.l.in1)}, {"y", s.at(s.l.out)}};
  return call;
}

struct Rule {
  OpCode code;
  std::string_view op;  // the op-library op (matmul, attention: chosen per step)
  Result<OpCall> (*lower)(const Site&);
};

// The table: one entry per Program op, in OpCode order.
constexpr std::array<Rule, 18> kRules = {{
    {OpCode::kGetRows, "get_rows", lower_get_rows},
    {OpCode::kRmsNorm, "rms_norm", lower_norm},
    {OpCode::kMatMul, "matvec | matmul | matvec_gpu | matmul_mma | matmul_mmq", lower_matmul},
    {OpCode::kAdd, "add", lower_binary},
    {OpCode::kScale, "scale", lower_unary},
    {OpCode::kSoftcap, "softcap", lower_unary},
    {OpCode::kRopeKv, "rope_kv", lower_rope_kv},
    {OpCode::kAttention, "attention_decode | attention_prompt", lower_attention},
    {OpCode::kSwiGlu, "swiglu", lower_binary},
    {OpCode::kGeGlu, "geglu", lower_binary},
    {OpCode::kGatherRows, "gather_rows", lower_gather_rows},
    {OpCode::kQuantize, "quantize_act", lower_quantize},
    {OpCode::kAddRmsNorm, "add_rms_norm", lower_norm},
    {OpCode::kRmsNormQ8, "rms_norm_q8", lower_norm_q8},
    {OpCode::kAddBias, "add_bias", lower_add_bias},
    {OpCode::kMoeRoute, "moe_route", lower_moe_route},
    {OpCode::kMatMulId, "matvec_id | matmul_mmq_id", lower_matmul_id},
    {OpCode::kMoeSum, "moe_sum", lower_moe_sum},
}};

constexpr bool table_in_order() {
  for (size_t i = 0; i < kRules.size(); ++i)
    if (static_cast<size_t>(kRules[i].code) != i) return false;
  return true;
}
static_assert(table_in_order(), "kRules must list every OpCode once, in order");

}  // namespace

Result<OpCall> lower_launch(const Program& p, const Launch& l, const LoweringContext& c) {
  const size_t i = static_cast<size_t>(l.op);
  if (i >= kRules.size()) return internal_error("no lowering for op {}", static_cast<int>(l.op));
  return kRules[i].lower(Site{p, l, c});
}

std::string_view lowered_op(OpCode code) {
  const size_t i = static_cast<size_t>(code);
  return i < kRules.size() ? kRules[i].op : std::string_view("?");
}

}  // namespace loom::exec
