// matvec_gpu's weight and activation access primitives: weight formats and lane unit plans, the
// Window over a unit's bytes, activations staged in shared memory, and one block's dot product.
// Internal to the kernels part: only matvec_gpu.cpp and matvec_gpu_parts.cpp include it.
#pragma once

#include <cassert>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "loom/gguf/planar.h"
#include "loom/kernels/op_util.h"

namespace loom::kernels::matvec_gpu_detail {

using ir::Scalar;
using ir::Type;
using ir::Value;
using llm::GgmlType;

inline const Type kI32 = Type::scalar(Scalar::kI32);
inline const Type kU32 = Type::scalar(Scalar::kU32);
inline const Type kF32 = Type::scalar(Scalar::kF32);
inline const Type kI64 = Type::scalar(Scalar::kI64);

// Weight types this op streams, with the block geometry it needs.
struct WFormat {
  GgmlType wtype;
  GgmlType xtype;
  int block_elems;
  int block_bytes;
};

// Sets *f for a weight type this op streams; false for any other type.
bool w_format(GgmlType t, WFormat* f);

// A lane's unit of work: `blocks` consecutive weight blocks, read with loads of `align` bytes
// (the unit's start, and every row's, is a multiple of it).
struct UnitPlan {
  int blocks = 1;
  int align = 2;
};

// Shape dim "planar" = 1: the weights are in the planar layout (gguf/planar.h), a lane's unit is
// one block and the lanes of a row sit on consecutive blocks (a warp's load instruction reads
// 512 contiguous bytes). Absent: GGUF rows (the keys of shapes without it do not change).
bool planar_of(const Shape& s);

// The unit plan of a row of nb blocks: one block read with 16-byte loads when planar.
UnitPlan plan_of(const WFormat& f, int64_t nb, bool planar);

// The bytes of one unit as the lane sees them: 16/8/4-byte chunks (or u16 for 2-byte layouts),
// loaded the first time generated code asks for a byte inside them, so loads appear in the order
// the computation needs them and are never repeated; or all at once (load_all), for a loop that
// carries the next unit's bytes while it computes on this one (adopt).
class Window {
 public:
  Window(Emit& b, Value* w, Value* base, int align) : b_(b), w_(w), base_(base), align_(align) {}
  // A block of the planar layout (gguf/planar.h): gblk = row * nb + block (i64), piece_stride
  // (i64) = rows * nb * 16 bytes of the matrix. Offsets stay the GGUF block's byte offsets.
  Window(Emit& b, Value* w, Value* gblk, Value* piece_stride, const llm::PlanarGeometry& pg)
      : b_(b), w_(w), base_(gblk), align_(16), planar_(true), pg_(pg), pstride_(piece_stride) {}

  // The 32-bit little-endian word at byte offset o (o even) of the unit.
  Value* word(int o) {
    if (planar_) return planar_word(o);
    if (align_ >= 4) {
      if (o % 4 == 0) return raw_word(o);
      return b_.bit_or(b_.shrc(raw_word(o - 2), 16), b_.shlc(raw_word(o + 2), 16));
    }
    return b_.bit_or(half(o), b_.shlc(half(o + 2), 16));
  }
  // The u16 at byte offset o (o even), zero-extended to u32.
  Value* half(int o) {
    if (planar_) {
      const int h = o - pg_.header_offset;
      assert(h >= 0 && h < pg_.header_bytes);  // block_dot reads only header halves
      if (pg_.header_bytes == 2) return header_chunk(0)[0];
      Value* wd = header_chunk(0)[static_cast<size_t>(h / 4)];
      return h % 4 ? b_.shrc(wd, 16) : b_.andc(wd, 0xFFFF);
    }
    if (align_ == 2) return chunk(o / 2)[0];
    Value* wd = raw_word(o & ~3);
    return o % 4 ? b_.shrc(wd, 16) : b_.andc(wd, 0xFFFF);
  }
  // The f16 at byte offset o as f32.
  Value* f16(int o) {
    Value* h = b_.convert(half(o), Type::scalar(Scalar::kU16));
    return b_.convert(b_.bitcast(h, Type::scalar(Scalar::kF16)), kF32);
  }

