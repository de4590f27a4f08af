// GGUF <-> planar weight repacking (see planar.h).
#include "loom/gguf/planar.h"

#include <cstring>

namespace loom::llm {

bool planar_geometry(GgmlType t, PlanarGeometry* g) {
  switch (t) {
    case GgmlType::Q4_0: *g = {1, 2, 0}; return true;     // d | qs[16]
    case GgmlType::Q4_1: *g = {1, 4, 0}; return true;     // d m | qs[16]
    case GgmlType::Q8_0: *g = {2, 2, 0}; return true;     // d | qs[32]
    case GgmlType::Q4_K: *g = {8, 16, 0}; return true;    // d dmin scales[12] | qs[128]
    case GgmlType::Q6_K: *g = {13, 2, 208}; return true;  // ql[128] qh[64] scales[16] | d
    default: return false;
  }
}

namespace {

Status repack(GgmlType t, int64_t rows, int64_t n_in, const uint8_t* src, uint8_t* dst, bool to) {
  PlanarGeometry g;
  if (!planar_geometry(t, &g)) return invalid_argument("planar layout: type {} is not supported", ggml_type_name(t));
  const int64_t be = t == GgmlType::Q4_K || t == GgmlType::Q6_K ? 256 : 32;
  if (rows < 0 || n_in <= 0 || n_in % be) return invalid_argument("planar layout: n_in={} rows={}", n_in, rows);
  const int64_t nblk = rows * (n_in / be), bb = g.block_bytes();
  const int64_t hbase = int64_t{16} * g.pieces * nblk;
  for (int64_t k = 0; k < nblk; ++k) {
    uint8_t* gg = to ? nullptr : dst + k * bb;
    const uint8_t* gs = to ? src + k * bb : nullptr;
    for (int p = 0; p < g.pieces; ++p) {
      const int64_t po = (p * nblk + k) * 16, bo = g.body_offset() + 16 * p;
      if (to) std::memcpy(dst + po, gs + bo, 16);
      else std::memcpy(gg + bo, src + po, 16);
    }
    const int64_t ho = hbase + k * g.header_bytes;
    if (to) std::memcpy(dst + ho, gs + g.header_offset, static_cast<size_t>(g.header_bytes));
    else std::memcpy(gg + g.header_offset, src + ho, static_cast<size_t>(g.header_bytes));
  }
  return Status();
}

}  // namespace

Status to_planar(GgmlType t, int64_t rows, int64_t n_in, const uint8_t* src, uint8_t* dst) {
  return repack(t, rows, n_in, src, dst, true);
}
Status from_planar(GgmlType t, int64_t rows, int64_t n_in, const uint8_t* src, uint8_t* dst) {
  return repack(t, rows, n_in, src, dst, false);
}

}  // namespace loom::llm
