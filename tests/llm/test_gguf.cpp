// GGUF reader: valid files round-trip through the writer; a table of hand-made hostile files
// each gives one clear error naming the field and byte offset (and `loom info` exits non-zero).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "loom/base/file.h"
#include "loom/gguf/gguf.h"
#include "loom/gguf/gguf_writer.h"

namespace loom::llm {
namespace {

// Little-endian byte builder for hand-made files.
struct Bytes {
  std::string b;
  Bytes& u8(uint8_t v) { b.push_back(static_cast<char>(v)); return *this; }
  Bytes& u32(uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); return *this; }
  Bytes& u64(uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); return *this; }
  Bytes& str(std::string_view s) { u64(s.size()); b.append(s); return *this; }
  Bytes& raw(std::string_view s) { b.append(s); return *this; }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  Bytes& pad_to(size_t align) { b.resize((b.size() + align - 1) / align * align, '\0'); return *this; }
};

constexpr uint32_t kStr = 8, kArr = 9, kU32 = 4, kU8 = 0;

// A small valid file prefix: two metadata entries (88 bytes), then `n_tensors` tensor infos.
// Byte offsets in the table follow from it: tensor info at 88, n_dims at 97 (name "w"), the
// first dimension at 101, type at 109 and offset at 113 for a 1-D tensor.
Bytes valid_prefix(uint64_t n_tensors = 1) {
  Bytes b;
  b.header(n_tensors, 2).str("general.architecture").u32(kStr).str("llama").str("x.n").u32(kU32).u32(7);
  return b;
}

Result<GgufFile> parse(const std::string& bytes) {
  return GgufFile::parse(MappedFile::from_bytes(bytes), "bad.gguf");
}

struct BadCase {
  const char* name;
  std::function<std::string()> make;
  const char* field;   // substring the error must contain
  long long offset;    // byte offset the error must name (-1: do not check)
};

std::string tensor_file(std::string_view name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset,
                        size_t data_bytes) {
  Bytes b = valid_prefix();
  b.str(name).u32(static_cast<uint32_t>(dims.size()));
  for (auto d : dims) b.u64(d);
  b.u32(type).u64(offset).pad_to(32);
  b.b.append(data_bytes, '\x01');
  return b.b;
}