  // Loads every chunk of the first `bytes` bytes now (planar: every piece, then the header);
  // returns them (one value per chunk).
  std::vector<Value*> load_all(int bytes) {
    std::vector<Value*> out;
    if (planar_) {
      for (int p = 0; p < pg_.pieces; ++p) out.push_back(load_piece(p));
      out.push_back(load_header());
      return out;
    }
    for (int c = 0; c < bytes / align_; ++c) out.push_back(load_chunk(c));
    return out;
  }
  // Takes chunks that load_all returned (possibly carried through a loop) as this unit's bytes.
  void adopt(std::span<Value* const> chunks) {
    for (size_t c = 0; c < chunks.size(); ++c) {
      if (planar_ && static_cast<int>(c) == pg_.pieces) split(kHeader, chunks[c], header_words());
      else split(static_cast<int>(c), chunks[c], planar_ ? 4 : 0);
    }
  }
  // Chunks load_all gives for a unit of `bytes` bytes.
  int chunk_count(int bytes) const { return planar_ ? pg_.pieces + 1 : bytes / align_; }

 private:
  static constexpr int kHeader = 1 << 20;  // planar: chunks_ key of the header
  int header_words() const { return pg_.header_bytes == 2 ? 1 : pg_.header_bytes / 4; }
  Value* load_chunk(int c) {
    if (align_ == 2)
      return b_.convert(b_.load_at(w_, b_.add(base_, b_.i64(int64_t{c} * 2)), Type::scalar(Scalar::kU16), 2), kU32);
    const int n = align_ / 4;
    return b_.load_at(w_, b_.add(base_, b_.i64(int64_t{c} * align_)), n == 1 ? kU32 : Type::vector(Scalar::kU32, n),
                      align_);
  }
  // Planar piece p of the block: 16 bytes at p * piece_stride + gblk * 16.
  Value* load_piece(int p) {
    Value* off = b_.mul(base_, b_.i64(16));
    if (p) off = b_.add(off, b_.mul(pstride_, b_.i64(p)));
    return b_.load_at(w_, off, Type::vector(Scalar::kU32, 4), 16);
  }
  // The block's header: after all pieces, header_bytes per block (loaded as one u16, u32 or v4).
  Value* load_header() {
    const int hb = pg_.header_bytes;
    Value* off = b_.add(b_.mul(pstride_, b_.i64(pg_.pieces)), b_.mul(base_, b_.i64(hb)));
    if (hb == 2) return b_.convert(b_.load_at(w_, off, Type::scalar(Scalar::kU16), 2), kU32);
    return b_.load_at(w_, off, hb == 4 ? kU32 : Type::vector(Scalar::kU32, hb / 4), hb);
  }
  const std::vector<Value*>& header_chunk(int) {
    auto it = chunks_.find(kHeader);
    return it != chunks_.end() ? it->second : split(kHeader, load_header(), header_words());
  }
  Value* planar_word(int o) {
    const int h = o - pg_.header_offset;
    if (h >= 0 && h < pg_.header_bytes) {
      assert(h % 4 == 0 && pg_.header_bytes >= 4);
      return header_chunk(0)[static_cast<size_t>(h / 4)];
    }
    const int bo = o - pg_.body_offset();
    assert(bo >= 0 && bo % 4 == 0 && bo < 16 * pg_.pieces);
    auto it = chunks_.find(bo / 16);
    const std::vector<Value*>& words = it != chunks_.end() ? it->second : split(bo / 16, load_piece(bo / 16), 4);
    return words[static_cast<size_t>((bo % 16) / 4)];
  }
  // n: words in v (0: from align_).
  const std::vector<Value*>& split(int c, Value* v, int n = 0) {
    std::vector<Value*> words;
    if (n == 0) n = align_ == 2 ? 1 : align_ / 4;
    for (int i = 0; i < n; ++i) words.push_back(n == 1 ? v : b_.extract(v, i));
    return chunks_.insert_or_assign(c, std::move(words)).first->second;
  }
  const std::vector<Value*>& chunk(int c) {
    auto it = chunks_.find(c);
    return it != chunks_.end() ? it->second : split(c, load_chunk(c));
  }
  Value* raw_word(int o) { return chunk(o / align_)[static_cast<size_t>((o % align_) / 4)]; }

