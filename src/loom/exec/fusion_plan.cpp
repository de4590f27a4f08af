// FusionPlanner: the matmul op choice and the launch fusions of a step (see fusion_plan.h).
#include "loom/exec/fusion_plan.h"

#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "loom/kernels/elementwise_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::exec {
namespace {

using kernels::OpSpec;
using llm::GgmlType;
using llm::Launch;
using llm::OpCode;
using llm::Program;

}  // namespace

Result<MatmulChoice> FusionPlanner::choose_matmul(const Launch& l, int64_t nt) const {
  const llm::ref::WeightView& w = model_.weight(l.weight).view;
  MatmulChoice mc;
  mc.shape.dims = {{"wtype", static_cast<int64_t>(w.type)}, {"n_in", w.n_in}, {"n_out", w.n_out}, {"n_tokens", nt}};
  LOOM_ASSIGN_OR_RETURN(mc.xtype, llm::ref::vec_dot_type(w.type));
  if (target_ == ir::TargetKind::kPtx && opt_.gpu_fast_ops) {
    const OpSpec* mvg = kernels::find_op("matvec_gpu");
    if (mvg && !mvg->validate(mc.shape).ok()) mvg = nullptr;
    // gpu_batch_matvec off: one token only, as before issue 6 (A/B of the batched path).
    if (nt > 1 && !opt_.gpu_batch_matvec) mvg = nullptr;
    if (mvg) {
      mc.op = mvg;  // same arguments as matvec: w, xq, y
      mc.fast_matvec = true;
      return mc;
    }
    const OpSpec* mma = kernels::find_op("matmul_mma");
    if (nt >= 16 && mma && mma->validate(mc.shape).ok()) {
      mc.op = mma;
      mc.xtype = GgmlType::F16;
      mc.shape.dims["xtype"] = 1;
      return mc;
    }
  }
  mc.op = kernels::find_op(nt == 1 ? "matvec" : "matmul");
  if (!mc.op) return internal_error("the op library has no matvec/matmul");
  return mc;
}

bool FusionPlanner::fusions_enabled() const {
  if (all_values_ || opt_.fuse == LoweringOptions::Fuse::kOff) return false;
  return target_ == ir::TargetKind::kPtx || opt_.fuse == LoweringOptions::Fuse::kOn;
}

Result<Fusions> FusionPlanner::plan(const Program& p, int64_t nt) const {
  Fusions f;
  if (!fusions_enabled()) return f;
  Readers readers;
  for (const Launch& l : p.launches) {
    if (l.in0 >= 0) readers[l.in0].push_back(&l);
    if (l.in1 >= 0 && l.in1 != l.in0) readers[l.in1].push_back(&l);
  }
  LOOM_RETURN_IF_ERROR(fuse_norm_quant(p, nt, readers, f));
  LOOM_RETURN_IF_ERROR(quantize_attention(p, nt, readers, f));
  LOOM_RETURN_IF_ERROR(group_matmuls(p, nt, readers, f));
  return f;
}

