// The "planar" weight layout of matvec_gpu: a quantized matrix's 16-byte quant pieces
// first, then its block headers, so that the lanes of a warp on consecutive blocks read 512
// contiguous bytes per load instruction (GGUF blocks of 18 or 144 bytes put the lanes' 16-byte
// loads in 32 different 128-byte lines).
//
// Layout of a matrix of `rows` rows of nb = n_in / block_elems blocks, g = row * nb + block:
//   piece p (0 .. pieces-1) of block g at byte (p * rows * nb + g) * 16,
//   then the header of block g at pieces * rows * nb * 16 + g * header_bytes.
// A block's pieces are its GGUF bytes without the header, in order (16 * pieces bytes); the
// header is header_bytes bytes at header_offset in the GGUF block. Same total size as GGUF.
#pragma once

#include <cstdint>

#include "loom/base/status.h"
#include "loom/gguf/ggml_types.h"

namespace loom::llm {

struct PlanarGeometry {
  int pieces = 0;         // 16-byte pieces per block
  int header_bytes = 0;   // the rest of the block
  int header_offset = 0;  // where the header sits in the GGUF block
  int block_bytes() const { return 16 * pieces + header_bytes; }
  // GGUF byte offset of body byte 0 (the pieces' bytes follow the header, or precede it).
  int body_offset() const { return header_offset == 0 ? header_bytes : 0; }
};

// Q4_0, Q4_1, Q8_0, Q4_K, Q6_K; false for other types.
bool planar_geometry(GgmlType t, PlanarGeometry* g);

// GGUF rows -> planar (to_planar) and back (from_planar); src and dst do not overlap and hold
// rows * nb * block_bytes bytes. invalid_argument for other types or n_in not a whole number
// of blocks.
Status to_planar(GgmlType t, int64_t rows, int64_t n_in, const uint8_t* src, uint8_t* dst);
Status from_planar(GgmlType t, int64_t rows, int64_t n_in, const uint8_t* src, uint8_t* dst);

}  // namespace loom::llm
