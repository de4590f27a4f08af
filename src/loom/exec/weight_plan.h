// The per-weight plan of an HRX device: the layout each matrix lives in on the device and the
// op that multiplies by it for a step of n tokens. Decided once, when the backend binds the
// model, and read by both the fusion pass and the lowering, so that layout and kernel cannot
// disagree.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/gguf/ggml_types.h"
#include "loom/ir/ir.h"
#include "loom/kernels/op_spec.h"
#include "loom/model/model.h"

namespace loom::exec {

// The op computing weight · x for one step size, with the activation format it reads.
struct MatmulKernel {
  const kernels::OpSpec* op = nullptr;  // matvec, matmul, matvec_gpu, matmul_mma or matmul_mmq
  llm::GgmlType xtype = llm::GgmlType::F32;
  kernels::Shape shape;                 // wtype, n_in, n_out, n_tokens (+ xtype, planar)
  bool fast_matvec = false;             // matvec_gpu: up to 3 weights of one input per launch
  // The argument the activations bind to: matmul_mma reads f16 rows as "x", the others "xq".
  std::string_view x_arg() const { return op && op->name() == "matmul_mma" ? "x" : "xq"; }
};

// Which tensor-core matmul prompts use: kAuto picks per weight format where it measured faster
// on the H200 (matmul_mmq for Q4_0 / Q8_0 / Q4_K, matmul_mma otherwise; on a Hopper GPU matmul_mma
// on its warpgroup MMA where that measured faster), kInt8 takes matmul_mmq for every format it
// supports, kF16 always matmul_mma on mma.sync, kWgmma always matmul_mma on wgmma where the GPU has
// it (LOOM_PREFILL_MATMUL=auto|int8|f16|wgmma).
enum class PrefillMatmul { kAuto, kInt8, kF16, kWgmma };
PrefillMatmul prefill_matmul_option();

class WeightPlan {
 public:
  WeightPlan() = default;
  // PTX targets: 1..16-token steps through matvec_gpu (reads each weight once for all tokens
  // and gives every token the bits it gets alone, so a batched decode step does not change a
  // request's tokens); longer steps on the tensor cores (matmul_mmq with Q8_1 activations for
  // Q4_0 / Q8_0 / Q4_K weights under kAuto, every format it takes under kInt8, else matmul_mma with f16
  // activations); weights
  // whose type or shape those refuse keep the generic matvec/matmul. Projection weights (q, k,
  // v, o, gate, up, down, an untied output) that only those two ops read are kept in the planar
  // layout (coalesced loads). Other targets: the generic ops, GGUF rows.
  // `wgmma`: the GPU has Hopper's warpgroup MMA (sm_90), which matmul_mma can use (shape dim wgmma).
  static WeightPlan make(const llm::Model& model, ir::TargetKind target, PrefillMatmul prompts = PrefillMatmul::kAuto,
                         bool wgmma = false);

  bool planar(int32_t weight) const { return entry(weight).planar; }
  ir::TargetKind target() const { return target_; }
  const std::vector<bool>& planar_flags() const { return planar_; }
  Result<MatmulKernel> matmul(int32_t weight, int64_t n_tokens) const;
  // The same choice for a matrix in GGUF rows that no model binds (ggml-hrx's MUL_MAT weights):
  // what matmul() gives a weight of this format and shape that is not planar.
  static Result<MatmulKernel> for_rows(llm::GgmlType type, int64_t n_in, int64_t n_out, int64_t n_tokens,
                                       ir::TargetKind target, PrefillMatmul prompts = PrefillMatmul::kAuto,
                                       bool wgmma = false);
  // Stacked expert matrices (Weight::n_expert > 0), in GGUF rows on every target: steps of more
  // than kMatmulIdMmqTokens tokens on PTX targets through matmul_mmq_id (Q8_1 activations) for
  // the formats it takes (not under PrefillMatmul::kF16), else matvec_id with activations in the
  // weight's format (the shape is the lowering's: it depends on the ids).
  Result<MatmulKernel> matmul_id(int32_t weight, int64_t n_tokens) const;
  // Steps of at least this many tokens run matvec_id grouped (each chosen expert read once);
  // smaller ones per (token, slot), where gate and up may share one launch with their SwiGLU.
  static constexpr int64_t kMatmulIdGroupedTokens = 8;
  // As matvec_gpu's limit: a batched decode step of up to 16 tokens gives each token the bits it
  // gets alone.
  static constexpr int64_t kMatmulIdMmqTokens = 16;

 private:
  struct Entry {
    bool fast_matvec = false, mma = false, mmq = false, planar = false, wgmma = false;
    // wgmma chosen by measurement (kAuto): that kernel reads the planar layout, so a weight left in
    // GGUF rows goes back to the integer kernel (mmq_rows) once the layout is known.
    bool wgmma_if_planar = false, mmq_rows = false;
    void settle_layout() {
      if (!wgmma_if_planar || planar) return;
      wgmma = false;
      mmq = mmq_rows;
    }
  };
  const Entry& entry(int32_t w) const { return entries_[static_cast<size_t>(w)]; }
  // Which kernels a matrix of this format and shape can take on `target` (the layout aside).
  static Entry rules(llm::GgmlType type, int64_t n_in, int64_t n_out, ir::TargetKind target, PrefillMatmul prompts,
                     bool wgmma);
  // The kernel for a step of n_tokens from those (`name` for errors).
  static Result<MatmulKernel> pick(const Entry& e, llm::GgmlType type, int64_t n_in, int64_t n_out, int64_t n_tokens,
                                   std::string_view name);

  const llm::Model* model_ = nullptr;
  ir::TargetKind target_ = ir::TargetKind::kCpp;
  PrefillMatmul prompts_ = PrefillMatmul::kAuto;
  std::vector<Entry> entries_;
  std::vector<bool> planar_;
};

}  // namespace loom::exec
