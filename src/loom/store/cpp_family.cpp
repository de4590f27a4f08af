// The AVX2 mat-vec family (see cpp_family.h).
#include "loom/store/cpp_family.h"

#include <algorithm>

namespace loom::store {
namespace {

// Block layouts: weight bytes, offset of the quants, activation bytes, offset of its quants.
struct Layout {
  int wb, wq, xb, xq;
};
bool layout_of(int64_t wtype, Layout& l) {
  switch (wtype) {
    case 2: l = {18, 2, 34, 2}; return true;   // Q4_0 x Q8_0
    case 3: l = {20, 4, 36, 4}; return true;   // Q4_1 x Q8_1
    case 8: l = {34, 2, 34, 2}; return true;   // Q8_0 x Q8_0
    default: return false;
  }
}

bool applies(const kernels::OpSpec& op, const kernels::Shape& s, ir::TargetKind t) {
  Layout l;
  auto wt = s.dims.find("wtype");
  auto nt = s.dims.find("n_tokens");
  return t == ir::TargetKind::kCpp && op.name() == "matvec" && wt != s.dims.end() && layout_of(wt->second, l) &&
         nt != s.dims.end() && nt->second == 1;
}

// The per-block body for one row; {T} rows share the activation block. Placeholders are
// filled by fmt below.
constexpr std::string_view kSource = R"(// evolve cpp family: matvec wtype={wtype} rows={rows} tile={tile} acc={acc} pf={pf} unroll={unroll} offset={offset}{extra}
// launch evolve_matvec grid={grid},1,1 block=1,1,1 args=0,1,2
#include <immintrin.h>
namespace {{
constexpr int NB = {nb}, N_OUT = {n_out}, ROWS = {rows}, TILE = {tile}, ACC = {acc}, PF = {pf};
constexpr int WB = {wb}, WQ = {wq}, XB = {xb}, XQ = {xq}, WTYPE = {wtype}, OFFSET = {offset};
constexpr int XPRE = {xpre}, PAIR = {pair}, PFSTEP = {pfstep};
constexpr long long WROW = (long long)NB * WB;
inline float h2f(const unsigned char* p) {{ unsigned short h; __builtin_memcpy(&h, p, 2); return _cvtsh_ss(h); }}
inline unsigned short h16(const unsigned char* p) {{ unsigned short h; __builtin_memcpy(&h, p, 2); return h; }}
// An f16 broadcast to 8 lanes (vpbroadcastw + vcvtph2ps: no scalar round trip).
inline __m256 hsplat(const unsigned char* p) {{ return _mm256_cvtph_ps(_mm_set1_epi16((short)h16(p))); }}
// Two f16 values: lanes 0-3 the first, lanes 4-7 the second.
inline __m256 hsplat2(const unsigned char* p, const unsigned char* q) {{
  return _mm256_cvtph_ps(_mm_unpacklo_epi64(_mm_set1_epi16((short)h16(p)), _mm_set1_epi16((short)h16(q))));
}}
// Reference order: (hi + lo) lane pairs, then (0 + 2) + (1 + 3).
inline float hsum8(__m256 v) {{
  __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  float a[4];
  _mm_storeu_ps(a, s);
  return (a[0] + a[2]) + (a[1] + a[3]);
}}
template <int T>
inline void rows_tile(const unsigned char* w, const unsigned char* x, float* y, int r) {{
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i ones8 = _mm256_set1_epi8(1);
  __m256 acc[T][ACC];
  float macc[T];
  for (int t = 0; t < T; ++t) {{
    macc[t] = 0.0f;
    for (int a = 0; a < ACC; ++a) acc[t][a] = _mm256_setzero_ps();
  }}
  const unsigned char* wr[T];
  for (int t = 0; t < T; ++t) wr[t] = w + (long long)(r + t) * WROW;
#pragma GCC unroll {unroll}
  for (int b = 0; b < NB; ++b) {{
    const unsigned char* xb = x + b * XB;
    const __m256i xv = _mm256_loadu_si256((const __m256i*)(xb + XQ));
    const float dx = h2f(xb);
    __m256i xs8 = _mm256_setzero_si256();
    if (WTYPE == 2 && OFFSET) xs8 = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, xv), ones16), 3);
    for (int t = 0; t < T; ++t) {{
      const unsigned char* wb = wr[t] + b * WB;
      if (PF) _mm_prefetch((const char*)(wb + PF), _MM_HINT_T0);
      __m256i p;
      if (WTYPE == 8) {{
        const __m256i wv = _mm256_loadu_si256((const __m256i*)(wb + WQ));
        p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv)), ones16);
      }} else {{
        const __m128i q = _mm_loadu_si128((const __m128i*)(wb + WQ));
        __m256i wv = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
        if (WTYPE == 2 && !OFFSET) {{
          wv = _mm256_sub_epi8(wv, _mm256_set1_epi8(8));
          p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv)), ones16);
        }} else {{
          p = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, xv), ones16);
          if (WTYPE == 2) p = _mm256_sub_epi32(p, xs8);
        }}
      }}
      const __m256 d = _mm256_set1_ps(h2f(wb) * dx);
      acc[t][b % ACC] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[t][b % ACC]);
      if (WTYPE == 3) macc[t] = __builtin_fmaf(h2f(wb + 2), h2f(xb + 2), macc[t]);  // the reference's fma chain
    }}
  }}
  for (int t = 0; t < T; ++t) {{
    __m256 s = acc[t][0];
    if (ACC > 1) s = _mm256_add_ps(s, acc[t][ACC - 1]);
    y[r + t] = hsum8(s) + macc[t];
  }}
}}
// Activation tables, built once per call and shared by all its rows (XPRE, PAIR): the quants,
// 8 x the lane sums (Q4_0's offset), the scale splat; for PAIR the same for two blocks per
// 256-bit register (low halves of both blocks, then high halves; lanes 0-3 block b, 4-7 b+1).
struct XTab {{
  __m256i q[NB > 0 ? NB : 1], s8[NB > 0 ? NB : 1];
  __m256 d[NB > 0 ? NB : 1];
  float m[NB > 0 ? NB : 1];  // Q4_1: the activation's sum term (f16 s)
}};
struct XTab2 {{
  __m256i lo[NB / 2 + 1], hi[NB / 2 + 1], s8[NB / 2 + 1];
  __m256 d[NB / 2 + 1];
}};
inline void build_tab(const unsigned char* x, XTab& t) {{
  const __m256i ones16 = _mm256_set1_epi16(1), ones8 = _mm256_set1_epi8(1);
  for (int b = 0; b < NB; ++b) {{
    const unsigned char* xb = x + b * XB;
    t.q[b] = _mm256_loadu_si256((const __m256i*)(xb + XQ));
    t.s8[b] = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, t.q[b]), ones16), 3);
    t.d[b] = hsplat(xb);
    t.m[b] = WTYPE == 3 ? h2f(xb + 2) : 0.0f;
  }}
}}
inline void build_tab2(const unsigned char* x, XTab2& t) {{
  const __m256i ones16 = _mm256_set1_epi16(1), ones8 = _mm256_set1_epi8(1);
  for (int b = 0; b + 1 < NB; b += 2) {{
    const unsigned char* x0 = x + b * XB;
    const unsigned char* x1 = x0 + XB;
    const __m128i a0 = _mm_loadu_si128((const __m128i*)(x0 + XQ)), a1 = _mm_loadu_si128((const __m128i*)(x0 + XQ + 16));
    const __m128i b0 = _mm_loadu_si128((const __m128i*)(x1 + XQ)), b1 = _mm_loadu_si128((const __m128i*)(x1 + XQ + 16));
    t.lo[b / 2] = _mm256_set_m128i(b0, a0);
    t.hi[b / 2] = _mm256_set_m128i(b1, a1);
    const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(ones8, t.lo[b / 2]), _mm256_maddubs_epi16(ones8, t.hi[b / 2]));
    t.s8[b / 2] = _mm256_slli_epi32(_mm256_madd_epi16(s, ones16), 3);
    t.d[b / 2] = hsplat2(x0, x1);
  }}
}}
// One row from the tables (tile 1; rows stream one after another).
inline float row_pre(const unsigned char* wr, const XTab& t, const XTab2& t2) {{
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[ACC];
  for (int a = 0; a < ACC; ++a) acc[a] = _mm256_setzero_ps();
  float macc = 0.0f;
  int b = 0;
  if constexpr (PAIR) {{
#pragma GCC unroll {unroll}
    for (int i = 0; i < NB / 2; ++i) {{
      const unsigned char* w0 = wr + 2 * i * WB;
      if (PF && (i % PFSTEP) == 0) _mm_prefetch((const char*)(w0 + PF), _MM_HINT_T0);
      const __m256i q = _mm256_set_m128i(_mm_loadu_si128((const __m128i*)(w0 + WB + WQ)), _mm_loadu_si128((const __m128i*)(w0 + WQ)));
      const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, t2.lo[i]), _mm256_maddubs_epi16(hi, t2.hi[i]));
      __m256i p = _mm256_madd_epi16(s, ones16);
      if (WTYPE == 2) p = _mm256_sub_epi32(p, t2.s8[i]);
      acc[i % ACC] = _mm256_fmadd_ps(_mm256_mul_ps(hsplat2(w0, w0 + WB), t2.d[i]), _mm256_cvtepi32_ps(p), acc[i % ACC]);
      if (WTYPE == 3) macc = __builtin_fmaf(h2f(w0 + WB + 2), t.m[2 * i + 1], __builtin_fmaf(h2f(w0 + 2), t.m[2 * i], macc));
    }}
    b = NB / 2 * 2;
  }}
