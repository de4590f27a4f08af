// JSON Schema to Grammar (see json_schema.h).
#include "loom/engine/json_schema.h"

#include <cmath>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace loom::llm {

using json = nlohmann::ordered_json;
using Seq = GrammarBuilder::Seq;
using B = GrammarBuilder;

namespace {

// Keywords that constrain values but that this compiler cannot enforce: refused, so a reply
// never silently breaks the schema.
const std::set<std::string, std::less<>>& unsupported_keywords() {
  static const std::set<std::string, std::less<>> k = {
      "pattern", "patternProperties", "not", "if", "then", "else", "uniqueItems", "multipleOf", "contains",
      "minContains", "maxContains", "dependentRequired", "dependentSchemas", "dependencies", "propertyNames",
      "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef", "additionalItems",
      "minProperties", "maxProperties", "prefixItems"};
  return k;
}

constexpr double kMaxBound = 1e15;  // integers beyond are not enumerated digit by digit

std::string digits(int64_t v) { return std::to_string(v); }

// Alternatives for the decimal strings of [lo, hi] that have the same number of digits n
// (lo and hi as strings of length n); leading zeros allowed here (the caller bounds the first
// digit).
void same_length(const std::string& lo, const std::string& hi, Seq prefix, std::vector<Seq>* out) {
  const size_t n = lo.size();
  if (n == 0) {
    out->push_back(std::move(prefix));
    return;
  }
  if (lo[0] == hi[0]) {
    prefix.push_back(B::byte(static_cast<uint8_t>(lo[0])));
    same_length(lo.substr(1), hi.substr(1), std::move(prefix), out);
    return;
  }
  const bool lo_zeros = lo.find_first_not_of('0', 1) == std::string::npos;
  const bool hi_nines = hi.find_first_not_of('9', 1) == std::string::npos;
  auto tail_any = [&](Seq s) {
    for (size_t k = 1; k < n; ++k) s.push_back(B::range('0', '9'));
    return s;
  };
  char first_any = lo_zeros ? lo[0] : static_cast<char>(lo[0] + 1);
  char last_any = hi_nines ? hi[0] : static_cast<char>(hi[0] - 1);
  if (!lo_zeros) {
    Seq p = prefix;
    p.push_back(B::byte(static_cast<uint8_t>(lo[0])));
    same_length(lo.substr(1), std::string(n - 1, '9'), std::move(p), out);
  }
  if (first_any <= last_any) {
    Seq p = prefix;
    p.push_back(B::range(static_cast<uint8_t>(first_any), static_cast<uint8_t>(last_any)));
    out->push_back(tail_any(std::move(p)));
  }
  if (!hi_nines) {
    Seq p = prefix;
    p.push_back(B::byte(static_cast<uint8_t>(hi[0])));
    same_length(std::string(n - 1, '0'), hi.substr(1), std::move(p), out);
  }
}

// Non-negative integers in [lo, hi] (hi < 0: unbounded, up to 16 digits), no leading zeros.
void nonneg_range(GrammarBuilder& b, int64_t lo, int64_t hi, Seq prefix, std::vector<Seq>* out) {
  const size_t lo_len = digits(lo).size();
  const size_t hi_len = hi < 0 ? 16 : digits(hi).size();
  for (size_t len = lo_len; len <= hi_len; ++len) {
    int64_t p10 = 1;
    for (size_t k = 1; k < len; ++k) p10 *= 10;
    const int64_t first = len == 1 ? 0 : p10;
    const int64_t last = p10 * 10 - 1;
    const int64_t a = std::max(lo, first);
    const int64_t z = hi < 0 ? last : std::min(hi, last);
    if (a > z) continue;
    if (hi < 0 && len > lo_len) {
      // Every number of this many digits and more.
      Seq s = prefix;
      s.push_back(B::range('1', '9'));
      Seq more = grammar_repeat(b, {B::range('0', '9')}, static_cast<int>(len - 1), 15);
      s.insert(s.end(), more.begin(), more.end());
      out->push_back(std::move(s));
      return;
    }
    same_length(digits(a), digits(z), prefix, out);
  }
}

bool annotation_keyword(std::string_view k) {
  static const std::set<std::string, std::less<>> a = {
      "title", "description", "$schema", "$id", "$comment", "default", "examples", "deprecated", "readOnly",
      "writeOnly", "$defs", "definitions", "format", "contentMediaType", "contentEncoding", "strict", "name"};
  return a.count(k) > 0;
}

// Whether a const/enum value has the schema's `type` (when it names one or several).
bool of_type(const json& v, const json& s) {
  auto t = s.find("type");
  if (t == s.end()) return true;
  auto one = [&](const json& name) {
    if (!name.is_string()) return true;
    const std::string n = name.get<std::string>();
    if (n == "string") return v.is_string();
    if (n == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (n == "number") return v.is_number();
    if (n == "boolean") return v.is_boolean();
    if (n == "null") return v.is_null();
    if (n == "object") return v.is_object();
    if (n == "array") return v.is_array();
    return true;
  };
  if (t->is_array()) {
    for (const json& n : *t)
      if (one(n)) return true;
    return false;
  }
  return one(*t);
}

}  // namespace

JsonGrammar::JsonGrammar(SchemaLimits limits) : lim_(limits) {}

uint32_t JsonGrammar::ws() {
  if (ws_ == UINT32_MAX) ws_ = b_.add("ws", {B::literal(" "), {}});
  return ws_;
}

uint32_t JsonGrammar::chr() {
  if (chr_ != UINT32_MAX) return chr_;
  // One character of a JSON string as UTF-8 bytes: anything but '"', '\' and controls, or an
  // escape.
  ByteSet plain;
  for (int c = 0x20; c < 0x80; ++c) plain.set(static_cast<size_t>(c));
  plain.reset('"');
  plain.reset('\\');
  ByteSet esc;
  for (char c : std::string_view("\"\\/bfnrt")) esc.set(static_cast<uint8_t>(c));
  ByteSet hex;
  for (char c : std::string_view("0123456789abcdefABCDEF")) hex.set(static_cast<uint8_t>(c));
  const B::Item cont = B::range(0x80, 0xBF);
  chr_ = b_.add("char", {{B::bytes(plain)},
                         {B::byte('\\'), B::bytes(esc)},
                         {B::byte('\\'), B::byte('u'), B::bytes(hex), B::bytes(hex), B::bytes(hex), B::bytes(hex)},
                         {B::range(0xC2, 0xDF), cont},
                         {B::range(0xE0, 0xEF), cont, cont},
                         {B::range(0xF0, 0xF4), cont, cont, cont}});
  return chr_;
}

uint32_t JsonGrammar::string() {
  if (str_ != UINT32_MAX) return str_;
  Seq s{B::byte('"')};
  Seq body = grammar_repeat(b_, {B::ref(chr())}, 0, -1);
  s.insert(s.end(), body.begin(), body.end());
  s.push_back(B::byte('"'));
  str_ = b_.add("string", {s});
  return str_;
}

uint32_t JsonGrammar::any_value() {
  if (any_ != UINT32_MAX) return any_;
  any_ = b_.declare("value");
  // number: -?(0|[1-9][0-9]{0,15})(\.[0-9]{1,16})?([eE][-+]?[0-9]{1,3})?
  if (num_ == UINT32_MAX) {
    std::vector<Seq> ints;
    nonneg_range(b_, 0, -1, {}, &ints);
    const uint32_t intpart = b_.add("int", ints);
    Seq frac{B::byte('.')};
    Seq fd = grammar_repeat(b_, {B::range('0', '9')}, 1, 16);
    frac.insert(frac.end(), fd.begin(), fd.end());
    const uint32_t fr = b_.add("frac", {frac, {}});
    ByteSet e;
    e.set('e');
    e.set('E');
    ByteSet sign;
    sign.set('-');
    sign.set('+');
    Seq ex{B::bytes(e)};
    Seq sg = grammar_repeat(b_, {B::bytes(sign)}, 0, 1);
    ex.insert(ex.end(), sg.begin(), sg.end());
    Seq ed = grammar_repeat(b_, {B::range('0', '9')}, 1, 3);
    ex.insert(ex.end(), ed.begin(), ed.end());
    const uint32_t exp = b_.add("exp", {ex, {}});
    const uint32_t minus = b_.add("minus", {B::literal("-"), {}});
    num_ = b_.add("number", {{B::ref(minus), B::ref(intpart), B::ref(fr), B::ref(exp)}});
  }
  const uint32_t arr = b_.declare("array");
  {
    Seq more{B::byte(','), B::ref(ws()), B::ref(any_)};
    Seq items{B::ref(any_)};
    Seq rest = grammar_repeat(b_, more, 0, -1);
    items.insert(items.end(), rest.begin(), rest.end());
    const uint32_t list = b_.add("items", {items, {}});
    b_.define(arr, {{B::byte('['), B::ref(list), B::byte(']')}});
  }
  b_.define(any_, {{B::ref(any_object())}, {B::ref(arr)}, {B::ref(string())}, {B::ref(num_)},
                   B::literal("true"), B::literal("false"), B::literal("null")});
  return any_;
}

uint32_t JsonGrammar::any_object() {
  if (obj_ != UINT32_MAX) return obj_;
  obj_ = b_.declare("object");
  const uint32_t value = any_value();
  Seq kv{B::ref(string()), B::byte(':'), B::ref(ws()), B::ref(value)};
  Seq more{B::byte(','), B::ref(ws())};
  more.insert(more.end(), kv.begin(), kv.end());
  Seq members = kv;
  Seq rest = grammar_repeat(b_, more, 0, -1);
  members.insert(members.end(), rest.begin(), rest.end());
  const uint32_t list = b_.add("members", {members, {}});
  b_.define(obj_, {{B::byte('{'), B::ref(list), B::byte('}')}});
  return obj_;
}

// The grammar's size so far against the build limits, checked as it grows (a schema that
// multiplies work, such as anyOf branches that each repeat a large sibling, stops early).
Status JsonGrammar::check_size() const {
  const GrammarLimits g;
  if (b_.n_rules() > g.max_rules || b_.n_items() > g.max_elems)
    return invalid_argument("the schema is too large (its grammar passes {} rules or {} elements)", g.max_rules,
                            g.max_elems);
  return Status();
}

Result<uint32_t> JsonGrammar::literal(const json& value, const std::string& where) {
  const std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > lim_.max_literal)
    return invalid_argument("at {}: a const/enum value is too long ({} bytes; at most {})", where, text.size(),
                            lim_.max_literal);
  return b_.add("literal", {B::literal(text)});
}

