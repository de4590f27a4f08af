// The per-weight plan (see weight_plan.h).
#include "loom/exec/weight_plan.h"

#include "loom/base/options.h"
#include "loom/gguf/planar.h"
#include "loom/ref/ops_ref.h"

namespace loom::exec {
namespace {

kernels::Shape matmul_shape(llm::GgmlType type, int64_t n_in, int64_t n_out, int64_t n_tokens) {
  return kernels::Shape{{{"wtype", static_cast<int64_t>(type)}, {"n_in", n_in}, {"n_out", n_out}, {"n_tokens", n_tokens}}};
}
kernels::Shape matmul_shape(const llm::ref::WeightView& v, int64_t n_tokens) {
  return matmul_shape(v.type, v.n_in, v.n_out, n_tokens);
}

// The formats whose prompts measured faster on matmul_mmq than on matmul_mma (H200, 8B pp512:
// Q4_0 9152 vs 6980 tok/s, bench/results/2026-12-03-h200-mmq.json; Q4_K_M-like 6436 vs 5158,
// 2026-12-03-h200-mmq-q4k.json; Q8_0 as Q4_0).
bool mmq_measured(llm::GgmlType t) { return t == llm::GgmlType::Q4_0 || t == llm::GgmlType::Q8_0 || t == llm::GgmlType::Q4_K; }

// The formats whose prompt matmuls measured faster on matmul_mma's warpgroup MMA (its weights-
// in-registers kernel) than on the integer matmul_mmq: Q4_0 and Q4_K, at every Llama-3-8B matrix
// at 512 tokens on an H100 (1.22-1.32x, bench/results/2026-12-07-h100-wgmma-rs.json).
bool wgmma_measured(llm::GgmlType t) { return t == llm::GgmlType::Q4_0 || t == llm::GgmlType::Q4_K; }

}  // namespace

PrefillMatmul prefill_matmul_option() {
  const std::string v = opt::get_string(opt::Opt::kPrefillMatmul);
  return v == "f16"     ? PrefillMatmul::kF16
         : v == "int8"  ? PrefillMatmul::kInt8
         : v == "wgmma" ? PrefillMatmul::kWgmma
                        : PrefillMatmul::kAuto;
}

WeightPlan WeightPlan::make(const llm::Model& model, ir::TargetKind target, PrefillMatmul prompts, bool wgmma) {
  WeightPlan p;
  p.model_ = &model;
  p.target_ = target;
  p.prompts_ = prompts;
  p.entries_.assign(model.weights().size(), Entry{});
  p.planar_.assign(model.weights().size(), false);
  if (target != ir::TargetKind::kPtx) return p;
  const kernels::OpSpec* mvg = kernels::find_op("matvec_gpu");
  const kernels::OpSpec* mma = kernels::find_op("matmul_mma");
  for (size_t i = 0; i < model.weights().size(); ++i) {
    const llm::ref::WeightView& v = model.weights()[i].view;
    p.entries_[i] = rules(v.type, v.n_in, v.n_out, target, prompts, wgmma);
  }
  // The planar layout where only matvec_gpu and matmul_mma read the weight, in every step size.
  auto consider = [&](int32_t id) {
    if (id < 0) return;
    Entry& e = p.entries_[static_cast<size_t>(id)];
    const llm::ref::WeightView& v = model.weight(id).view;
    llm::PlanarGeometry g;
    if (!e.fast_matvec || !e.mma || !llm::planar_geometry(v.type, &g)) return;
    if (v.row_stride != llm::ref::quantized_row_bytes(v.type, v.n_in)) return;
    kernels::Shape s = matmul_shape(v, 1);
    s.dims["planar"] = 1;
    if (!mvg->validate(s).ok()) return;
    s.dims["n_tokens"] = 512;
    s.dims["xtype"] = 1;
    if (!mma->validate(s).ok()) return;
    e.planar = true;
    p.planar_[static_cast<size_t>(id)] = true;
  };
  for (const llm::LayerWeights& l : model.layers())
    for (int32_t id : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down}) consider(id);
  if (model.output() != model.tok_embd()) consider(model.output());
  for (Entry& e : p.entries_) e.settle_layout();
  return p;
}

WeightPlan::Entry WeightPlan::rules(llm::GgmlType type, int64_t n_in, int64_t n_out, ir::TargetKind target,
                                    PrefillMatmul prompts, bool wgmma) {
  Entry e;
  if (target != ir::TargetKind::kPtx) return e;
  const kernels::OpSpec* mvg = kernels::find_op("matvec_gpu");
  const kernels::OpSpec* mma = kernels::find_op("matmul_mma");
  const kernels::OpSpec* mmq = kernels::find_op("matmul_mmq");
  kernels::Shape s = matmul_shape(type, n_in, n_out, 1);
  e.fast_matvec = mvg && mvg->validate(s).ok();
  s.dims["n_tokens"] = 512;
  // kAuto: the integer matmul where it measured faster (mmq_measured); kInt8: every format
  // matmul_mmq takes. Q6_K: matmul_mmq takes GGUF rows only, and the engine keeps dense Q6_K
  // matrices in the planar layout.
  const bool measured = mmq_measured(type);
  e.mmq = mmq && prompts != PrefillMatmul::kF16 && prompts != PrefillMatmul::kWgmma && (measured || prompts == PrefillMatmul::kInt8) &&
          type != llm::GgmlType::Q6_K && mmq->validate(s).ok();
  s.dims["xtype"] = 1;
  e.mma = mma && mma->validate(s).ok();
  // Hopper: matmul_mma on the warpgroup MMA, for every format under kWgmma and under kAuto where
  // it measured faster than the integer kernel (wgmma_measured), which it then replaces.
  e.wgmma = wgmma && e.mma && (prompts == PrefillMatmul::kWgmma || (prompts == PrefillMatmul::kAuto && wgmma_measured(type)));
  e.wgmma_if_planar = e.wgmma && prompts == PrefillMatmul::kAuto;
  e.mmq_rows = e.mmq;
  if (e.wgmma) e.mmq = false;
  return e;
}