#pragma GCC unroll {unroll}
  for (; b < NB; ++b) {{
    const unsigned char* wb = wr + b * WB;
    if (PF && (b % PFSTEP) == 0) _mm_prefetch((const char*)(wb + PF), _MM_HINT_T0);
    __m256i p;
    if (WTYPE == 8) {{
      const __m256i wv = _mm256_loadu_si256((const __m256i*)(wb + WQ));
      p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(t.q[b], wv)), ones16);
    }} else {{
      const __m128i q = _mm_loadu_si128((const __m128i*)(wb + WQ));
      const __m256i wv = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
      p = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, t.q[b]), ones16);
      if (WTYPE == 2) p = _mm256_sub_epi32(p, t.s8[b]);
    }}
    acc[b % ACC] = _mm256_fmadd_ps(_mm256_mul_ps(hsplat(wb), t.d[b]), _mm256_cvtepi32_ps(p), acc[b % ACC]);
    if (WTYPE == 3) macc = __builtin_fmaf(h2f(wb + 2), t.m[b], macc);
  }}
  __m256 s = acc[0];
  if (ACC > 1) s = _mm256_add_ps(s, acc[ACC - 1]);
  return hsum8(s) + macc;
}}
}}  // namespace
extern "C" void evolve_matvec(void* const* args, const LoomLaunchDims* dims) {{
  const unsigned char* w = *static_cast<const unsigned char* const*>(args[0]);
  const unsigned char* x = *static_cast<const unsigned char* const*>(args[1]);
  float* y = *static_cast<float* const*>(args[2]);
  if constexpr (XPRE || PAIR) {{
    XTab t;
    XTab2 t2;
    build_tab(x, t);
    if (PAIR) build_tab2(x, t2);
    const int r0 = (int)dims->block_begin * ROWS;
    const int r1 = (long long)dims->block_end * ROWS < N_OUT ? (int)dims->block_end * ROWS : N_OUT;
    for (int r = r0; r < r1; ++r) y[r] = row_pre(w + (long long)r * WROW, t, t2);
    return;
  }}
  for (unsigned long long blk = dims->block_begin; blk < dims->block_end; ++blk) {{
    const int r0 = (int)blk * ROWS;
    const int r1 = r0 + ROWS < N_OUT ? r0 + ROWS : N_OUT;
    int r = r0;
    for (; r + TILE <= r1; r += TILE) rows_tile<TILE>(w, x, y, r);
    for (; r < r1; ++r) rows_tile<1>(w, x, y, r);
  }}
}}
)";

}  // namespace

