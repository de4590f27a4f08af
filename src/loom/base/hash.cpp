// Content hashes (see hash.h).
#include "loom/base/hash.h"

#include <fmt/format.h>

namespace loom {

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

std::string content_hash128(std::string_view bytes) {
  uint64_t h1 = kFnv64OffsetBasis, h2 = 0x84222325cbf29ce4ull ^ bytes.size();
  for (char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    h1 = (h1 ^ c) * kFnv64Prime;
    h2 = (h2 ^ c) * kFnv64Prime;
    h2 ^= h2 >> 29;
  }
  return fmt::format("{:016x}{:016x}", h1, h2);
}

}  // namespace loom
