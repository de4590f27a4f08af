// libFuzzer target: arbitrary bytes as a JSON schema through the schema-to-grammar compiler and,
// when it compiles, the same bytes walked through the grammar's matcher one by one; the bytes
// also go through the GBNF reader. Any crash, sanitizer report, hang or unbounded allocation is
// a bug; a refused schema or grammar (an error value) is the expected outcome for most inputs.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/engine/grammar.h"
#include "loom/engine/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loom::llm;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto walk = [&](const std::shared_ptr<const Grammar>& g) {
    GrammarMatcher m(g);
    for (char c : text) m.accept_bytes(std::string_view(&c, 1));
    (void)m.can_end();
  };
  auto g = json_schema_grammar_text(text);
  if (g.ok()) walk(g.value());
  auto gb = parse_gbnf(text);
  if (gb.ok()) walk(gb.value());
  return 0;
}
