// matmul (n_tokens > 1) on the cpp target in register tiles of weight rows x tokens: each
// weight block is loaded and unpacked once per tile and met with the tile's tokens' activation
// blocks (quantized once per step by quantize_act).
#pragma once

#include <string_view>

#include "loom/kernels/op_spec.h"

namespace loom::kernels {

// The tiled cpp kernel of matmul for a validated shape and a schedule with rows_per_block,
// row_tile and tok_tile (> 1). One work item takes rows_per_block rows and every token, walks the
// tokens in tiles of tok_tile and its rows in tiles of row_tile, and keeps the row_tile x
// tok_tile accumulators in registers through the block loop. Every output has its own
// accumulators, stepped in block order exactly as the one-row-one-token kernel steps them, so
// the results are bit-identical to it and to llm::ref::matmul. Arguments w, xq, y (matmul's).
Result<Generated> generate_matmul_cpu_tiles(const Shape& s, const Schedule& sch, std::string_view op_name);

}  // namespace loom::kernels