const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> cases = {
      {"empty file", [] { return std::string(); }, "magic", 0},
      {"bad magic", [] { return Bytes().raw("GGML").u32(3).u64(0).u64(0).b; }, "not a GGUF file", 0},
      {"version 1", [] { return Bytes().header(0, 0, 1).b; }, "version 1 is not supported", 4},
      {"unknown version", [] { return Bytes().header(0, 0, 77).b; }, "unknown GGUF version 77", 4},
      {"big-endian", [] { return Bytes().header(0, 0, 0x03000000).b; }, "big-endian", 4},
      {"truncated header", [] { return Bytes().raw("GGUF").u32(3).u32(0).b; }, "tensor_count", 8},
      {"tensor count overflow", [] { return Bytes().header(~0ull, 0).b; }, "tensor_count", 8},
      {"kv count overflow", [] { return Bytes().header(0, 1ull << 62).b; }, "metadata_kv_count", 16},
      {"key length overflow", [] { return Bytes().header(0, 1).u64(~0ull).raw(std::string(16, 'x')).b; }, "metadata key #0", 24},
      {"empty key", [] { return Bytes().header(0, 1).str("").u32(kU32).u32(1).b; }, "empty key", 24},
      {"string value too long",
       [] { return Bytes().header(0, 1).str("k").u32(kStr).u64(1000).raw("abc").b; }, "metadata 'k'", 37},
      {"unknown value type", [] { return Bytes().header(0, 1).str("k").u32(13).u32(0).b; }, "unknown metadata value type 13", 33},
      {"truncated value", [] { return Bytes().header(0, 1).str("k").u32(kU32).u8(1).b; }, "truncated", -1},
      {"array length overflow",
       [] { return Bytes().header(0, 1).str("k").u32(kArr).u32(kU32).u64(1ull << 61).b; }, "array of", 41},
      {"string array overflow",
       [] { return Bytes().header(0, 1).str("k").u32(kArr).u32(kStr).u64(~0ull >> 1).b; }, "cannot fit", 41},
      {"array of unknown type",
       [] { return Bytes().header(0, 1).str("k").u32(kArr).u32(99).u64(1).b; }, "unknown metadata value type 99", 37},
      {"arrays nested too deep",
       [] {
         Bytes b;
         b.header(0, 1).str("k").u32(kArr);
         for (int i = 0; i < 20; ++i) b.u32(kArr).u64(1);
         return b.u32(kU8).u64(1).u8(0).b;
       },
       "nested deeper", -1},
      {"duplicate key",
       [] { return Bytes().header(0, 2).str("k").u32(kU32).u32(1).str("k").u32(kU32).u32(2).b; }, "duplicate key", 41},
      {"alignment not a power of two",
       [] { return Bytes().header(0, 1).str("general.alignment").u32(kU32).u32(48).b; }, "not a power of two", 24},
      {"alignment zero", [] { return Bytes().header(0, 1).str("general.alignment").u32(kU32).u32(0).b; }, "general.alignment", 24},
      {"alignment wrong type",
       [] { return Bytes().header(0, 1).str("general.alignment").u32(kStr).str("32").b; }, "must be u32", 24},
      {"tensor name too long", [] { return tensor_file(std::string(80, 'a'), {32}, 0, 0, 128); }, "longer than 63", 88},
      {"duplicate tensor name",
       [] {
         Bytes b = valid_prefix(2);
         for (int i = 0; i < 2; ++i) b.str("w").u32(1).u64(32).u32(0).u64(i * 128);
         b.pad_to(32).b.append(256, '\0');
         return b.b;
       },
       "duplicate tensor name", 121},
      {"too many dims", [] { return tensor_file("w", {32, 1, 1, 1, 1}, 0, 0, 128); }, "5 dimensions", 97},
      {"dims overflow", [] { return tensor_file("w", {1ull << 40, 1ull << 40}, 0, 0, 128); }, "overflows the element count", 109},
      {"negative dim", [] { return tensor_file("w", {~0ull}, 0, 0, 128); }, "overflows", 101},
      {"unknown tensor type", [] { return tensor_file("w", {32}, 200, 0, 128); }, "unknown tensor type 200", 109},
      {"removed tensor type", [] { return tensor_file("w", {32}, 4, 0, 128); }, "unknown tensor type 4", 109},
      {"row not a block multiple", [] { return tensor_file("w", {33}, 2, 0, 128); }, "not a multiple of the q4_0 block size", 97},
      {"byte size overflow", [] { return tensor_file("w", {1ull << 62}, 0, 0, 128); }, "byte size overflows", 97},
      {"misaligned offset", [] { return tensor_file("w", {32}, 0, 3, 128); }, "not a multiple of the alignment", 113},
      {"offset outside file", [] { return tensor_file("w", {32}, 0, 1ull << 40, 128); }, "outside", 113},
      {"offset near u64 max", [] { return tensor_file("w", {32}, 0, ~0ull - 31, 128); }, "outside", 113},
      {"truncated data", [] { return tensor_file("w", {32}, 0, 0, 100); }, "outside", 113},
      {"truncated tensor info", [] { return valid_prefix().str("w").u32(1).b; }, "shape", -1},
      {"file ends before data section", [] {
         Bytes b = valid_prefix();
         b.str("w").u32(1).u64(32).u32(0).u64(0);
         return b.b;
       }, "before the data section", -1},
  };
  return cases;
}

