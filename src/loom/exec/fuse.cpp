// The fusion pass (see fuse.h).
#include "loom/exec/fuse.h"

#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "loom/kernels/elementwise_util.h"
#include "loom/ref/ops_ref.h"

namespace loom::exec {
namespace {

using llm::GgmlType;
using llm::Launch;
using llm::OpCode;
using llm::Program;

bool is_q8(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::Q8_1 || t == GgmlType::Q8_K; }

// The launch list being rewritten: launches are marked dead rather than erased, so indices hold.
struct Work {
  Program& p;
  std::vector<bool> dead;

  std::vector<size_t> readers(int32_t v) const {
    std::vector<size_t> r;
    for (size_t i = 0; i < p.launches.size(); ++i) {
      if (dead[i]) continue;
      for (int32_t in : p.launches[i].inputs())
        if (in == v) {
          r.push_back(i);
          break;
        }
    }
    return r;
  }
  // The only live reader of v, if it is a quantize to a Q8 format; its index, else -1.
  int64_t only_q8_reader(int32_t v) const {
    if (v == p.logits) return -1;
    const std::vector<size_t> r = readers(v);
    if (r.size() != 1) return -1;
    const Launch& q = p.launches[r[0]];
    return q.op == OpCode::kQuantize && is_q8(type(q.out)) ? static_cast<int64_t>(r[0]) : -1;
  }
  // The live launch before i, or -1.
  int64_t previous(size_t i) const {
    for (size_t j = i; j-- > 0;)
      if (!dead[j]) return static_cast<int64_t>(j);
    return -1;
  }
  int64_t next(size_t i) const {
    for (size_t j = i + 1; j < p.launches.size(); ++j)
      if (!dead[j]) return static_cast<int64_t>(j);
    return -1;
  }
  const llm::ValueDesc& value(int32_t v) const { return p.values[static_cast<size_t>(v)]; }
  GgmlType type(int32_t v) const { return value(v).type; }
};

// 1. A quantize launch before the first matmul that reads a value in a format other than f32.
Status place_quantizes(Program& p, const WeightPlan& plan) {
  std::vector<Launch> out;
  out.reserve(p.launches.size() * 2);
  std::map<std::pair<int32_t, GgmlType>, int32_t> copies;  // (value, format) -> its quantized copy
  for (Launch l : p.launches) {
    for (int32_t v : l.outputs())
      for (auto it = copies.begin(); it != copies.end();) it = it->first.first == v ? copies.erase(it) : std::next(it);
    if (l.op == OpCode::kMatMul || l.op == OpCode::kMatMulId) {
      const int64_t rows = p.values[static_cast<size_t>(l.in0)].rows, cols = p.values[static_cast<size_t>(l.in0)].cols;
      MatmulKernel k;
      if (l.op == OpCode::kMatMul) {
        LOOM_ASSIGN_OR_RETURN(k, plan.matmul(l.weight, rows));
      } else {
        LOOM_ASSIGN_OR_RETURN(k, plan.matmul_id(l.weight, rows));
      }
      if (k.xtype != GgmlType::F32) {
        const auto key = std::make_pair(l.in0, k.xtype);
        auto it = copies.find(key);
        if (it == copies.end()) {
          const std::string name = fmt::format("{}.{}", p.values[static_cast<size_t>(l.in0)].name,
                                               k.xtype == GgmlType::F16 ? "f16" : llm::ggml_type_name(k.xtype));
          p.values.push_back(llm::ValueDesc{rows, cols, name, -1, k.xtype});
          Launch q;
          q.op = OpCode::kQuantize;
          q.in0 = l.in0;
          q.out = static_cast<int32_t>(p.values.size() - 1);
          out.push_back(q);
          it = copies.emplace(key, q.out).first;
        }
        l.in0 = it->second;
      }
    }
    out.push_back(l);
  }
  p.launches = std::move(out);
  return Status();
}

// 2. rms_norm -> rms_norm_q8 (+ the add before it), or add + rms_norm -> add_rms_norm.
void fuse_norms(Work& w) {
  const kernels::OpSpec* nq = kernels::find_op("rms_norm_q8");
  for (size_t i = 0; i < w.p.launches.size(); ++i) {
    if (w.dead[i]) continue;
    Launch& l = w.p.launches[i];
    if (l.op != OpCode::kRmsNorm || l.out == w.p.logits) continue;
    const llm::ValueDesc d = w.value(l.out);
    const int32_t norm_in = l.in0;
    const int64_t qi = l.group == d.cols && d.cols % 32 == 0 ? w.only_q8_reader(l.out) : -1;
    bool to_q8 = false;
    if (qi >= 0 && nq) {
      kernels::Shape s;
      s.dims = {{"n_rows", d.rows}, {"n", d.cols}, {"has_weight", 0},
                {"dtype", static_cast<int64_t>(w.type(w.p.launches[static_cast<size_t>(qi)].out))}, {"add", 0}};
      kernels::elt::set_f32_dim(s, "eps_f32", l.eps > 0.0f ? l.eps : 1e-6f);
      to_q8 = nq->validate(s).ok();
    }
    if (to_q8) {
      l.op = OpCode::kRmsNormQ8;
      l.out = w.p.launches[static_cast<size_t>(qi)].out;
      w.dead[static_cast<size_t>(qi)] = true;
    }
    const int64_t j = w.previous(i);
    if (j < 0) continue;
    const Launch& a = w.p.launches[static_cast<size_t>(j)];
    if (a.op != OpCode::kAdd || a.out != norm_in) continue;
    const llm::ValueDesc& ad = w.value(a.out);
    if (ad.rows != d.rows || ad.cols != d.cols) continue;
    if (!to_q8) l.op = OpCode::kAddRmsNorm;
    l.in0 = a.in0;
    l.in1 = a.in1;
    l.out1 = a.out;
    w.dead[static_cast<size_t>(j)] = true;
  }
}

// 3. A decode attention that also writes its reader's Q8 blocks.
void fuse_attention_quant(Work& w, const FuseOptions& o) {
  // The quantizing combine does per-row work that the plain one does not, and saves one
  // quantize launch (about 1 us with dependent launch): a gain where rows are short and
  // launches dominate (SmolLM2's 576-value rows), a wash on 4096-value rows.
  constexpr int64_t kMaxRow = 2048;
  if (w.p.n_tokens > o.decode_attention_max || !kernels::find_op("attention_decode")) return;
  for (size_t i = 0; i < w.p.launches.size(); ++i) {
    Launch& l = w.p.launches[i];
    if (w.dead[i] || l.op != OpCode::kAttention) continue;
    const int64_t qi = w.only_q8_reader(l.out);
    if (qi < 0) continue;
    const int32_t qv = w.p.launches[static_cast<size_t>(qi)].out;
    const GgmlType xt = w.type(qv);
    // Whole blocks per token row (Q8_K: 256 values; on GPUs 256 / head_dim heads per CTA).
    const int64_t row = static_cast<int64_t>(l.attn.n_head) * l.attn.head_dim_v;
    const int64_t blk = xt == GgmlType::Q8_K ? 256 : 32;
    if (row > kMaxRow || row % blk || l.attn.head_dim_k != l.attn.head_dim_v) continue;
    if (xt == GgmlType::Q8_K && (256 % l.attn.head_dim_v || l.attn.n_head % (256 / l.attn.head_dim_v))) continue;
    l.out1 = qv;
    w.dead[static_cast<size_t>(qi)] = true;
  }
}

// 5. Expert gate and up mat-vecs of one input and one routing, with the swiglu after them ->
// one matvec_id launch (steps below WeightPlan::kMatmulIdGroupedTokens: decode).
void fuse_expert_glu(Work& w, const llm::Model& model) {
  if (w.p.n_tokens >= WeightPlan::kMatmulIdGroupedTokens) return;
  for (size_t i = 0; i < w.p.launches.size(); ++i) {
    if (w.dead[i] || w.p.launches[i].op != OpCode::kMatMulId || w.p.launches[i].glu) continue;
    const int64_t j = w.next(i);
    if (j < 0) continue;
    const int64_t k = w.next(static_cast<size_t>(j));
    if (k < 0) continue;
    Launch& gate = w.p.launches[i];
    const Launch& up = w.p.launches[static_cast<size_t>(j)];
    const Launch& act = w.p.launches[static_cast<size_t>(k)];
    if (up.op != OpCode::kMatMulId || up.glu || up.in0 != gate.in0 || up.in1 != gate.in1) continue;
    const llm::Weight& wg = model.weight(gate.weight);
    const llm::Weight& wu = model.weight(up.weight);
    if (wg.view.type != wu.view.type || wg.view.n_in != wu.view.n_in || wg.expert_rows() != wu.expert_rows() ||
        wg.n_expert != wu.n_expert || w.value(gate.in0).cols != wg.view.n_in)
      continue;
    if (act.op != OpCode::kSwiGlu || act.in0 != gate.out || act.in1 != up.out || gate.out == up.out) continue;
    if (w.readers(gate.out).size() != 1 || w.readers(up.out).size() != 1) continue;
    if (gate.out == w.p.logits || up.out == w.p.logits) continue;
    gate.weight1 = up.weight;
    gate.glu = true;
    gate.out = act.out;
    w.dead[static_cast<size_t>(j)] = true;
    w.dead[static_cast<size_t>(k)] = true;
  }
}

// 4. Consecutive matvec_gpu matmuls of one input -> one launch (+ the swiglu of a gate|up pair).
Status group_matmuls(Work& w, const llm::Model& model, const WeightPlan& plan) {
  const kernels::OpSpec* mvg = kernels::find_op("matvec_gpu");
  if (!mvg) return Status();
  for (size_t i = 0; i < w.p.launches.size(); ++i) {
    if (w.dead[i] || w.p.launches[i].op != OpCode::kMatMul) continue;
    const Launch first = w.p.launches[i];
    const int64_t nt = w.value(first.in0).rows;
    LOOM_ASSIGN_OR_RETURN(MatmulKernel k, plan.matmul(first.weight, nt));
    if (!k.fast_matvec) continue;
    const llm::ref::WeightView& w0 = model.weight(first.weight).view;
    std::vector<size_t> g = {i};
    for (int64_t n = w.next(i); n >= 0 && g.size() < 3; n = w.next(static_cast<size_t>(n))) {
      const Launch& m = w.p.launches[static_cast<size_t>(n)];
      if (m.op != OpCode::kMatMul || m.in0 != first.in0 || m.weight1 >= 0) break;
      const llm::ref::WeightView& wm = model.weight(m.weight).view;
      if (wm.type != w0.type || wm.n_in != w0.n_in || plan.planar(m.weight) != plan.planar(first.weight)) break;
      LOOM_ASSIGN_OR_RETURN(MatmulKernel km, plan.matmul(m.weight, nt));
      if (!km.fast_matvec) break;
      g.push_back(static_cast<size_t>(n));
    }
    if (g.size() < 2) continue;
    kernels::Shape s = k.shape;
    s.dims["n_w"] = static_cast<int64_t>(g.size());
    for (size_t m = 1; m < g.size(); ++m)
      s.dims[fmt::format("n_out{}", m)] = model.weight(w.p.launches[g[m]].weight).view.n_out;
    if (!mvg->validate(s).ok()) continue;
    Launch& l = w.p.launches[i];
    const Launch second = w.p.launches[g[1]];
    // gate|up: the swiglu right after the pair, the only reader of both outputs.
    int64_t sw = -1;
    if (g.size() == 2) {
      const int64_t n = w.next(g[1]);
      if (n >= 0) {
        const Launch& c = w.p.launches[static_cast<size_t>(n)];
        const int32_t go = first.out, uo = second.out;
        kernels::Shape gs = s;
        gs.dims["glu"] = 1;
        if (c.op == OpCode::kSwiGlu && c.in0 == go && c.in1 == uo && go != uo && w.readers(go).size() == 1 &&
            w.readers(uo).size() == 1 && go != w.p.logits && uo != w.p.logits && mvg->validate(gs).ok())
          sw = n;
      }
    }
    l.weight1 = second.weight;
    l.out1 = second.out;
    if (g.size() == 3) {
      l.weight2 = w.p.launches[g[2]].weight;
      l.out2 = w.p.launches[g[2]].out;
    }
    for (size_t m = 1; m < g.size(); ++m) w.dead[g[m]] = true;
    if (sw >= 0) {
      l.glu = true;
      l.out = w.p.launches[static_cast<size_t>(sw)].out;
      l.out1 = -1;
      w.dead[static_cast<size_t>(sw)] = true;
    }
  }
  return Status();
}

}  // namespace

Result<Program> fuse_program(const Program& plain, const llm::Model& model, const WeightPlan& plan,
                             const FuseOptions& options) {
  Program p = plain;
  LOOM_RETURN_IF_ERROR(place_quantizes(p, plan));
  if (options.fuse) {
    Work w{p, std::vector<bool>(p.launches.size(), false)};
    fuse_norms(w);
    fuse_attention_quant(w, options);
    LOOM_RETURN_IF_ERROR(group_matmuls(w, model, plan));
    fuse_expert_glu(w, model);
    std::vector<Launch> live;
    for (size_t i = 0; i < p.launches.size(); ++i)
      if (!w.dead[i]) live.push_back(p.launches[i]);
    p.launches = std::move(live);
  }
  llm::assign_slots(p);
  return p;
}

}  // namespace loom::exec
