// The GPU lowering's decisions for one step Program, apart from the lowering itself: which op
// computes each matmul on a target, and which launches fuse (issue 7). Used by HrxBackend.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "loom/base/status.h"
#include "loom/exec/lowering_options.h"
#include "loom/gguf/ggml_types.h"
#include "loom/ir/ir.h"
#include "loom/kernels/op_spec.h"
#include "loom/model/model.h"
#include "loom/model/program.h"

namespace loom::exec {

// Which op computes a matmul launch of nt tokens on this target, with the activation format it
// reads (issues 7, 6). GPUs: 1..16 tokens through the wide-load mat-vec, which reads each
// weight once for all of them and gives every token the bits it gets alone (a batched decode
// step does not change a request's tokens); longer prompts on the tensor cores (activations
// converted to f16 once by quantize_act); shapes or weight types these ops refuse keep the
// generic matvec/matmul. LoweringOptions::gpu_fast_ops (LOOM_GPU_FAST_OPS=0) turns the GPU paths off.
struct MatmulChoice {
  const kernels::OpSpec* op = nullptr;
  llm::GgmlType xtype = llm::GgmlType::F32;  // activations as the op reads them (F16: matmul_mma)
  kernels::Shape shape;
  bool fast_matvec = false;  // matvec_gpu (several weights may share one launch)
};
// Launch fusions of a step (issue 7), found before lowering so that each launch knows whether
// another call computes it:
//  - rms_norm whose output only feeds matmuls that read Q8_0/Q8_1/Q8_K activations -> rms_norm_q8,
//    writing those blocks straight away (the norm's f32 output is never written), with the
//    add just before it (out = a + b feeding the norm) folded in (the sum is still written);
//  - attention whose output only feeds matmuls that read Q8_0/Q8_1/Q8_K activations -> the
//    decode attention writes those blocks too (out_q; the lowering takes it only where it uses
//    attention_decode), so no quantize_act runs before the o projection; by default where
//    the attention's output row has at most 2048 values (small models, where the saved launch
//    pays), everywhere or nowhere as LoweringOptions::fuse_attn says (LOOM_FUSE_ATTN=1/0);
//  - 2..3 consecutive matmuls of one input through matvec_gpu with one weight type and n_in
//    (q|k|v, gate|up) -> one launch; a gate|up pair whose only reader is the swiglu after it
//    computes silu(gate) * up itself (the swiglu and the gate/up outputs go).
// Bit for bit as the unfused calls: rms_norm_q8 is bit-identical to rms_norm + quantize_act,
// and a matrix's rows in a multi-weight launch are the rows of its own launch with that
// launch's lanes per row (the default lanes per row counts all the launch's rows, so the
// GPU's float summation order may differ from the separate launch's; tests/ops checks both).
// LoweringOptions::fuse (LOOM_FUSE=0) turns them off (A/B), kOn (LOOM_FUSE=1) on off the GPU
// too (the cpu driver's kernels are bit-identical to the reference, so tests/exec checks the
// lowering there); LOOM_DUMP_VALUES turns them off (every value is written).
struct Fusions {
  std::map<const llm::Launch*, llm::GgmlType> norm_q8;             // rms_norm -> the activation format it writes
  std::map<const llm::Launch*, llm::GgmlType> attn_q;              // attention -> the activation format it also writes
  std::map<const llm::Launch*, const llm::Launch*> norm_add;       // rms_norm -> the add folded into it
  std::map<const llm::Launch*, std::vector<const llm::Launch*>> groups;  // first matmul -> the launch's matmuls
  std::map<const llm::Launch*, const llm::Launch*> glu;            // first matmul of a gate|up pair -> its swiglu
  std::set<const llm::Launch*> absorbed;                      // launches another call computes
};

// Stateless apart from what it is built with (the A/B switches come in LoweringOptions).
class FusionPlanner {
 public:
  // all_values: every Program value must be written (LOOM_DUMP_VALUES): no fusions.
  FusionPlanner(const llm::Model& model, ir::TargetKind target, bool all_values, const LoweringOptions& options)
      : model_(model), target_(target), all_values_(all_values), opt_(options) {}

  Result<MatmulChoice> choose_matmul(const llm::Launch& l, int64_t nt) const;
  Result<Fusions> plan(const llm::Program& p, int64_t nt) const;

 private:
  using Readers = std::map<int32_t, std::vector<const llm::Launch*>>;
  bool fusions_enabled() const;
  Status fuse_norm_quant(const llm::Program& p, int64_t nt, Readers& readers, Fusions& f) const;
  Status quantize_attention(const llm::Program& p, int64_t nt, Readers& readers, Fusions& f) const;
  Status group_matmuls(const llm::Program& p, int64_t nt, Readers& readers, Fusions& f) const;

  const llm::Model& model_;
  ir::TargetKind target_;
  bool all_values_;
  LoweringOptions opt_;
};

}  // namespace loom::exec
