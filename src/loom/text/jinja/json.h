// JSON in and out of template values: parsing (messages, tools) keeps object key order, and
// serialization reproduces Python's json.dumps byte for byte (what HF's tojson filter calls).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/text/jinja/value.h"

namespace loom::llm::jinja {

// Parses JSON text; objects become dicts in file order, integers ints, other numbers floats.
Result<Value> parse_json(std::string_view text);

// Options of Python's json.dumps as HF's tojson filter exposes them.
struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: single line
  std::optional<std::string> item_separator;  // default ", " (or "," with indent)
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
};

// Fails like Python for values JSON cannot hold (Undefined, namespaces, callables, bad keys).
Result<std::string> to_json(const Value& v, const JsonOptions& options = {});

}  // namespace loom::llm::jinja