std::vector<kernels::Knob> family_knobs(const kernels::OpSpec& op, const kernels::Shape& shape, ir::TargetKind target) {
  if (!applies(op, shape, target)) return {};
  // cx_xpre: activation tables built once per call (quants, Q4_0 offsets, scale splats) instead
  // of once per block and row tile; cx_pair: two 4-bit blocks per 256-bit register (half the
  // multiply-adds and conversions per byte); cx_threads 1: one block, which the cpu device runs
  // on the calling thread (no pool wake-up; on a loaded 2-core machine the worker is often not
  // running when the launch starts); cx_pf: software prefetch this many bytes ahead in the
  // weight stream, every cx_pfstep blocks (or pairs).
  //
  // The starting point (first choices), where a search lands when it switches a candidate to
  // this family: tables, pairs, two threads over 64-row blocks, prefetch 4 KiB ahead every second
  // pair, the fastest combination measured by hand on the quiet 2-core EPYC (Q4_0 576 x 1536,
  // weights streaming: ~25-28 us against ~43-49 for the op's default schedule, 75-90% of the
  // measured read bandwidth; one thread ~35 us). Under load (another job holding a core) one
  // thread wins; the search moves there by mutation (docs/performance.md, evolve).
  const int64_t wt = shape.at("wtype");
  std::vector<kernels::Knob> k = {{"ev_family", {0, 1}},       {"cx_rows", {64, 16, 32, 8, 4}},
                                  {"cx_tile", {1, 2, 4}},       {"cx_acc", {1, 2}, {2}},
                                  {"cx_pf", {4096, 2048, 1024, 256, 0}},
                                  {"cx_unroll", {1, 2, 4}},     {"cx_xpre", {1, 0}},
                                  {"cx_threads", {0, 1}},       {"cx_pfstep", {2, 1, 4}}};
  if (wt == 2) k.push_back({"cx_offset", {0, 1}});
  if (wt == 2 || wt == 3) k.push_back({"cx_pair", {1, 0}, {1}});
  return k;
}

