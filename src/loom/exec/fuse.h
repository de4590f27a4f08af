// The fusion pass of the HRX backends: a Program-to-Program rewrite from the model's plain step
// to the one a device runs, in the same op vocabulary (model/program.h), so that the result
// still runs on the reference backend, prints with `loom run --dump-program`, and diffs in tests.
#pragma once

#include "loom/base/status.h"
#include "loom/exec/lowering_options.h"
#include "loom/exec/weight_plan.h"
#include "loom/model/model.h"
#include "loom/model/program.h"

namespace loom::exec {

// Rewrites `p` (the model's Program for one step shape):
//  1. every matmul reads its input in the format its kernel reads (WeightPlan::matmul): a
//     kQuantize launch per (value, format) before its first reader, reused until the value is
//     written again;
// and with options.fuse:
//  2. an rms_norm whose only reader is one quantize to Q8_0/Q8_1/Q8_K -> kRmsNormQ8 writing
//     those blocks (its f32 output is never written); an add just before a norm that reads its
//     sum folds in (kRmsNormQ8 with in1, or kAddRmsNorm);
//  3. a decode-sized attention whose only reader is one Q8 quantize, on rows of at most 2048
//     values (short rows, where the saved launch pays) -> the attention writes the blocks too;
//  4. 2..3 consecutive matmuls of one input through matvec_gpu with one weight type and row
//     length (q|k|v, gate|up) -> one kMatMul; a gate|up pair whose only reader is the swiglu
//     right after it -> glu (the swiglu goes).
// Every fused op computes what its parts compute, bit for bit on the reference backend (the
// GPU's matvec_gpu may sum in another order: its op tests check that).
Result<llm::Program> fuse_program(const llm::Program& p, const llm::Model& model, const WeightPlan& plan,
                                  const FuseOptions& options);

}  // namespace loom::exec