  Emit& b_;
  Value* w_;
  Value* base_;  // planar: the block's index in the matrix (i64)
  int align_;
  bool planar_ = false;
  llm::PlanarGeometry pg_;
  Value* pstride_ = nullptr;
  std::map<int, std::vector<Value*>> chunks_;  // chunk index -> its 32-bit words (align 2: the u16)
};

// The activation rows of a group of tokens staged in shared memory: quants as i32 words (16-byte
// aligned per block), the block scale as f32, and per-block sums (Q8_0: sum of the quants; Q8_1:
// s as f32 bits; Q8_K: the 16 bsums). Token j's block xb is staged block j * nxb + xb.
// The lanes of a row read units `lanes_per_row` apart, so without padding their quants sit a
// multiple of 128 bytes apart and every lane hits the same shared-memory banks (an 8-way
// conflict at 8 lanes, which made 16-token launches 10x slower than one token): each unit's
// quants are followed by 16 bytes, its scales and sums by one word.
// With planar weights the lanes of a row read consecutive blocks, and the staging is planar too
// (`planar` = the number of staged blocks): 16-byte chunk c of block xb at word (c * planar +
// xb) * 4, sum k at k * planar + xb, so a warp's chunk loads are 512 contiguous bytes (no bank
// conflicts, no padding: the 8B down row stays at 17.5 KiB per token).
struct StagedX {
  Value* q = nullptr;    // ptr<shared, i32>, words_per_block per block
  Value* d = nullptr;    // ptr<shared, f32>
  Value* s = nullptr;    // ptr<shared, i32> (Q8_0 sums, Q8_K bsums) or f32 bits (Q8_1 s)
  int words_per_block = 8;
  int sums_per_block = 1;
  int unit_shift = 0;    // log2(blocks per unit)
  int64_t planar = 0;    // planar staging of this many blocks (0: per-block layout)

  Value* unit(Emit& b, Value* xb) const { return unit_shift ? b.shrc(xb, unit_shift) : xb; }
  Value* qi(Emit& b, Value* xb) const { return b.add(b.mulc(xb, words_per_block), b.mulc(unit(b, xb), 4)); }
  // The first word of 16-byte chunk c of block xb.
  Value* qc(Emit& b, Value* xb, int c) const {
    if (planar) return b.mulc(b.addc(xb, static_cast<int32_t>(c * planar)), 4);
    return b.addc(qi(b, xb), 4 * c);
  }
  Value* di(Emit& b, Value* xb) const { return planar ? xb : b.add(xb, unit(b, xb)); }
  Value* si(Emit& b, Value* xb, int k) const {
    if (planar) return b.addc(xb, static_cast<int32_t>(k * planar));
    return b.addc(b.add(b.mulc(xb, sums_per_block), unit(b, xb)), k);
  }
};

// Shared bytes of one token's staged row of nxb activation blocks in units of unit_blocks
// (padding included, and one unit's worth of slack for the arrays of a group).
int64_t staged_bytes(GgmlType xt, int64_t nxb, int64_t unit_blocks, bool planar = false);

// `blocks` staged blocks in units of `unit_blocks` (a power of two).
StagedX alloc_x(Emit& b, GgmlType xt, int64_t blocks, int unit_blocks, bool planar = false);

// Stages tokens t0 .. t0 + count - 1 (rows of xrow bytes in xq) into sx, all threads sharing the
// count * nxb blocks.
void stage_x(Emit& b, const StagedX& sx, GgmlType xt, Value* xq, int64_t nxb, int64_t xrow, int64_t t0, int64_t count,
             Value* tid, Value* nthreads);

// The 8 (or 64) quant words of activation block xb, as i32 values, loaded 16 bytes at a time.
std::vector<Value*> x_words(Emit& b, const StagedX& sx, Value* xb, int first, int count);

// One weight block of a row at byte offset `o` of the unit in `win`, against activation block
// xb: returns the new accumulator.
Value* block_dot(Emit& b, const WFormat& f, Window& win, int o, const StagedX& sx, Value* xb,
                 const std::vector<Value*>& xw, Value* acc);

}  // namespace loom::kernels::matvec_gpu_detail