Result<std::string> family_source(const kernels::OpSpec& op, const kernels::Shape& s, const kernels::Schedule& k) {
  Layout l;
  if (!applies(op, s, ir::TargetKind::kCpp) || !layout_of(s.at("wtype"), l))
    return invalid_argument("the cpp mat-vec family covers matvec with wtype 2, 3 or 8 on the cpu device, not {} {{{}}}",
                            op.name(), s.key());
  LOOM_RETURN_IF_ERROR(op.validate(s));
  auto get = [&](const char* n, int64_t def) {
    auto it = k.find(n);
    return it == k.end() ? def : it->second;
  };
  const int64_t n_out = s.at("n_out");
  const int64_t xpre = get("cx_xpre", 0), pair = l.wb == 34 ? 0 : get("cx_pair", 0), one = get("cx_threads", 0);
  const int64_t pfstep = std::max<int64_t>(1, get("cx_pfstep", 1));
  // One thread: a single block of all rows (the device runs a one-block launch inline).
  const int64_t rows = one ? n_out : get("cx_rows", 16);
  std::string extra;
  if (xpre || pair || one || pfstep != 1)
    extra = fmt::format(" xpre={} pair={} threads={} pfstep={}", xpre, pair, one ? 1 : 0, pfstep);
  return fmt::format(kSource, fmt::arg("extra", extra), fmt::arg("xpre", xpre), fmt::arg("pair", pair),
                     fmt::arg("pfstep", pfstep), fmt::arg("wtype", s.at("wtype")), fmt::arg("rows", rows), fmt::arg("tile", get("cx_tile", 1)),
                     fmt::arg("acc", get("cx_acc", 1)), fmt::arg("pf", get("cx_pf", 0)), fmt::arg("unroll", get("cx_unroll", 1)),
                     fmt::arg("offset", get("cx_offset", 0)), fmt::arg("grid", (n_out + rows - 1) / rows),
                     fmt::arg("nb", s.at("n_in") / 32), fmt::arg("n_out", n_out), fmt::arg("wb", l.wb), fmt::arg("wq", l.wq),
                     fmt::arg("xb", l.xb), fmt::arg("xq", l.xq));
}

void canonicalize(kernels::Schedule& knobs, const std::vector<kernels::Knob>& space, const kernels::Schedule& op_default) {
  auto fam = knobs.find("ev_family");
  const bool cpp = fam != knobs.end() && fam->second == 1;
  for (const kernels::Knob& k : space) {
    const bool cx = k.name.rfind("cx_", 0) == 0;
    const bool ev = k.name.rfind("ev_", 0) == 0 && k.name != "ev_family";
    if (cpp && ev) knobs[k.name] = k.choices[0];
    if (!cpp && cx) knobs[k.name] = k.choices[0];
    // The table path (cx_xpre or cx_pair) walks single rows and always folds Q4_0's offset
    // into the tables: row tiles and cx_offset do not change its code.
    if (cpp && (k.name == "cx_tile" || k.name == "cx_offset")) {
      auto xp = knobs.find("cx_xpre");
      auto pr = knobs.find("cx_pair");
      if ((xp != knobs.end() && xp->second) || (pr != knobs.end() && pr->second)) knobs[k.name] = k.choices[0];
    }
    // Prefetch spacing exists on the table path only, and only with a prefetch distance.
    if (cpp && k.name == "cx_pfstep") {
      auto xp = knobs.find("cx_xpre");
      auto pr = knobs.find("cx_pair");
      auto pf = knobs.find("cx_pf");
      const bool table = (xp != knobs.end() && xp->second) || (pr != knobs.end() && pr->second);
      if (!table || pf == knobs.end() || pf->second == 0) knobs[k.name] = k.choices[0];
    }
    // One thread takes all rows: the block size does not matter.
    if (cpp && k.name == "cx_rows") {
      auto th = knobs.find("cx_threads");
      if (th != knobs.end() && th->second) knobs[k.name] = k.choices[0];
    }
    if (cpp && !cx && !ev && k.name != "ev_family") {
      auto d = op_default.find(k.name);
      knobs[k.name] = d != op_default.end() ? d->second : k.choices[0];
    }
  }
}

}  // namespace loom::store
