// matmul (n_tokens > 1) on the cpp target in register tiles of weight rows x tokens: each
// weight block is loaded and unpacked once per tile and met with the tile's tokens' activation
// blocks (quantized once per step by quantize_act).
#pragma once

#include <string_view>

#include "loom/gguf/ggml_types.h"
#include "loom/kernels/op_spec.h"
#include "loom/kernels/op_util.h"

namespace loom::kernels {

// The tiled cpp kernel of matmul for a validated shape and a schedule with rows_per_block,
// row_tile and tok_tile (> 1). One work item takes rows_per_block rows and every token, walks the
// tokens in tiles of tok_tile and its rows in tiles of row_tile, and keeps the row_tile x
// tok_tile accumulators in registers through the block loop. Every output has its own
// accumulators, stepped in block order exactly as the one-row-one-token kernel steps them, so
// the results are bit-identical to it and to llm::ref::matmul. Arguments w, xq, y (matmul's).
Result<Generated> generate_matmul_cpu_tiles(const Shape& s, const Schedule& sch, std::string_view op_name);

// The token-lane cpp kernel of matmul (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) for n_tokens >= 8: a vector
// lane per token instead of per group of four elements. A work item takes rows_per_block rows
// times tok_tile (8 or 16) tokens; it first transposes its tokens' activation blocks into a
// thread-local scratch (chunk c of eight tokens as one vector), then per weight row and block
// broadcasts each 4-element chunk of the row to all lanes and multiplies it with the tokens'
// chunks. tok_lanes 1 keeps the reference's arithmetic: eight lane accumulators per row and
// token (one per chunk), each stepped with the block's fma as the reference steps its lane,
// reduced in hsum_float_8's order, so the results are bit-identical to llm::ref::matmul.
// tok_lanes 2 sums a block's eight chunks in integers first (in 16 bits on AVX2: a block's nibble
// products cannot overflow) and adds d_w * d_x times that sum to one accumulator: a convert and an
// fma per row, block and eight tokens instead of eight, but the whole-block conversion rounds
// differently from the reference (not bit-identical; within matmul's tolerance).
Result<Generated> generate_matmul_cpu_tokens(const Shape& s, const Schedule& sch, std::string_view op_name);

// The AMX cpp kernel of matmul (tok_lanes 3; matmul_amx.cpp): 16 weight rows per work item,
// their quants unpacked once into AMX's B-operand layout, then per 16 tokens and 32 values one
// signed-byte tile product (tokens' activation bytes read in place) and an f32 epilogue with the
// row and token scales. Integer dots exact, float sums per group: not bit-identical to the
// reference (within matmul's tolerance). rows_per_block, row_tile and tok_tile are not used.
Result<Generated> generate_matmul_cpu_amx(const Shape& s, const Schedule& sch, std::string_view op_name);
// Whether the AMX kernel takes the shape here: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K weights, n_tokens
// >= 16, n_out a multiple of 16, and codegen::cpu_amx_usable().
bool matmul_amx_takes(const Shape& s);

// A Q4_K/Q5_K weight block as the cpp matmul kernels read it (the tiles and the AMX kernel):
// d, dmin (f32), the 6-bit scales and mins per sub-block (i32), the mins also as f32x8 (Q4_K's in
// the tiles' lane order 0,2,4,6,1,3,5,7), and each sub-block's 32 quants as i32x8.
struct KRow {
  ir::Value* dw;
  ir::Value* dm;
  ir::Value* sc[8];
  ir::Value* mi[8];
  ir::Value* mn;
  ir::Value* v[8];
};
KRow k_row(Emit& b, bool q5, ir::Value* w, ir::Value* woff);

// The token-lane kernel's scratch (a kernel's shared memory, at most the IR's 48 KiB): bytes per
// 32-element block and group of 8 tokens (exact: tok_lanes 1). Rows with more blocks than it holds
// go in K-chunks, their accumulators kept in a second scratch between chunks.
constexpr int64_t kTokenLaneScratch = 48 * 1024;
int64_t token_lane_scratch_per_block(llm::GgmlType wt, bool exact);

// Whether the cpu device's prompt matmuls of format wt default to summed token lanes
// (tok_lanes 2) rather than the reference's exact arithmetic ($LOOM_CPU_MATMUL): auto sums the
// formats whose prompts llama.cpp's CPU backend computes with repacked weights on x86 (Q4_0
// here), whose results it therefore does not keep bit-identical to its plain path either; on
// SmolLM2-135M-Instruct requantized to Q4_0 the KL divergence of summed lanes from cpu-ref is
// 0.0039 and llama.cpp's repacked path's from its plain one 0.0038 (docs/engine.md). exact keeps
// every format's bits, summed sums every format the token lanes take.
bool cpu_matmul_summed(llm::GgmlType wt);
// Whether the cpu device's prompt matmuls use AMX tiles where matmul_amx_takes the shape
// ($LOOM_CPU_MATMUL auto; exact and summed keep the token-lane and tile kernels).
bool cpu_matmul_amx();

}  // namespace loom::kernels
