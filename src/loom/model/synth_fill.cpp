// Random contents for synthetic models: quantized blocks with a chosen spread, norm weights,
// byte-level token texts.
#include "loom/model/synth_fill.h"

#include <cstring>

#include "loom/gguf/quant.h"
#include "loom/gguf/quant_blocks.h"

namespace loom::llm::synth {
namespace {

// splitmix64: fast, seedable, good enough for filling weights.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) / static_cast<float>(1ull << 24); }  // [0,1)
};

void fill_random(uint8_t* dst, size_t n, Rng& rng) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng.next();
    std::memcpy(dst + i, &v, 8);
  }
  for (uint64_t v = rng.next(); i < n; ++i, v >>= 8) dst[i] = static_cast<uint8_t>(v);
}

}  // namespace

void fill_blocks(GgmlType type, uint8_t* dst, size_t n_bytes, float stddev, uint64_t seed) {
  Rng rng{seed};
  fill_random(dst, n_bytes, rng);  // quant bits; scales overwritten below
  auto half = [&](float base) { return fp32_to_fp16(base * (0.75f + 0.5f * rng.uniform())); };
  switch (type) {
    case GgmlType::Q4_0:
      for (auto* b = reinterpret_cast<BlockQ4_0*>(dst); b < reinterpret_cast<BlockQ4_0*>(dst + n_bytes); ++b)
        b->d = half(stddev / 4.6f);  // (q - 8) for uniform q has stddev ~4.6
      break;
    case GgmlType::Q4_1:
      for (auto* b = reinterpret_cast<BlockQ4_1*>(dst); b < reinterpret_cast<BlockQ4_1*>(dst + n_bytes); ++b) {
        b->d = half(stddev / 4.6f);
        b->m = fp32_to_fp16(-7.5f * fp16_to_fp32(b->d));
      }
      break;
    case GgmlType::Q5_0:
      for (auto* b = reinterpret_cast<BlockQ5_0*>(dst); b < reinterpret_cast<BlockQ5_0*>(dst + n_bytes); ++b)
        b->d = half(stddev / 9.2f);  // (q - 16) for uniform q in 0..31 has stddev ~9.2
      break;
    case GgmlType::Q5_1:
      for (auto* b = reinterpret_cast<BlockQ5_1*>(dst); b < reinterpret_cast<BlockQ5_1*>(dst + n_bytes); ++b) {
        b->d = half(stddev / 9.2f);
        b->m = fp32_to_fp16(-15.5f * fp16_to_fp32(b->d));
      }
      break;
    case GgmlType::Q8_0:
      for (auto* b = reinterpret_cast<BlockQ8_0*>(dst); b < reinterpret_cast<BlockQ8_0*>(dst + n_bytes); ++b) {
        b->d = half(stddev / 73.0f);
        for (auto& q : b->qs) if (q == -128) q = -127;
      }
      break;
    case GgmlType::Q4_K:
      for (auto* b = reinterpret_cast<BlockQ4_K*>(dst); b < reinterpret_cast<BlockQ4_K*>(dst + n_bytes); ++b) {
        // 6-bit scales and mins are random in 0..63 (mean ~32): x = d*sc*q - dmin*m.
        b->d = half(stddev / (32.0f * 4.6f));
        b->dmin = fp32_to_fp16(fp16_to_fp32(b->d) * 7.5f);
      }
      break;
    case GgmlType::Q2_K:
      for (auto* b = reinterpret_cast<BlockQ2_K*>(dst); b < reinterpret_cast<BlockQ2_K*>(dst + n_bytes); ++b) {
        // Random 4-bit scales and mins (mean ~7.5): x = d*sc*q - dmin*m with q in 0..3 (mean 1.5).
        b->d = half(stddev / 10.0f);
        b->dmin = fp32_to_fp16(fp16_to_fp32(b->d) * 1.5f);
      }
      break;
    case GgmlType::Q3_K:
      for (auto* b = reinterpret_cast<BlockQ3_K*>(dst); b < reinterpret_cast<BlockQ3_K*>(dst + n_bytes); ++b)
        b->d = half(stddev / 42.0f);  // (scale - 32) rms ~18.5, (q - 4) sd ~2.3
      break;
    case GgmlType::IQ4_NL:
      for (auto* b = reinterpret_cast<BlockIQ4_NL*>(dst); b < reinterpret_cast<BlockIQ4_NL*>(dst + n_bytes); ++b)
        b->d = half(stddev / 67.0f);  // the codebook's rms is ~67
      break;
    case GgmlType::IQ4_XS:
      for (auto* b = reinterpret_cast<BlockIQ4_XS*>(dst); b < reinterpret_cast<BlockIQ4_XS*>(dst + n_bytes); ++b)
        b->d = half(stddev / (67.0f * 18.5f));
      break;
    case GgmlType::Q6_K:
      for (auto* b = reinterpret_cast<BlockQ6_K*>(dst); b < reinterpret_cast<BlockQ6_K*>(dst + n_bytes); ++b) {
        b->d = half(stddev / (64.0f * 18.5f));  // int8 scales ~uniform magnitude 64, (q-32) sd ~18.5
      }
      break;
    default: {
      // Float types: gaussian-ish values via the sum of uniforms.
      size_t n = n_bytes / (type == GgmlType::F32 ? 4 : 2);
      for (size_t i = 0; i < n; ++i) {
        float x = (rng.uniform() + rng.uniform() + rng.uniform() - 1.5f) * 2.0f * stddev;
        if (type == GgmlType::F32) std::memcpy(dst + 4 * i, &x, 4);
        else { uint16_t h = type == GgmlType::F16 ? fp32_to_fp16(x) : fp32_to_bf16(x); std::memcpy(dst + 2 * i, &h, 2); }
      }
    }
  }
}

void fill_uniform(uint8_t* dst, size_t n_bytes, float center, float spread, uint64_t seed) {
  Rng rng{seed};
  for (size_t i = 0; i < n_bytes / 4; ++i) {
    float x = center + spread * (rng.uniform() - 0.5f);
    std::memcpy(dst + 4 * i, &x, 4);
  }
}

std::string byte_token(int b) {
  bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  int cp = b;
  if (!printable) {
    int k = 0;
    for (int x = 0; x < b; ++x) {
      bool px = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
      if (!px) ++k;
    }
    cp = 256 + k;
  }
  std::string s;
  if (cp < 0x80) s.push_back(static_cast<char>(cp));
  else { s.push_back(static_cast<char>(0xC0 | (cp >> 6))); s.push_back(static_cast<char>(0x80 | (cp & 0x3F))); }
  return s;
}

}  // namespace loom::llm::synth