Result<uint32_t> JsonGrammar::schema(const json& s, const json& root) {
  root_ = &root;
  refs_.clear();  // $refs are relative to this document
  return compile(s, "#", 0);
}

namespace {

// allOf's members merged into one schema: properties and required united, other keywords
// must agree.
Result<json> merge_all_of(const json& s, const std::string& where) {
  json merged = s;
  merged.erase("allOf");
  for (const json& part : s["allOf"]) {
    if (!part.is_object()) return invalid_argument("at {}: allOf members must be objects", where);
    for (const auto& [k, v] : part.items()) {
      if (k == "properties" && merged.contains(k) && merged[k].is_object() && v.is_object()) {
        for (const auto& [pk, pv] : v.items()) merged[k][pk] = pv;
      } else if (k == "required" && merged.contains(k) && merged[k].is_array() && v.is_array()) {
        for (const auto& r : v) merged[k].push_back(r);
      } else if (merged.contains(k) && merged[k] != v && k != "description" && k != "title") {
        return invalid_argument("at {}: allOf members disagree on '{}' (not supported)", where, k);
      } else {
        merged[k] = v;
      }
    }
  }
  return merged;
}

}  // namespace

Result<uint32_t> JsonGrammar::compile(const json& s, const std::string& where, int depth) {
  if (depth > lim_.max_depth) return invalid_argument("at {}: the schema nests deeper than {} levels", where, lim_.max_depth);
  if (++nodes_ > lim_.max_nodes) return invalid_argument("the schema is too large (more than {} subschemas)", lim_.max_nodes);
  LOOM_RETURN_IF_ERROR(check_size());
  if (s.is_boolean()) {
    if (s.get<bool>()) return any_value();
    return invalid_argument("at {}: the schema 'false' admits no value", where);
  }
  if (!s.is_object()) return invalid_argument("at {}: a schema must be an object or a boolean", where);
  for (const auto& [k, v] : s.items())
    if (unsupported_keywords().count(k)) return invalid_argument("at {}: '{}' is not supported in schemas", where, k);

  if (auto it = s.find("$ref"); it != s.end()) {
    if (!it->is_string()) return invalid_argument("at {}: '$ref' must be a string", where);
    const std::string ref = it->get<std::string>();
    if (auto hit = refs_.find(ref); hit != refs_.end()) return hit->second;
    if (ref.empty() || ref[0] != '#')
      return invalid_argument("at {}: only local $ref ('#/$defs/NAME') is supported (got '{}')", where, ref.substr(0, 80));
    json::json_pointer ptr;
    try {
      ptr = json::json_pointer(ref.substr(1));
    } catch (const std::exception&) {
      return invalid_argument("at {}: '$ref' '{}' is not a JSON pointer", where, ref.substr(0, 80));
    }
    if (!root_->contains(ptr)) return invalid_argument("at {}: '$ref' '{}' points at nothing", where, ref.substr(0, 80));
    // Declared before it is compiled, so a recursive schema refers to its own rule.
    const uint32_t r = b_.declare("ref");
    refs_[ref] = r;
    LOOM_ASSIGN_OR_RETURN(uint32_t target, compile(root_->at(ptr), ref, depth + 1));
    b_.define(r, {{B::ref(target)}});
    return r;
  }
  if (auto it = s.find("allOf"); it != s.end()) {
    if (!it->is_array() || it->empty()) return invalid_argument("at {}: 'allOf' must be a non-empty array", where);
    LOOM_ASSIGN_OR_RETURN(json merged, merge_all_of(s, where));
    return compile(merged, where, depth + 1);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    if (!it->is_array() || it->empty()) return invalid_argument("at {}: '{}' must be a non-empty array", where, key);
    if (it->size() > lim_.max_enum) return invalid_argument("at {}: '{}' has too many members", where, key);
    json rest = s;
    rest.erase(key);
    bool siblings = false;  // validation keywords beside anyOf apply to every branch
    for (const auto& [k, v] : rest.items()) siblings = siblings || !annotation_keyword(k);
    std::vector<Seq> alts;
    for (size_t i = 0; i < it->size(); ++i) {
      json branch = (*it)[i];
      if (siblings && branch.is_object()) {
        json merged = rest;
        merged.update(branch);
        branch = std::move(merged);
      }
      LOOM_ASSIGN_OR_RETURN(uint32_t r, compile(branch, fmt::format("{}/{}/{}", where, key, i), depth + 1));
      alts.push_back({B::ref(r)});
    }
    // oneOf is compiled as anyOf: a value matching two members is not excluded.
    return b_.add(key, std::move(alts));
  }
  if (auto it = s.find("const"); it != s.end()) {
    // A value of another type admits nothing: an empty rule (the whole schema is refused only
    // when nothing else is left, e.g. not when it is one branch of an anyOf).
    if (!of_type(*it, s)) return b_.add("none", {});
    return literal(*it, where);
  }
  if (auto it = s.find("enum"); it != s.end()) {
    if (!it->is_array()) return invalid_argument("at {}: 'enum' must be an array", where);
    if (it->size() > lim_.max_enum)
      return invalid_argument("at {}: 'enum' has {} values (at most {})", where, it->size(), lim_.max_enum);
    std::vector<Seq> alts;
    size_t kept = 0;
    for (const json& v : *it) kept += of_type(v, s);
    if (kept == 0) return b_.add("none", {});
    for (const json& v : *it) {
      if (!of_type(v, s)) continue;
      LOOM_ASSIGN_OR_RETURN(uint32_t r, literal(v, where));
      alts.push_back({B::ref(r)});
      LOOM_RETURN_IF_ERROR(check_size());
    }
    return b_.add("enum", std::move(alts));
  }

  std::vector<std::string> types;
  if (auto it = s.find("type"); it != s.end()) {
    if (it->is_string()) {
      types.push_back(it->get<std::string>());
    } else if (it->is_array() && !it->empty() && it->size() <= 7) {
      for (const json& t : *it) {
        if (!t.is_string()) return invalid_argument("at {}: 'type' must be a string or an array of strings", where);
        types.push_back(t.get<std::string>());
      }
    } else {
      return invalid_argument("at {}: 'type' must be a string or a non-empty array of strings", where);
    }
  } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
    types.push_back("object");
  } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
    types.push_back("array");
  } else if (s.contains("minLength") || s.contains("maxLength")) {
    types.push_back("string");
  } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
             s.contains("exclusiveMaximum")) {
    types.push_back("number");
  } else {
    return any_value();
  }
  if (auto n = s.find("nullable"); n != s.end() && n->is_boolean() && n->get<bool>()) types.push_back("null");

  std::vector<Seq> alts;
  for (const std::string& t : types) {
    uint32_t r;
    if (t == "object") {
      LOOM_ASSIGN_OR_RETURN(r, compile_object(s, where, depth));
    } else if (t == "array") {
      LOOM_ASSIGN_OR_RETURN(r, compile_array(s, where, depth));
    } else if (t == "string") {
      LOOM_ASSIGN_OR_RETURN(r, compile_string(s, where));
    } else if (t == "integer" || t == "number") {
      LOOM_ASSIGN_OR_RETURN(r, compile_number(s, where, t == "integer"));
    } else if (t == "boolean") {
      r = b_.add("boolean", {B::literal("true"), B::literal("false")});
    } else if (t == "null") {
      r = b_.add("null", {B::literal("null")});
    } else {
      return invalid_argument("at {}: unknown type '{}'", where, t.substr(0, 40));
    }
    alts.push_back({B::ref(r)});
  }
  if (alts.size() == 1) return alts[0][0].rule;
  return b_.add("types", std::move(alts));
}

