// JSON Schema to Grammar: the grammar of JSON texts that a schema validates, for constrained
// sampling (response_format json_schema, forced tool calls). Supported: type (one or a list),
// properties / required / additionalProperties, items / minItems / maxItems, enum, const,
// minLength / maxLength, minimum / maximum / exclusiveMinimum / exclusiveMaximum (integers
// exactly; numbers as integer steps with a fraction where the bounds allow), anyOf / oneOf,
// allOf (merged), local $ref (#/$defs/..., #/definitions/..., #), nullable. Annotations (title,
// description, default, examples, format...) are ignored. Validation keywords it cannot enforce
// (pattern, not, if/then/else, uniqueItems, multipleOf, ...) are refused, as are schemas past
// the limits below. Properties come out in the schema's order; objects carry only declared
// properties; whitespace is at most one space after ':' and ','.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json_fwd.hpp>

#include "loom/base/status.h"
#include "loom/engine/grammar.h"

namespace loom::llm {

struct SchemaLimits {
  size_t max_nodes = 2000;       // subschemas visited (each $ref counted once)
  int max_depth = 32;            // nesting of subschemas
  size_t max_enum = 512;         // values of one enum
  size_t max_properties = 256;   // properties of one object
  int max_items = 256;           // minItems, and items unrolled for maxItems
  int max_length = 1024;         // minLength, and characters unrolled for maxLength
  size_t max_literal = 1024;     // bytes of one const/enum value
};

// Builds the grammar of values of one or more schemas into a GrammarBuilder that the caller may
// extend (a tool-call wrapper around the arguments' value, say). Not thread-safe.
class JsonGrammar {
 public:
  explicit JsonGrammar(SchemaLimits limits = {});
  GrammarBuilder& builder() { return b_; }

  // The rule of values `schema` validates; `root` is the document its $refs point into.
  // kInvalidArgument names the problem ("at /properties/x: 'pattern' is not supported").
  Result<uint32_t> schema(const nlohmann::ordered_json& schema, const nlohmann::ordered_json& root);
  uint32_t any_value();
  uint32_t any_object();
  uint32_t string();       // a JSON string
  uint32_t ws();           // an optional single space
  Result<std::shared_ptr<const Grammar>> build(uint32_t root) { return b_.build(root); }

 private:
  Result<uint32_t> compile(const nlohmann::ordered_json& s, const std::string& where, int depth);
  Result<uint32_t> compile_object(const nlohmann::ordered_json& s, const std::string& where, int depth);
  Result<uint32_t> compile_array(const nlohmann::ordered_json& s, const std::string& where, int depth);
  Result<uint32_t> compile_string(const nlohmann::ordered_json& s, const std::string& where);
  Result<uint32_t> compile_number(const nlohmann::ordered_json& s, const std::string& where, bool integer);
  Result<uint32_t> literal(const nlohmann::ordered_json& value, const std::string& where);
  uint32_t chr();
  Status check_size() const;

  SchemaLimits lim_;
  GrammarBuilder b_;
  const nlohmann::ordered_json* root_ = nullptr;
  size_t nodes_ = 0;
  std::unordered_map<std::string, uint32_t> refs_;
  uint32_t any_ = UINT32_MAX, obj_ = UINT32_MAX, str_ = UINT32_MAX, chr_ = UINT32_MAX, ws_ = UINT32_MAX;
  uint32_t num_ = UINT32_MAX;
};

// The grammar of values of `schema_text` (JSON text of a schema).
Result<std::shared_ptr<const Grammar>> json_schema_grammar_text(std::string_view schema_text, const SchemaLimits& limits = {});
Result<std::shared_ptr<const Grammar>> json_schema_grammar(const nlohmann::ordered_json& schema, const SchemaLimits& limits = {});
// Any JSON object (response_format json_object).
std::shared_ptr<const Grammar> json_object_grammar();

}  // namespace loom::llm
