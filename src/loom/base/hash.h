// Hashing for content keys: 64-bit FNV-1a and a 128-bit key made of two FNV-1a streams. Not a
// security property (FNV collides on purpose-built input); every key here names content that
// Loom produced itself, so only accidental collisions matter.
//
// These values are persisted: candidate hashes in evolve databases, the names of input-pool
// files and directories, the file names of the on-disk kernel caches. Changing a function or a
// constant here changes those keys; an old entry is then a miss, never a misread (a key names
// its content and nothing reads an entry by any other key), but stored candidate hashes would no
// longer match their candidates. Keep the constants; add a new function for a new key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace loom {

inline constexpr uint64_t kFnv64OffsetBasis = 0xcbf29ce484222325ull;  // 14695981039346656037
inline constexpr uint64_t kFnv64Prime = 0x100000001b3ull;             // 1099511628211

// 64-bit FNV-1a of `bytes`, starting from `basis` (another basis gives another, independent hash).
constexpr uint64_t fnv1a64(std::string_view bytes, uint64_t basis = kFnv64OffsetBasis) {
  uint64_t h = basis;
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * kFnv64Prime;
  return h;
}

// The basis of Loom's persisted 64-bit keys (candidate hashes, input-pool files and
// directories): FNV's offset basis with its last decimal digit lost. As good a basis as any;
// kept so that existing databases and pools keep their keys.
inline constexpr uint64_t kKeyHashBasis = 1469598103934665603ull;

// The 64-bit key of `bytes` (candidate hashes, input pools): fnv1a64 from kKeyHashBasis.
constexpr uint64_t key_hash64(std::string_view bytes) { return fnv1a64(bytes, kKeyHashBasis); }

// 16 lowercase hex digits.
std::string hex64(uint64_t v);

// A 128-bit content key as 32 hex digits: FNV-1a, and a second FNV-1a stream whose basis mixes in
// the length and which folds its state (h ^= h >> 29) after every byte, so the two halves do not
// collide together. The key of the on-disk kernel caches and of loaded modules.
std::string content_hash128(std::string_view bytes);

}  // namespace loom
