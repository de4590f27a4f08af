// The registry of built-in ops: an explicit list (see op_list.h for how to add one).
#include "loom/kernels/op_list.h"

namespace loom::kernels {

const std::vector<const OpSpec*>& all_ops() {
  static const std::vector<const OpSpec*> ops = {
      // kernels-mat
      &quantize_act_op(),
      &matvec_op(),
      &matmul_op(),
      &get_rows_op(),
      &set_rows_op(),
      &argmax_op(),
      &matvec_id_op(),
      &moe_route_op(),
      &moe_sum_op(),
      // Element-wise, norm, rope, attention.
      &add_op(),
      &add_bias_op(),
      &mul_rows_op(),
      &scale_op(),
      &softcap_op(),
      &swiglu_op(),
      &geglu_op(),
      &gather_rows_op(),
      &rms_norm_op(),
      &add_rms_norm_op(),
      &softmax_op(),
      &rope_kv_op(),
      &rope_op(),
      &attention_decode_op(),
      &attention_prompt_op(),
      &rms_norm_q8_op(),
      &copy_op(),
      &layer_norm_op(),
      // GPU kernels at the memory and tensor-core limits.
      &matvec_gpu_op(),
      &matmul_mma_op(),
      &matmul_mmq_op(),
      &matmul_mmq_id_op(),
      &attention_mma_op(),
  };
  return ops;
}

const OpSpec* find_op(std::string_view name) {
  for (const OpSpec* op : all_ops())
    if (op->name() == name) return op;
  return nullptr;
}

}  // namespace loom::kernels