Result<uint32_t> JsonGrammar::compile_object(const json& s, const std::string& where, int depth) {
  const json empty = json::object();
  auto pit = s.find("properties");
  if (pit != s.end() && !pit->is_object()) return invalid_argument("at {}: 'properties' must be an object", where);
  const json& props = pit == s.end() ? empty : *pit;
  if (props.size() > lim_.max_properties)
    return invalid_argument("at {}: too many properties ({}; at most {})", where, props.size(), lim_.max_properties);
  std::set<std::string> required;
  if (auto r = s.find("required"); r != s.end()) {
    if (!r->is_array()) return invalid_argument("at {}: 'required' must be an array of strings", where);
    for (const json& n : *r) {
      if (!n.is_string()) return invalid_argument("at {}: 'required' must be an array of strings", where);
      required.insert(n.get<std::string>());
    }
  }
  const json* extra = nullptr;  // additionalProperties' schema (null: none allowed / not used)
  bool extra_allowed = true;
  if (auto a = s.find("additionalProperties"); a != s.end()) {
    if (a->is_boolean()) extra_allowed = a->get<bool>();
    else if (a->is_object()) extra = &*a;
    else return invalid_argument("at {}: 'additionalProperties' must be a boolean or a schema", where);
  }
  // Properties: the declared ones in order, then required names that are not declared.
  struct Prop {
    std::string name;
    uint32_t value;
    bool required;
  };
  std::vector<Prop> list;
  for (const auto& [name, sub] : props.items()) {
    LOOM_ASSIGN_OR_RETURN(uint32_t v, compile(sub, where + "/properties/" + name, depth + 1));
    list.push_back({name, v, required.count(name) > 0});
  }
  for (const std::string& name : required) {
    if (props.contains(name)) continue;
    if (!extra_allowed)
      return invalid_argument("at {}: property '{}' is required but additionalProperties is false", where,
                              name.substr(0, 80));
    uint32_t v;
    if (extra) {
      LOOM_ASSIGN_OR_RETURN(v, compile(*extra, where + "/additionalProperties", depth + 1));
    } else {
      v = any_value();
    }
    list.push_back({name, v, true});
  }
  if (list.empty() && (extra || (extra_allowed && pit == s.end()))) {
    // A map: any keys, values of additionalProperties' schema (or any).
    uint32_t v;
    if (extra) {
      LOOM_ASSIGN_OR_RETURN(v, compile(*extra, where + "/additionalProperties", depth + 1));
    } else {
      return any_object();
    }
    Seq kv{B::ref(string()), B::byte(':'), B::ref(ws()), B::ref(v)};
    Seq more{B::byte(','), B::ref(ws())};
    more.insert(more.end(), kv.begin(), kv.end());
    Seq members = kv;
    Seq rest = grammar_repeat(b_, more, 0, -1);
    members.insert(members.end(), rest.begin(), rest.end());
    const uint32_t m = b_.add("members", {members, {}});
    return b_.add("map", {{B::byte('{'), B::ref(m), B::byte('}')}});
  }
  // after[i][first]: properties i.. given whether none has been written yet. Built from the end.
  uint32_t next_first = b_.add("props-end", {{}});
  uint32_t next_more = next_first;
  for (size_t i = list.size(); i-- > 0;) {
    json key = list[i].name;
    Seq kv = B::literal(key.dump(-1, ' ', false, json::error_handler_t::replace));
    kv.push_back(B::byte(':'));
    kv.push_back(B::ref(ws()));
    kv.push_back(B::ref(list[i].value));
    Seq with_comma{B::byte(','), B::ref(ws())};
    with_comma.insert(with_comma.end(), kv.begin(), kv.end());
    Seq first_emit = kv;
    first_emit.push_back(B::ref(next_more));
    with_comma.push_back(B::ref(next_more));
    std::vector<Seq> f{first_emit}, m{with_comma};
    if (!list[i].required) {
      f.push_back({B::ref(next_first)});
      m.push_back({B::ref(next_more)});
    }
    next_first = b_.add("props", std::move(f));
    next_more = b_.add("props", std::move(m));
  }
  return b_.add("object", {{B::byte('{'), B::ref(next_first), B::byte('}')}});
}

