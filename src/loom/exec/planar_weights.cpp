// The engine's choice of planar weights (see planar_weights.h).
#include "loom/exec/planar_weights.h"

#include "loom/gguf/planar.h"
#include "loom/kernels/op_spec.h"
#include "loom/ref/ops_ref.h"

namespace loom::exec {
std::vector<bool> planar_weights(const llm::Model& model, ir::TargetKind target) {
  std::vector<bool> out(model.weights().size(), false);
  if (target != ir::TargetKind::kPtx) return out;
  const kernels::OpSpec* mvg = kernels::find_op("matvec_gpu");
  const kernels::OpSpec* mma = kernels::find_op("matmul_mma");
  if (!mvg || !mma) return out;
  auto consider = [&](int32_t id) {
    if (id < 0) return;
    const llm::ref::WeightView& v = model.weight(id).view;
    llm::PlanarGeometry g;
    if (!llm::planar_geometry(v.type, &g)) return;  // (Q4_1 has one; matmul_mma refuses Q4_1 below)
    if (v.row_stride != llm::ref::quantized_row_bytes(v.type, v.n_in)) return;
    kernels::Shape s{{{"wtype", static_cast<int64_t>(v.type)}, {"n_in", v.n_in}, {"n_out", v.n_out}, {"n_tokens", 1},
             {"planar", 1}}};
    if (!mvg->validate(s).ok()) return;
    s.dims["n_tokens"] = 512;
    s.dims["xtype"] = 1;
    if (!mma->validate(s).ok()) return;
    out[static_cast<size_t>(id)] = true;
  };
  for (const llm::LayerWeights& l : model.layers())
    for (int32_t id : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down}) consider(id);
  if (model.output() != model.tok_embd()) consider(model.output());
  return out;
}

}  // namespace loom::exec
