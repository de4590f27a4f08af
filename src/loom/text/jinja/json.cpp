// JSON conversion for template values (Python json.dumps layout and escaping).
#include "loom/text/jinja/json.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "loom/text/unicode.h"

namespace loom::llm::jinja {
namespace {

constexpr int kMaxJsonDepth = 256;

Result<Value> from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxJsonDepth) return invalid_argument("JSON nested deeper than {} levels", kMaxJsonDepth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) {
        LOOM_ASSIGN_OR_RETURN(Value item, from_json(e, depth + 1));
        items.push_back(std::move(item));
      }
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict d;
      for (const auto& [k, v] : j.items()) {
        LOOM_ASSIGN_OR_RETURN(Value item, from_json(v, depth + 1));
        d.append_new(Value(k), std::move(item));  // JSON object keys are unique
      }
      return Value::dict(std::move(d));
    }
    default: return Value::none();
  }
}

void escape_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t cp : unicode::decode_utf8(s)) {
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20 || (ensure_ascii && cp > 0x7E)) {
      if (cp > 0xFFFF) {  // UTF-16 surrogate pair, as Python writes it
        char32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
      }
    } else {
      unicode::append_utf8(out, cp);
    }
  }
  out.push_back('"');
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return format_float(d);
}

class Writer {
 public:
  explicit Writer(const JsonOptions& o) : o_(o) {
    item_sep_ = o.item_separator.value_or(o.indent ? "," : ", ");
    key_sep_ = o.key_separator.value_or(": ");
  }

  Status write(const Value& v, int depth) {
    if (depth > kMaxJsonDepth) return invalid_argument("tojson: value nested too deeply");
    switch (v.kind()) {
      case Value::Kind::kNone: out_ += "null"; return {};
      case Value::Kind::kBool: out_ += v.as_bool() ? "true" : "false"; return {};
      case Value::Kind::kInt: out_ += std::to_string(v.as_int()); return {};
      case Value::Kind::kFloat: out_ += float_json(v.as_double()); return {};
      case Value::Kind::kString: escape_string(out_, v.str(), o_.ensure_ascii); return {};
      case Value::Kind::kList:
      case Value::Kind::kTuple: {
        const auto& items = v.items();
        if (items.empty()) {
          out_ += "[]";
          return {};
        }
        out_ += "[";
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out_ += item_sep_;
          newline(depth + 1);
          LOOM_RETURN_IF_ERROR(write(items[i], depth + 1));
        }
        newline(depth);
        out_ += "]";
        return {};
      }
      case Value::Kind::kDict: return write_dict(v, depth);
      default:
        return invalid_argument("Object of type {} is not JSON serializable", type_name(v));
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int depth) {
    if (!o_.indent) return;
    out_ += "\n";
    for (int i = 0; i < depth; ++i) out_ += *o_.indent;
  }

  Result<std::string> key_text(const Value& k) {
    switch (k.kind()) {
      case Value::Kind::kString: return k.str();
      case Value::Kind::kNone: return std::string("null");
      case Value::Kind::kBool: return std::string(k.as_bool() ? "true" : "false");
      case Value::Kind::kInt: return std::to_string(k.as_int());
      case Value::Kind::kFloat: return float_json(k.as_double());
      default:
        return invalid_argument("keys must be str, int, float, bool or None, not {}", type_name(k));
    }
  }

  Status write_dict(const Value& v, int depth) {
    std::vector<const std::pair<Value, Value>*> items;
    for (const auto& kv : v.dict().items()) items.push_back(&kv);
    if (items.empty()) {
      out_ += "{}";
      return {};
    }
    if (o_.sort_keys) {
      Status err;
      std::stable_sort(items.begin(), items.end(), [&](auto* a, auto* b) {
        auto c = py_compare(a->first, b->first);
        if (!c.ok()) {
          if (err.ok()) err = c.status();
          return false;
        }
        return *c < 0;
      });
      LOOM_RETURN_IF_ERROR(err);
    }
    out_ += "{";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out_ += item_sep_;
      newline(depth + 1);
      LOOM_ASSIGN_OR_RETURN(std::string key, key_text(items[i]->first));
      escape_string(out_, key, o_.ensure_ascii);
      out_ += key_sep_;
      LOOM_RETURN_IF_ERROR(write(items[i]->second, depth + 1));
    }
    newline(depth);
    out_ += "}";
    return {};
  }

  const JsonOptions& o_;
  std::string item_sep_, key_sep_;
  std::string out_;
};

}  // namespace

Result<Value> parse_json(std::string_view text) {
  auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("invalid JSON");
  return from_json(j, 0);
}

Result<std::string> to_json(const Value& v, const JsonOptions& options) {
  Writer w(options);
  LOOM_RETURN_IF_ERROR(w.write(v, 0));
  return w.take();
}

}  // namespace loom::llm::jinja
