// The output comparison (see output_compare.h).
#include "loom/kernels/output_compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "loom/gguf/quant.h"

namespace loom::kernels {
namespace {

bool is_float_elem(ir::Scalar e) {
  return e == ir::Scalar::kF32 || e == ir::Scalar::kF64 || e == ir::Scalar::kF16 || e == ir::Scalar::kBF16;
}

}  // namespace

double element_value(const uint8_t* p, ir::Scalar e) {
  switch (e) {
    case ir::Scalar::kF32: { float f; std::memcpy(&f, p, 4); return f; }
    case ir::Scalar::kI32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case ir::Scalar::kF64: { double d; std::memcpy(&d, p, 8); return d; }
    case ir::Scalar::kF16: { uint16_t h; std::memcpy(&h, p, 2); return llm::fp16_to_fp32(h); }
    case ir::Scalar::kBF16: { uint16_t h; std::memcpy(&h, p, 2); return llm::bf16_to_fp32(h); }
    default: return *p;
  }
}

OutputComparison compare_outputs(const std::vector<ArgSpec>& specs, const std::vector<const uint8_t*>& got,
                                 const std::vector<HostArg>& in, const std::vector<HostArg>& want,
                                 const Tolerance& tol) {
  OutputComparison r;
  auto fail = [&](OutputComparison::Kind k, size_t arg, size_t offset, size_t es, std::string msg) {
    r.kind = k;
    r.arg = arg;
    r.offset = offset;
    r.elem_bytes = es;
    r.message = std::move(msg);
    return r;
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    const ArgSpec& s = specs[i];
    if (s.kind != ArgKind::kBuffer || s.role == ArgRole::kScratch) continue;
    const uint8_t* g = got[i];
    const size_t n = static_cast<size_t>(s.bytes);
    if (s.role == ArgRole::kInput) {
      if (i < in.size() && in[i].bytes.size() == n && std::memcmp(g, in[i].bytes.data(), n) != 0)
        for (size_t j = 0; j < n; ++j)
          if (g[j] != in[i].bytes[j])
            return fail(OutputComparison::Kind::kInputModified, i, j, 1,
                        fmt::format("modified input '{}' at byte {} (0x{:02x} -> 0x{:02x})", s.name, j, in[i].bytes[j], g[j]));
      continue;
    }
    const std::vector<uint8_t>& exp = want[i].bytes;
    if (exp.size() != n)
      return fail(OutputComparison::Kind::kBadReference, i, 0, 1,
                  fmt::format("reference gave {} bytes for '{}', args() says {}", exp.size(), s.name, n));
    const ir::Scalar e = s.elem;
    if (!is_float_elem(e)) {
      if (std::memcmp(g, exp.data(), n) == 0) continue;
      for (size_t j = 0; j < n; ++j)
        if (g[j] != exp[j])
          return fail(OutputComparison::Kind::kMismatch, i, j, 1,
                      fmt::format("'{}' byte {} is 0x{:02x}, reference 0x{:02x}", s.name, j, g[j], exp[j]));
      continue;
    }
    const size_t es = static_cast<size_t>(ir::scalar_bits(e) / 8);
    if (tol.exact) {
      // Bit for bit (so -0.0 is not 0.0), except that any NaN matches any NaN.
      if (std::memcmp(g, exp.data(), n) == 0) continue;
      for (size_t j = 0; j + es <= n; j += es) {
        if (std::memcmp(g + j, exp.data() + j, es) == 0) continue;
        const double gv = element_value(g + j, e), wv = element_value(exp.data() + j, e);
        if (std::isnan(gv) && std::isnan(wv)) continue;
        return fail(OutputComparison::Kind::kMismatch, i, j, es,
                    fmt::format("'{}'[{}] = {}, reference {} (exact op: bit for bit)", s.name, j / es, gv, wv));
      }
      continue;
    }
    for (size_t j = 0; j + es <= n; j += es) {
      const double gv = element_value(g + j, e), wv = element_value(exp.data() + j, e);
      if (gv == wv || (std::isnan(wv) && std::isnan(gv))) continue;  // infinities included
      const double err = std::fabs(gv - wv);
      if (!(err <= tol.atol + tol.rtol * std::fabs(wv)) || std::isinf(wv) || std::isinf(gv))
        return fail(OutputComparison::Kind::kMismatch, i, j, es,
                    fmt::format("'{}'[{}] = {}, reference {} (|diff| {:.3g} > atol {:.3g} + rtol {:.3g})", s.name, j / es,
                                gv, wv, err, tol.atol, tol.rtol));
      if (!std::isnan(err)) {
        r.max_abs_err = std::max(r.max_abs_err, err);
        if (wv != 0) r.max_rel_err = std::max(r.max_rel_err, err / std::fabs(wv));
      }
    }
  }
  return r;
}

}  // namespace loom::kernels
