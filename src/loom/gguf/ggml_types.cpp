// Table of ggml tensor types (numbers and block sizes follow the GGUF specification).
#include "loom/gguf/ggml_types.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace loom::llm {
namespace {
constexpr std::array kTypes = {
    GgmlTypeInfo{GgmlType::F32, "f32", 1, 4, true},
    GgmlTypeInfo{GgmlType::F16, "f16", 1, 2, true},
    GgmlTypeInfo{GgmlType::Q4_0, "q4_0", 32, 18, true},
    GgmlTypeInfo{GgmlType::Q4_1, "q4_1", 32, 20, true},
    GgmlTypeInfo{GgmlType::Q5_0, "q5_0", 32, 22, true},
    GgmlTypeInfo{GgmlType::Q5_1, "q5_1", 32, 24, true},
    GgmlTypeInfo{GgmlType::Q8_0, "q8_0", 32, 34, true},
    GgmlTypeInfo{GgmlType::Q8_1, "q8_1", 32, 36, true},
    GgmlTypeInfo{GgmlType::Q2_K, "q2_K", 256, 84, true},
    GgmlTypeInfo{GgmlType::Q3_K, "q3_K", 256, 110, true},
    GgmlTypeInfo{GgmlType::Q4_K, "q4_K", 256, 144, true},
    GgmlTypeInfo{GgmlType::Q5_K, "q5_K", 256, 176, true},
    GgmlTypeInfo{GgmlType::Q6_K, "q6_K", 256, 210, true},
    GgmlTypeInfo{GgmlType::Q8_K, "q8_K", 256, 292, true},
    GgmlTypeInfo{GgmlType::IQ2_XXS, "iq2_xxs", 256, 66, false},
    GgmlTypeInfo{GgmlType::IQ2_XS, "iq2_xs", 256, 74, false},
    GgmlTypeInfo{GgmlType::IQ3_XXS, "iq3_xxs", 256, 98, false},
    GgmlTypeInfo{GgmlType::IQ1_S, "iq1_s", 256, 50, false},
    GgmlTypeInfo{GgmlType::IQ4_NL, "iq4_nl", 32, 18, true},
    GgmlTypeInfo{GgmlType::IQ3_S, "iq3_s", 256, 110, false},
    GgmlTypeInfo{GgmlType::IQ2_S, "iq2_s", 256, 82, false},
    GgmlTypeInfo{GgmlType::IQ4_XS, "iq4_xs", 256, 136, true},
    GgmlTypeInfo{GgmlType::I8, "i8", 1, 1, false},
    GgmlTypeInfo{GgmlType::I16, "i16", 1, 2, false},
    GgmlTypeInfo{GgmlType::I32, "i32", 1, 4, false},
    GgmlTypeInfo{GgmlType::I64, "i64", 1, 8, false},
    GgmlTypeInfo{GgmlType::F64, "f64", 1, 8, false},
    GgmlTypeInfo{GgmlType::IQ1_M, "iq1_m", 256, 56, false},
    GgmlTypeInfo{GgmlType::BF16, "bf16", 1, 2, true},
    GgmlTypeInfo{GgmlType::TQ1_0, "tq1_0", 256, 54, false},
    GgmlTypeInfo{GgmlType::TQ2_0, "tq2_0", 256, 66, false},
    GgmlTypeInfo{GgmlType::MXFP4, "mxfp4", 32, 17, false},
};
}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type) {
  for (const auto& t : kTypes)
    if (static_cast<uint32_t>(t.type) == type) return t;
  return std::nullopt;
}

std::string_view ggml_type_name(GgmlType type) {
  auto info = ggml_type_info(static_cast<uint32_t>(type));
  return info ? info->name : std::string_view("unknown");
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& t : kTypes) {
    std::string tn(t.name);
    std::transform(tn.begin(), tn.end(), tn.begin(), [](unsigned char c) { return std::tolower(c); });
    if (tn == lower) return t.type;
  }
  return std::nullopt;
}

}  // namespace loom::llm