Result<MatmulKernel> WeightPlan::for_rows(llm::GgmlType type, int64_t n_in, int64_t n_out, int64_t n_tokens,
                                          ir::TargetKind target, PrefillMatmul prompts, bool wgmma) {
  Entry e = rules(type, n_in, n_out, target, prompts, wgmma);
  e.settle_layout();  // GGUF rows
  return pick(e, type, n_in, n_out, n_tokens, "");
}

Result<MatmulKernel> WeightPlan::matmul(int32_t weight, int64_t n_tokens) const {
  if (!model_ || weight < 0 || static_cast<size_t>(weight) >= entries_.size())
    return internal_error("no weight plan for weight {}", weight);
  const llm::Weight& w = model_->weight(weight);
  return pick(entry(weight), w.view.type, w.view.n_in, w.view.n_out, n_tokens, w.name);
}

Result<MatmulKernel> WeightPlan::pick(const Entry& e, llm::GgmlType type, int64_t n_in, int64_t n_out, int64_t n_tokens,
                                      std::string_view name) {
  MatmulKernel k;
  k.shape = matmul_shape(type, n_in, n_out, n_tokens);
  LOOM_ASSIGN_OR_RETURN(k.xtype, llm::ref::vec_dot_type(type));
  if (e.fast_matvec) {
    const kernels::OpSpec* mvg = kernels::find_op("matvec_gpu");
    if (mvg->validate(k.shape).ok()) {
      k.op = mvg;
      k.fast_matvec = true;
    }
  }
  if (!k.op && e.mmq && n_tokens >= 16) {
    const kernels::OpSpec* mmq = kernels::find_op("matmul_mmq");
    if (mmq->validate(k.shape).ok()) {
      k.op = mmq;
      k.xtype = llm::GgmlType::Q8_1;
    }
  }
  if (!k.op && e.mma && n_tokens >= 16) {
    const kernels::OpSpec* mma = kernels::find_op("matmul_mma");
    kernels::Shape s = k.shape;
    s.dims["xtype"] = 1;
    if (e.wgmma) s.dims["wgmma"] = 1;
    if (mma->validate(s).ok()) {
      k.op = mma;
      k.xtype = llm::GgmlType::F16;
      k.shape = s;
    }
  }
  if (e.planar) {
    if (!k.op)
      return internal_error("planar weight {} has no kernel for a step of {} tokens", name, n_tokens);
    k.shape.dims["planar"] = 1;
    return k;
  }
  if (!k.op) k.op = kernels::find_op(n_tokens == 1 ? "matvec" : "matmul");
  if (!k.op) return internal_error("the op library has no matvec/matmul");
  return k;
}

Result<MatmulKernel> WeightPlan::matmul_id(int32_t weight, int64_t n_tokens) const {
  if (!model_ || weight < 0 || static_cast<size_t>(weight) >= entries_.size())
    return internal_error("no weight plan for weight {}", weight);
  const llm::Weight& w = model_->weight(weight);
  if (w.n_expert <= 0) return internal_error("{} is not a stack of experts", w.name);
  MatmulKernel k;
  // Prompts on the integer tensor cores: the formats matmul_mmq measured faster on and Q6_K (the
  // MoE pp512 with Q6_K experts on matmul_mmq_id 5308 vs 2531 tok/s on the grouped matvec_id,
  // 2026-12-04-h200-moe-prefill.json) under kAuto, every one it takes under kInt8. The shape here
  // is the weight's; the lowering adds the ids' dimensions.
  const llm::GgmlType t = w.view.type;
  const bool measured = mmq_measured(t) || t == llm::GgmlType::Q6_K;
  const kernels::OpSpec* mmq = kernels::find_op("matmul_mmq_id");
  if (target_ == ir::TargetKind::kPtx && n_tokens > kMatmulIdMmqTokens && mmq && prompts_ != PrefillMatmul::kF16 &&
      (measured || prompts_ == PrefillMatmul::kInt8)) {
    kernels::Shape s = matmul_shape(w.view, n_tokens);
    s.dims["n_out"] = w.expert_rows();
    s.dims["n_expert"] = w.n_expert;
    s.dims["n_used"] = 1;
    s.dims["x_per_slot"] = 0;
    if (mmq->validate(s).ok()) {
      k.op = mmq;
      k.xtype = llm::GgmlType::Q8_1;
      return k;
    }
  }
  k.op = kernels::find_op("matvec_id");
  if (!k.op) return internal_error("the op library has no matvec_id");
  LOOM_ASSIGN_OR_RETURN(k.xtype, llm::ref::vec_dot_type(w.view.type));
  return k;
}

}  // namespace loom::exec