Result<uint32_t> JsonGrammar::compile_array(const json& s, const std::string& where, int depth) {
  int64_t lo = 0, hi = -1;
  auto count = [&](const char* key, int64_t* out) -> Status {
    auto it = s.find(key);
    if (it == s.end()) return Status();
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      return invalid_argument("at {}: '{}' must be a non-negative integer", where, key);
    *out = it->get<int64_t>();
    return Status();
  };
  LOOM_RETURN_IF_ERROR(count("minItems", &lo));
  LOOM_RETURN_IF_ERROR(count("maxItems", &hi));
  if (hi >= 0 && lo > hi) return invalid_argument("at {}: minItems {} is greater than maxItems {}", where, lo, hi);
  if (lo > lim_.max_items) return invalid_argument("at {}: minItems {} is above the limit {}", where, lo, lim_.max_items);
  // At most max_items beyond the minimum are unrolled; any count in [lo, hi] is valid.
  if (hi > lo + lim_.max_items) hi = lo + lim_.max_items;
  uint32_t item;
  if (auto it = s.find("items"); it != s.end()) {
    if (it->is_array()) return invalid_argument("at {}: 'items' as an array (tuples) is not supported", where);
    if (it->is_boolean() && !it->get<bool>()) {
      if (lo > 0) return invalid_argument("at {}: items false with minItems > 0 admits no value", where);
      return b_.add("empty-array", {B::literal("[]")});
    }
    LOOM_ASSIGN_OR_RETURN(item, compile(*it, where + "/items", depth + 1));
  } else {
    item = any_value();
  }
  if (hi == 0) return b_.add("empty-array", {B::literal("[]")});
  // [ item (, item){lo-1, hi-1} ] or [] when lo == 0.
  Seq more{B::byte(','), B::ref(ws()), B::ref(item)};
  Seq list{B::ref(item)};
  Seq rest = grammar_repeat(b_, more, static_cast<int>(std::max<int64_t>(lo - 1, 0)),
                            hi < 0 ? -1 : static_cast<int>(hi - 1));
  list.insert(list.end(), rest.begin(), rest.end());
  std::vector<Seq> body{list};
  if (lo == 0) body.push_back({});
  const uint32_t items = b_.add("items", std::move(body));
  return b_.add("array", {{B::byte('['), B::ref(items), B::byte(']')}});
}

