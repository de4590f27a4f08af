// The ggml tensor types as GGUF numbers them, with block geometry (elements per block, bytes
// per block). Types Loom can dequantize are marked; the rest are known so files can be listed.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace loom::llm {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;      // as ggml spells it: "q4_K", "f16"
  uint32_t block_elems;       // elements per block
  uint32_t block_bytes;       // bytes per block
  bool dequantizable;         // Loom has a reference dequantizer
};

// Returns nullopt for numbers that are not (or no longer) ggml types.
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type);
std::string_view ggml_type_name(GgmlType type);
// Parses "q4_0", "Q4_K", "f16" ...
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

}  // namespace loom::llm