TEST(GgufHostile, EveryBadFileGivesOneClearError) {
  for (const auto& c : bad_cases()) {
    SCOPED_TRACE(c.name);
    auto r = parse(c.make());
    ASSERT_FALSE(r.ok()) << c.name << " parsed";
    std::string msg = r.status().to_string();
    EXPECT_EQ(msg.rfind("bad.gguf: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(c.field), std::string::npos) << msg;
    if (c.offset >= 0) {
      EXPECT_NE(msg.find(fmt::format("at byte {}:", c.offset)), std::string::npos) << msg;
    }
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(GgufHostile, AtLeastTwentyCases) { EXPECT_GE(bad_cases().size(), 20u); }

// Every prefix of a valid file is an error, never a crash (truncation at each byte).
TEST(GgufHostile, EveryTruncationIsAnError) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_strings("tokenizer.ggml.tokens", {"a", "bb", "ccc"});
  w.set_f32s("tokenizer.ggml.scores", {0.5f, 1.5f, 2.5f});
  ASSERT_TRUE(w.add_tensor("w", GgmlType::F32, {8, 2}, std::string(64, '\x02')).ok());
  std::string full = w.serialize();
  ASSERT_TRUE(parse(full).ok());
  for (size_t n = 0; n < full.size(); ++n) {
    auto r = parse(full.substr(0, n));
    // Cutting only padding after the last tensor's data is impossible here (data is last), so
    // every strict prefix must fail.
    EXPECT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
  }
}

TEST(GgufWriter, RoundTripsMetadataAndTensors) {
  GgufWriter w(3, 64);
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 30);
  w.set_f32("llama.rope.freq_base", 10000.0f);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_strings("tokenizer.ggml.tokens", {"<s>", "hello", "\xe4\xb8\x96"});
  w.set_i32s("tokenizer.ggml.token_type", {3, 1, 1});
  std::string q4(18 * 2, '\x11');
  ASSERT_TRUE(w.add_tensor("blk.0.w", GgmlType::Q4_0, {64}, q4).ok());
  ASSERT_TRUE(w.add_tensor("norm", GgmlType::F32, {4, 2}, std::string(32, '\x00')).ok());
  auto r = parse(w.serialize());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const GgufFile& f = *r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.architecture(), "llama");
  EXPECT_EQ(*f.get_u64("llama.block_count"), 30u);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.get_f64("llama.rope.freq_base")), 10000.0f);
  EXPECT_TRUE(*f.get_bool("tokenizer.ggml.add_bos_token"));
  auto toks = (*f.get_array("tokenizer.ggml.tokens"))->strings();
  ASSERT_TRUE(toks.ok());
  ASSERT_EQ(toks->size(), 3u);
  EXPECT_EQ((*toks)[2], "\xe4\xb8\x96");
  auto types = (*f.get_array("tokenizer.ggml.token_type"))->ints();
  ASSERT_TRUE(types.ok());
  EXPECT_EQ((*types)[0], 3);
  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensor* t = f.tensor("blk.0.w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, GgmlType::Q4_0);
  EXPECT_EQ(t->n_bytes, 36u);
  EXPECT_EQ(t->data[0], 0x11);
  EXPECT_EQ(f.tensor("norm")->shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(f.tensor("norm")->offset % 64, 0u);
  EXPECT_EQ(f.tensor("missing"), nullptr);
}

TEST(GgufFile, TypedGettersRefuseWrongTypes) {
  GgufWriter w;
  w.set_string("s", "text");
  w.set_i32("neg", -5);
  auto r = parse(w.serialize());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->get_u64("s").ok());
  EXPECT_FALSE(r->get_u64("neg").ok());
  EXPECT_EQ(*r->get_i64("neg"), -5);
  auto missing = r->get_u64("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*r->get_u64_or("nope", 9), 9u);
  EXPECT_NE(r->get_u64("s").status().to_string().find("metadata 's'"), std::string::npos);
}

TEST(GgufFile, Version2Parses) {
  Bytes b;
  b.header(0, 1, 2).str("general.architecture").u32(kStr).str("llama");
  auto r = parse(b.b);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->version(), 2u);
}

// The CLI turns each bad file into one line on stderr and exit code 1.
TEST(GgufHostile, LoomInfoExitsNonZero) {
  const char* env = std::getenv("LOOM_BIN");
  std::string bin = env ? env : LOOM_BINARY_DIR "/loom";
  ASSERT_TRUE(file_exists(bin)) << "loom binary missing at " << bin;
  std::string dir = ::testing::TempDir();
  int i = 0;
  for (const auto& c : bad_cases()) {
    std::string path = fmt::format("{}/loom_bad_{}.gguf", dir, i++);
    ASSERT_TRUE(write_file(path, c.make()).ok());
    std::string err = path + ".err";
    int rc = std::system(fmt::format("'{}' info '{}' >/dev/null 2>'{}'", bin, path, err).c_str());
    ASSERT_TRUE(WIFEXITED(rc)) << c.name;
    EXPECT_EQ(WEXITSTATUS(rc), 1) << c.name;
    auto text = read_file(err);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(std::count(text->begin(), text->end(), '\n'), 1) << c.name << ": " << *text;
    EXPECT_NE(text->find(path), std::string::npos) << *text;
  }
}

}  // namespace
}  // namespace loom::llm