// LoweringOptions::fuse_norm: q8 (the default: rms_norm_q8 where every reader takes
// Q8_0/Q8_1/Q8_K activations, add_rms_norm for the other adds before a norm), q8_0 (as q8 but
// Q8_0/Q8_1 only, as in session 5: the A/B of the Q8_K form), add (add_rms_norm only), off.
Status FusionPlanner::fuse_norm_quant(const Program& p, int64_t nt, Readers& readers, Fusions& f) const {
  using FuseNorm = LoweringOptions::FuseNorm;
  if (opt_.fuse_norm == FuseNorm::kOff) return Status();
  const OpSpec* nq = kernels::find_op("rms_norm_q8");
  const bool q8 = (opt_.fuse_norm == FuseNorm::kQ8 || opt_.fuse_norm == FuseNorm::kQ8_0) && nq;
  const bool q8k = opt_.fuse_norm == FuseNorm::kQ8;
  const bool add_norm = kernels::find_op("add_rms_norm") != nullptr;
  auto slot = [&](int32_t v) { return p.values[static_cast<size_t>(v)].slot; };
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const Launch& l = p.launches[i];
    if (l.op != OpCode::kRmsNorm || l.out == p.logits) continue;
    const llm::ValueDesc& d = p.values[static_cast<size_t>(l.out)];
    bool to_q8 = q8 && l.group == d.cols && d.cols % 32 == 0;
    const auto& rd = readers[l.out];
    std::optional<GgmlType> xt;
    to_q8 = to_q8 && !rd.empty();
    for (const Launch* r : rd) {
      if (!to_q8) break;
      if (r->op != OpCode::kMatMul || r->in0 != l.out) {
        to_q8 = false;
        break;
      }
      LOOM_ASSIGN_OR_RETURN(MatmulChoice mc, choose_matmul(*r, nt));
      to_q8 = (mc.xtype == GgmlType::Q8_0 || mc.xtype == GgmlType::Q8_1 || (q8k && mc.xtype == GgmlType::Q8_K)) &&
              (!xt || *xt == mc.xtype);
      xt = mc.xtype;
    }
    if (to_q8) {  // the op takes the shape (Q8_K: whole 256-blocks)
      kernels::Shape ns;
      ns.dims = {{"n_rows", d.rows}, {"n", d.cols}, {"has_weight", 0}, {"dtype", static_cast<int64_t>(*xt)}, {"add", 0}};
      kernels::elt::set_f32_dim(ns, "eps_f32", l.eps > 0.0f ? l.eps : 1e-6f);
      to_q8 = nq->validate(ns).ok();
    }
    if (to_q8) f.norm_q8[&l] = *xt;
    if (i == 0 || (!to_q8 && !add_norm)) continue;
    const Launch& a = p.launches[i - 1];
    if (a.op != OpCode::kAdd || a.out < 0 || a.out != l.in0 || f.absorbed.count(&a)) continue;
    const llm::ValueDesc& ad = p.values[static_cast<size_t>(a.out)];
    if (ad.rows != d.rows || ad.cols != d.cols) continue;
    // add_rms_norm may read a and b again after writing sum and y: none of them may share
    // memory with an input (rms_norm_q8 reads back its sum and writes only blocks).
    if (!to_q8 && (slot(a.out) == slot(a.in0) || slot(a.out) == slot(a.in1) || slot(l.out) == slot(a.in0) ||
                   slot(l.out) == slot(a.in1)))
      continue;
    f.norm_add[&l] = &a;
    f.absorbed.insert(&a);
  }
  return Status();
}

// The activation format every reader of v takes, when all are matmuls on quantized (Q8_0/Q8_1/
// Q8_K) activations of v and agree; nullopt otherwise.
static Result<std::optional<GgmlType>> quantized_readers_format(const FusionPlanner& planner, int32_t v, int64_t nt,
                                                                const std::vector<const Launch*>& rd) {
  std::optional<GgmlType> xt;
  if (rd.empty()) return xt;
  for (const Launch* r : rd) {
    if (r->op != OpCode::kMatMul || r->in0 != v) return std::optional<GgmlType>();
    LOOM_ASSIGN_OR_RETURN(MatmulChoice mc, planner.choose_matmul(*r, nt));
    const bool q = mc.xtype == GgmlType::Q8_0 || mc.xtype == GgmlType::Q8_1 || mc.xtype == GgmlType::Q8_K;
    if (!q || (xt && *xt != mc.xtype)) return std::optional<GgmlType>();
    xt = mc.xtype;
  }
  return xt;
}

