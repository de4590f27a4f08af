// The accessors of every built-in op (one per op file), listed in op_registry.cpp.
//
// To add an op: define `const OpSpec& <name>_op();` in src/loom/kernels/<name>.cpp (a function
// returning a reference to a function-local static instance), declare it below in the group of
// its owner, and add `&<name>_op(),` to the same owner's group in all_ops() in op_registry.cpp.
// Keep one line per op; the groups keep concurrent additions by different helpers apart.
#pragma once

#include "loom/kernels/op_spec.h"

namespace loom::kernels {

// Weight-streaming ops (kernels-mat).
const OpSpec& quantize_act_op();
const OpSpec& matvec_op();
const OpSpec& matmul_op();
const OpSpec& get_rows_op();
const OpSpec& set_rows_op();
const OpSpec& argmax_op();
const OpSpec& matvec_id_op();
const OpSpec& moe_route_op();
const OpSpec& moe_sum_op();

// Element-wise, norm, rope, attention ops.
const OpSpec& add_op();
const OpSpec& add_bias_op();
const OpSpec& mul_rows_op();
const OpSpec& scale_op();
const OpSpec& softcap_op();
const OpSpec& swiglu_op();
const OpSpec& geglu_op();
const OpSpec& gather_rows_op();
const OpSpec& rms_norm_op();
const OpSpec& add_rms_norm_op();
const OpSpec& softmax_op();
const OpSpec& rope_kv_op();
const OpSpec& rope_op();
const OpSpec& attention_decode_op();
const OpSpec& attention_prompt_op();
const OpSpec& rms_norm_q8_op();
const OpSpec& copy_op();
const OpSpec& layer_norm_op();

// GPU kernels at the memory and tensor-core limits.
const OpSpec& matvec_gpu_op();
const OpSpec& matmul_mma_op();
const OpSpec& matmul_mmq_op();
const OpSpec& matmul_mmq_id_op();
const OpSpec& attention_mma_op();

}  // namespace loom::kernels
