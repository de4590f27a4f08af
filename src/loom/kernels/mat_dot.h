// Block dot products of the weight-streaming ops, as Loom IR: for each weight type, how one
// weight block meets one block of the activation format llm::ref uses for it
// (ref::vec_dot_type), mirroring the lane structure of llm::ref's dot products: integer
// products summed exactly in eight 32-bit lanes (lane l takes elements 4l..4l+3 of each
// 32-element group), one fused multiply-add per block and lane, the lanes reduced in the
// reference's fixed order. A kernel that walks a row's blocks in order with one DotState is
// therefore bit-identical to llm::ref::vec_dot; kernels that split a row (GPU warps) reorder the
// float sums only.
#pragma once

#include <vector>

#include "loom/gguf/ggml_types.h"
#include "loom/kernels/op_util.h"

namespace loom::kernels {

struct DotFormat {
  llm::GgmlType wtype;
  llm::GgmlType xtype;   // ref::vec_dot_type(wtype)
  int block_elems;       // elements per step (a block; 32 for F16/F32 rows)
  int w_bytes;           // weight bytes per step
  int x_bytes;           // activation bytes per step
};

// The 6-bit scales and mins of the 8 sub-blocks of a Q4_K/Q5_K block from its 12 packed scale
// bytes (q[i]: byte i as i32), as ggml packs them.
void k4_scales_mins(Emit& b, ir::Value* const q[12], ir::Value* sc[8], ir::Value* mn[8]);

// nullptr-like (block_elems == 0) for unsupported types.
DotFormat dot_format(llm::GgmlType wtype);
bool dot_supported(llm::GgmlType wtype);

// The activation block prepared once and shared by the rows that use it.
struct DotX {
  std::vector<ir::Value*> v;
};

// Accumulators of one row (carried through the block loop).
std::vector<ir::Value*> dot_init(Emit& b, const DotFormat& f);
// Loads and unpacks the activation step at byte offset xoff of x (u8 pointer).
DotX dot_prep_x(Emit& b, const DotFormat& f, ir::Value* x, ir::Value* xoff);

// The row-independent part of dot_prep_x, prepared once for all rows of a cpu work item: for
// Q4_0/Q5_0 weights (the formats where x_table_bytes > 0) each activation block's f32 scale and
// its -o x lane sums, in a buffer of x_table_bytes(f, nb) bytes (alloc_shared). Same values as
// dot_prep_x, so results keep their bits.
int64_t x_table_bytes(const DotFormat& f, int64_t nb);
void fill_x_table(Emit& b, const DotFormat& f, ir::Value* x, int64_t nb, ir::Value* table);
DotX dot_prep_x_table(Emit& b, const DotFormat& f, ir::Value* x, ir::Value* blk, int64_t nb, ir::Value* table);
// Q8_0/Q8_1 activation bytes (i32x8, four a lane) with -128 raised to -127. The quantizers
// write -127..127 only, so this changes nothing; on the cpp target it lets a dot4 of these bytes
// with other signed bytes (Q8_0 weights) use the sign trick (loom_dot4_s7: vpsignb + vpmaddubsw)
// instead of sign-extending both operands to 16 bits. One vpmaxsb. Other targets: y unchanged.
ir::Value* q8_bytes_no_min(Emit& b, ir::Value* y);
// Adds one weight step at byte offset woff of w to `acc`; returns the new accumulators.
// A 32-element block's quants (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) as i32x8 with lane c holding
// elements 4c..4c+3, as dot_step reads them: nibbles (with Q5's fifth bit), 0..31, no offset;
// Q8_0's signed bytes.
ir::Value* dot_quants(Emit& b, const DotFormat& f, ir::Value* w, ir::Value* woff);
// An f16 at a byte offset of a byte pointer as f32 (convert: exact; vcvtph2ps on the cpp target).
ir::Value* f16_at(Emit& b, ir::Value* base, ir::Value* off);

std::vector<ir::Value*> dot_step(Emit& b, const DotFormat& f, ir::Value* w, ir::Value* woff, const DotX& x,
                                 std::span<ir::Value* const> acc);
// The row's dot product (f32) from its accumulators.
ir::Value* dot_finish(Emit& b, const DotFormat& f, std::span<ir::Value* const> acc);

}  // namespace loom::kernels
