// Python's operators for template values: arithmetic (int overflow checked), string and list
// concatenation and repetition, Markup-aware +, % formatting, comparisons and membership.
#include <cmath>

#include "loom/text/jinja/builtins.h"
#include "loom/text/jinja/interp.h"

namespace loom::llm::jinja {

namespace {

Status unsupported(std::string_view op, const Value& a, const Value& b) {
  return invalid_argument("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

// Python's int ** int for a non-negative exponent, refusing results beyond 64 bits.
Result<Value> int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1)
      if (__builtin_mul_overflow(result, base, &result)) return overflow_error();
    exp >>= 1;
    if (exp && __builtin_mul_overflow(base, base, &base)) return overflow_error();
  }
  return Value(result);
}

}  // namespace

Result<Value> Interpreter::eval_binary(const Expr& e, const Value& a, const Value& b) {
  const std::string& op = e.name;
  if (op == "~") {
    std::string sa = py_str(a), sb = py_str(b);
    LOOM_RETURN_IF_ERROR(charge(sa.size() + sb.size()));
    return Value(sa + sb);
  }
  // str % Undefined is legal Python (Undefined looks like a mapping to the % operator).
  if (op == "%" && a.is_string() && b.is_undefined()) return percent_format(*this, a.str(), b);
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  if (a.is_number() && b.is_number()) {
    bool fl = a.is_float() || b.is_float();
    double x = a.as_double(), y = b.as_double();
    int64_t i = a.as_int(), j = b.as_int(), r = 0;
    if (op == "+") {
      if (fl) return Value(x + y);
      if (__builtin_add_overflow(i, j, &r)) return overflow_error();
      return Value(r);
    }
    if (op == "-") {
      if (fl) return Value(x - y);
      if (__builtin_sub_overflow(i, j, &r)) return overflow_error();
      return Value(r);
    }
    if (op == "*") {
      if (fl) return Value(x * y);
      if (__builtin_mul_overflow(i, j, &r)) return overflow_error();
      return Value(r);
    }
    if (op == "/") {
      if (y == 0) return invalid_argument("division by zero");
      return Value(x / y);
    }
    if (op == "//" || op == "%") {
      if (fl) {
        if (y == 0) return invalid_argument("{}", op == "%" ? "float modulo" : "float floor division by zero");
        // CPython's float floor division and modulo.
        double mod = std::fmod(x, y), div = (x - mod) / y;
        if (mod != 0) {
          if ((y < 0) != (mod < 0)) {
            mod += y;
            div -= 1.0;
          }
        } else {
          mod = std::copysign(0.0, y);
        }
        double floordiv;
        if (div != 0) {
          floordiv = std::floor(div);
          if (div - floordiv > 0.5) floordiv += 1.0;
        } else {
          floordiv = std::copysign(0.0, x / y);
        }
        return Value(op == "%" ? mod : floordiv);
      }
      if (j == 0) return invalid_argument("integer division or modulo by zero");
      if (i == INT64_MIN && j == -1) return overflow_error();
      int64_t q = i / j, m = i % j;
      if (m != 0 && ((m < 0) != (j < 0))) {
        q -= 1;
        m += j;
      }
      return Value(op == "%" ? m : q);
    }
    if (op == "**") {
      if (!fl && j >= 0) return int_pow(i, j);
      if (x == 0 && y < 0) return invalid_argument("0.0 cannot be raised to a negative power");
      return Value(std::pow(x, y));
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      LOOM_RETURN_IF_ERROR(charge(a.str().size() + b.str().size()));
      if (a.is_markup() || b.is_markup()) {  // Markup escapes what is added to it
        std::string l = a.is_markup() ? a.str() : html_escape(a.str());
        std::string r = b.is_markup() ? b.str() : html_escape(b.str());
        return Value::markup(l + r);
      }
      return Value(a.str() + b.str());
    }
    if (a.kind() == b.kind() && a.is_sequence()) {
      LOOM_RETURN_IF_ERROR(charge_work((a.items().size() + b.items().size()) * sizeof(Value)));
      ValueList items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return a.is_list() ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    if (a.is_string() || a.is_sequence())
      return invalid_argument("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a));
    return unsupported("+", a, b);
  }
  if (op == "*") {
    const Value* seq = (a.is_string() || a.is_sequence()) ? &a : (b.is_string() || b.is_sequence()) ? &b : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq && count->is_integral()) {
      int64_t n = std::max<int64_t>(0, count->as_int());
      if (seq->is_string()) {
        size_t unit = seq->str().size();
        if (unit && static_cast<uint64_t>(n) > limits_.max_output_bytes / unit + 1) return charge(limits_.max_output_bytes + 1);
        LOOM_RETURN_IF_ERROR(charge(unit * static_cast<size_t>(n)));
        std::string out;
        out.reserve(unit * static_cast<size_t>(n));
        for (int64_t k = 0; k < n; ++k) out += seq->str();
        return Value(std::move(out));
      }
      uint64_t unit = seq->items().size() * sizeof(Value);
      if (unit && static_cast<uint64_t>(n) > limits_.max_string_work / unit + 1)
        return charge_work(limits_.max_string_work + 1);
      LOOM_RETURN_IF_ERROR(charge_work(unit * static_cast<uint64_t>(n)));
      ValueList out;
      for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq->items().begin(), seq->items().end());
      return seq->is_list() ? Value::list(std::move(out)) : Value::tuple(std::move(out));
    }
    if (seq) return invalid_argument("can't multiply sequence by non-int of type '{}'", type_name(*count));
    return unsupported("*", a, b);
  }
  if (op == "%" && a.is_string()) return percent_format(*this, a.str(), b);
  return unsupported(op, a, b);
}

Result<Value> Interpreter::eval_compare(const Expr& e, const ScopePtr& scope) {
  LOOM_ASSIGN_OR_RETURN(Value left, eval(*e.args[0], scope));
  for (size_t i = 0; i < e.ops.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(Value right, eval(*e.args[i + 1], scope));
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==") {
      ok = py_equal(left, right);
    } else if (op == "!=") {
      ok = !py_equal(left, right);
    } else if (op == "in" || op == "notin") {
      if (right.is_string()) {
        if (!left.is_string())
          return invalid_argument("'in <string>' requires string as left operand, not {}", type_name(left));
        ok = right.str().find(left.str()) != std::string::npos;
      } else if (right.is_sequence()) {
        ok = false;
        for (const auto& item : right.items())
          if (py_equal(item, left)) {
            ok = true;
            break;
          }
      } else if (right.is_dict()) {
        ok = right.dict().find(left) != nullptr;
      } else if (right.is_undefined()) {
        ok = false;
      } else {
        return invalid_argument("argument of type '{}' is not iterable", type_name(right));
      }
      if (op == "notin") ok = !ok;
    } else {
      LOOM_ASSIGN_OR_RETURN(int c, py_compare(left, right, op));
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

}  // namespace loom::llm::jinja
