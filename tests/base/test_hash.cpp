// base/hash.h: the functions and the values that persisted keys depend on.
#include "loom/base/hash.h"

#include <gtest/gtest.h>

namespace loom {
namespace {

TEST(Hash, Fnv1a64MatchesTheReferenceVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
  static_assert(fnv1a64("a") == 0xaf63dc4c8601ec8cull, "usable at compile time");
}

// These values name things on disk (candidate hashes in evolve databases, input pools, kernel
// cache files): a change here orphans them, so it has to be deliberate.
TEST(Hash, PersistedKeysKeepTheirValues) {
  EXPECT_EQ(hex64(key_hash64(R"({"kind":"schedule","knobs":{}})")), "09df0bf6cd67c049");
  EXPECT_EQ(content_hash128("kernel text"), "e0281f72ac32a50f49bc8911e4e357c8");
  EXPECT_EQ(content_hash128("").size(), 32u);
  EXPECT_NE(content_hash128("ab"), content_hash128("ba"));
}

TEST(Hash, BytesAboveSevenBitsHashAsUnsigned) {
  const std::string s = "\xff\x80";
  uint64_t h = kFnv64OffsetBasis;
  for (unsigned char c : s) h = (h ^ c) * kFnv64Prime;
  EXPECT_EQ(fnv1a64(s), h);
}

}  // namespace
}  // namespace loom
