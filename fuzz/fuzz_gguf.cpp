// libFuzzer target: arbitrary bytes through the GGUF parser and every accessor `loom info` uses.
// Any crash, sanitizer report, hang or unbounded allocation is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loom::llm;
  auto mapping = loom::MappedFile::from_bytes(std::string_view(reinterpret_cast<const char*>(data), size));
  auto file = GgufFile::parse(std::move(mapping), "fuzz.gguf");
  if (!file.ok()) {
    (void)file.status().to_string();
    return 0;
  }
  for (const auto& [key, value] : file->metadata()) {
    (void)value.to_string();
    if (auto arr = value.as_array(); arr.ok()) {
      (void)(*arr)->strings();
      (void)(*arr)->floats();
      (void)(*arr)->ints();
    }
  }
  volatile uint8_t sink = 0;
  for (const auto& t : file->tensors()) {
    (void)t.n_elements();
    if (t.n_bytes) sink = sink ^ t.data[0] ^ t.data[t.n_bytes - 1];  // must be inside the file
  }
  return 0;
}
