// The AVX2 mat-vec family (see cpp_family.h).
#include "loom/evolve/cpp_family.h"

namespace loom::evolve {
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
constexpr std::string_view kSource = R"(// evolve cpp family: matvec wtype={wtype} rows={rows} tile={tile} acc={acc} pf={pf} unroll={unroll} offset={offset}
// launch evolve_matvec grid={grid},1,1 block=1,1,1 args=0,1,2
#include <immintrin.h>
namespace {{
constexpr int NB = {nb}, N_OUT = {n_out}, ROWS = {rows}, TILE = {tile}, ACC = {acc}, PF = {pf};
constexpr int WB = {wb}, WQ = {wq}, XB = {xb}, XQ = {xq}, WTYPE = {wtype}, OFFSET = {offset};
constexpr long long WROW = (long long)NB * WB;
inline float h2f(const unsigned char* p) {{ unsigned short h; __builtin_memcpy(&h, p, 2); return _cvtsh_ss(h); }}
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
      if (WTYPE == 3) macc[t] += h2f(wb + 2) * h2f(xb + 2);
    }}
  }}
  for (int t = 0; t < T; ++t) {{
    __m256 s = acc[t][0];
    if (ACC > 1) s = _mm256_add_ps(s, acc[t][ACC - 1]);
    y[r + t] = hsum8(s) + macc[t];
  }}
}}
}}  // namespace
extern "C" void evolve_matvec(void* const* args, const LoomLaunchDims* dims) {{
  const unsigned char* w = *static_cast<const unsigned char* const*>(args[0]);
  const unsigned char* x = *static_cast<const unsigned char* const*>(args[1]);
  float* y = *static_cast<float* const*>(args[2]);
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
  std::vector<kernels::Knob> k = {{"ev_family", {0, 1}},        {"cx_rows", {4, 8, 16, 32, 64}},
                                  {"cx_tile", {1, 2, 4}},        {"cx_acc", {1, 2}},
                                  {"cx_pf", {0, 256, 1024}},     {"cx_unroll", {1, 2, 4}}};
  if (shape.at("wtype") == 2) k.push_back({"cx_offset", {0, 1}});
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
  const int64_t rows = get("cx_rows", 16), n_out = s.at("n_out");
  return fmt::format(kSource, fmt::arg("wtype", s.at("wtype")), fmt::arg("rows", rows), fmt::arg("tile", get("cx_tile", 1)),
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
    if (cpp && !cx && !ev && k.name != "ev_family") {
      auto d = op_default.find(k.name);
      knobs[k.name] = d != op_default.end() ? d->second : k.choices[0];
    }
  }
}

}  // namespace loom::evolve