Status FusionPlanner::quantize_attention(const Program& p, int64_t nt, Readers& readers, Fusions& f) const {
  // The quantizing combine does per-row work that the plain one does not, and saves one
  // quantize_act launch (~1 us with dependent launch): a gain where rows are short and launches
  // dominate, a wash on long rows. On the H200: SmolLM2 (576-value rows) tg128 +1.4%, +3.8% and
  // +0.5% in three same-binary A/Bs (a4bb200, af98870); Llama-3-8B (4096) -0.8% (a4bb200), and
  // per call 6.66 us vs 5.57 + 1.05 before 96fbc49. So on by default for rows of at most
  // kAttnQuantMaxRow values; fuse_attn kAll / kOff (LOOM_FUSE_ATTN=1 / 0) for every row.
  constexpr int64_t kAttnQuantMaxRow = 2048;
  using FuseAttn = LoweringOptions::FuseAttn;
  if (opt_.fuse_attn == FuseAttn::kOff) return Status();
  const int64_t max_row = opt_.fuse_attn == FuseAttn::kAll ? std::numeric_limits<int64_t>::max() : kAttnQuantMaxRow;
  const OpSpec* att = kernels::find_op("attention_decode");
  if (!att) return Status();
  for (const Launch& l : p.launches) {
    if (l.op != OpCode::kAttention || l.out < 0 || l.out == p.logits) continue;
    LOOM_ASSIGN_OR_RETURN(std::optional<GgmlType> xt, quantized_readers_format(*this, l.out, nt, readers[l.out]));
    if (!xt) continue;
    // Whole blocks per token row (Q8_K: 256 values; on GPUs 256 / head_dim heads per CTA).
    const int64_t row = static_cast<int64_t>(l.attn.n_head) * l.attn.head_dim_v;
    const int64_t blk = *xt == GgmlType::Q8_K ? 256 : 32;
    if (row > max_row || row % blk || l.attn.head_dim_k != l.attn.head_dim_v) continue;
    if (*xt == GgmlType::Q8_K && (256 % l.attn.head_dim_v || l.attn.n_head % (256 / l.attn.head_dim_v))) continue;
    f.attn_q[&l] = *xt;
  }
  return Status();
}

Status FusionPlanner::group_matmuls(const Program& p, int64_t nt, Readers& readers, Fusions& f) const {
  const OpSpec* mvg = kernels::find_op("matvec_gpu");
  if (!mvg) return Status();
  for (size_t i = 0; i < p.launches.size();) {
    const Launch& l = p.launches[i];
    if (l.op != OpCode::kMatMul) {
      ++i;
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(MatmulChoice first, choose_matmul(l, nt));
    const llm::ref::WeightView& w0 = model_.weight(l.weight).view;
    std::vector<const Launch*> g = {&l};
    while (first.fast_matvec && g.size() < 3 && i + g.size() < p.launches.size()) {
      const Launch& n = p.launches[i + g.size()];
      if (n.op != OpCode::kMatMul || n.in0 != l.in0) break;
      const llm::ref::WeightView& wn = model_.weight(n.weight).view;
      if (wn.type != w0.type || wn.n_in != w0.n_in) break;
      LOOM_ASSIGN_OR_RETURN(MatmulChoice mc, choose_matmul(n, nt));
      if (!mc.fast_matvec) break;
      g.push_back(&n);
    }
    if (g.size() > 1) {
      kernels::Shape s = first.shape;
      s.dims["n_w"] = static_cast<int64_t>(g.size());
      for (size_t m = 1; m < g.size(); ++m)
        s.dims[fmt::format("n_out{}", m)] = model_.weight(g[m]->weight).view.n_out;
      // gate|up: the swiglu right after the pair, the only reader of both outputs.
      const size_t after = i + g.size();
      if (g.size() == 2 && after < p.launches.size()) {
        const Launch& sw = p.launches[after];
        const int32_t go = g[0]->out, uo = g[1]->out;
        if (sw.op == OpCode::kSwiGlu && sw.in0 == go && sw.in1 == uo && go != uo && readers[go].size() == 1 &&
            readers[uo].size() == 1 && go != p.logits && uo != p.logits) {
          kernels::Shape gs = s;
          gs.dims["glu"] = 1;
          if (mvg->validate(gs).ok()) {
            f.glu[g[0]] = &sw;
            f.absorbed.insert(&sw);
            s = gs;
          }
        }
      }
      if (mvg->validate(s).ok()) {
        f.groups[g[0]] = g;
        for (size_t m = 1; m < g.size(); ++m) f.absorbed.insert(g[m]);
      } else if (f.glu.count(g[0])) {
        f.absorbed.erase(f.glu[g[0]]);
        f.glu.erase(g[0]);
      }
    }
    i += g.size();
  }
  return Status();
}

}  // namespace loom::exec