Result<uint32_t> JsonGrammar::compile_string(const json& s, const std::string& where) {
  int64_t lo = 0, hi = -1;
  for (const char* key : {"minLength", "maxLength"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      return invalid_argument("at {}: '{}' must be a non-negative integer", where, key);
    (key[1] == 'i' ? lo : hi) = it->get<int64_t>();
  }
  if (hi >= 0 && lo > hi) return invalid_argument("at {}: minLength {} is greater than maxLength {}", where, lo, hi);
  if (lo > lim_.max_length) return invalid_argument("at {}: minLength {} is above the limit {}", where, lo, lim_.max_length);
  if (lo == 0 && hi < 0) return string();
  if (hi > lo + lim_.max_length) hi = lo + lim_.max_length;
  Seq seq{B::byte('"')};
  Seq body = grammar_repeat(b_, {B::ref(chr())}, static_cast<int>(lo), hi < 0 ? -1 : static_cast<int>(hi));
  seq.insert(seq.end(), body.begin(), body.end());
  seq.push_back(B::byte('"'));
  return b_.add("string", {seq});
}

Result<uint32_t> JsonGrammar::compile_number(const json& s, const std::string& where, bool integer) {
  // Bounds as integers: values (integers, or integer part plus fraction) are kept inside
  // [lo_i, hi_i], a sub-range of the schema's.
  bool has_lo = false, has_hi = false;
  double lo = 0, hi = 0;
  bool lo_ex = false, hi_ex = false;
  // minimum / maximum, then the exclusive forms where they are at least as tight.
  auto bound = [&](const char* key, bool is_min, bool exclusive, bool* has, double* v, bool* ex) -> Status {
    auto it = s.find(key);
    if (it == s.end() || it->is_null()) return Status();
    if (exclusive && it->is_boolean()) {  // draft 4: a flag on minimum/maximum
      if (it->get<bool>()) *ex = true;
      return Status();
    }
    if (!it->is_number()) return invalid_argument("at {}: '{}' must be a number", where, key);
    const double x = it->get<double>();
    if (!std::isfinite(x) || std::fabs(x) > kMaxBound)
      return invalid_argument("at {}: '{}' beyond +-1e15 is not supported", where, key);
    if (*has && (is_min ? x < *v : x > *v)) return Status();
    *has = true;
    *v = x;
    *ex = exclusive;
    return Status();
  };
  LOOM_RETURN_IF_ERROR(bound("minimum", true, false, &has_lo, &lo, &lo_ex));
  LOOM_RETURN_IF_ERROR(bound("exclusiveMinimum", true, true, &has_lo, &lo, &lo_ex));
  LOOM_RETURN_IF_ERROR(bound("maximum", false, false, &has_hi, &hi, &hi_ex));
  LOOM_RETURN_IF_ERROR(bound("exclusiveMaximum", false, true, &has_hi, &hi, &hi_ex));
  if (has_lo && has_hi && (lo > hi || (lo == hi && (lo_ex || hi_ex))))
    return invalid_argument("at {}: the bounds admit no value (minimum {} above maximum {})", where, lo, hi);
  if (!has_lo && !has_hi && !integer) {
    any_value();
    return num_;
  }
  const int64_t li = !has_lo ? INT64_MIN : static_cast<int64_t>(lo_ex ? std::floor(lo) + 1 : std::ceil(lo));
  const int64_t hi_i = !has_hi ? INT64_MAX : static_cast<int64_t>(hi_ex ? std::ceil(hi) - 1 : std::floor(hi));
  std::vector<Seq> alts;
  // Integers in [a, b] (INT64_MIN / INT64_MAX: unbounded), with `suffix` after each.
  auto ints = [&](int64_t a, int64_t b, const Seq& suffix) {
    if (a > b) return;
    std::vector<Seq> part;
    if (b >= 0) nonneg_range(b_, std::max<int64_t>(a, 0), b == INT64_MAX ? -1 : b, {}, &part);
    if (a < 0) {
      // -v for v in [max(1, -b), -a]
      const int64_t vlo = std::max<int64_t>(1, b == INT64_MAX ? 1 : -std::min<int64_t>(b, -1));
      const int64_t vhi = a == INT64_MIN ? -1 : -a;
      nonneg_range(b_, vlo, vhi, {B::byte('-')}, &part);
    }
    for (auto& p : part) {
      p.insert(p.end(), suffix.begin(), suffix.end());
      alts.push_back(std::move(p));
    }
  };
  ints(li, hi_i, {});
  if (!integer) {
    Seq frac{B::byte('.')};
    Seq fd = grammar_repeat(b_, {B::range('0', '9')}, 1, 6);
    frac.insert(frac.end(), fd.begin(), fd.end());
    // x.f in [x, x+1) for x in [max(li, 0), hi_i - 1]
    std::vector<Seq> pos;
    const int64_t plo = std::max<int64_t>(li, 0);
    const int64_t phi = hi_i == INT64_MAX ? INT64_MAX : hi_i - 1;
    if (plo <= phi) {
      nonneg_range(b_, plo, phi == INT64_MAX ? -1 : phi, {}, &pos);
      for (auto& p : pos) {
        p.insert(p.end(), frac.begin(), frac.end());
        alts.push_back(std::move(p));
      }
    }
    // -(y.f) in (-(y+1), -y] for y in [max(0, -hi_i), -li - 1]
    const int64_t ylo = hi_i == INT64_MAX ? 0 : std::max<int64_t>(0, -hi_i);
    const int64_t yhi = li == INT64_MIN ? INT64_MAX : -li - 1;
    if (ylo <= yhi) {
      std::vector<Seq> neg;
      nonneg_range(b_, ylo, yhi == INT64_MAX ? -1 : yhi, {B::byte('-')}, &neg);
      for (auto& p : neg) {
        p.insert(p.end(), frac.begin(), frac.end());
        alts.push_back(std::move(p));
      }
    }
  }
  if (alts.empty())
    return invalid_argument("at {}: the bounds [{}, {}] are narrower than this server can enforce", where, lo, hi);
  return b_.add(integer ? "integer" : "number", std::move(alts));
}

Result<std::shared_ptr<const Grammar>> json_schema_grammar(const json& schema, const SchemaLimits& limits) {
  JsonGrammar jg(limits);
  LOOM_ASSIGN_OR_RETURN(uint32_t root, jg.schema(schema, schema));
  return jg.build(root);
}

Result<std::shared_ptr<const Grammar>> json_schema_grammar_text(std::string_view text, const SchemaLimits& limits) {
  json schema = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return invalid_argument("the schema is not valid JSON");
  try {
    return json_schema_grammar(schema, limits);
  } catch (const std::exception& e) {
    return invalid_argument("the schema could not be compiled: {}", e.what());
  }
}

std::shared_ptr<const Grammar> json_object_grammar() {
  static const std::shared_ptr<const Grammar> g = [] {
    JsonGrammar jg;
    return jg.build(jg.any_object()).value();
  }();
  return g;
}

}  // namespace loom::llm
