// Builtin filters, tests, global functions and methods of str/dict/list (the sandboxed subset
// of Python that jinja2's ImmutableSandboxedEnvironment allows).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/text/jinja/value.h"

namespace loom::llm::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);

// Errors carry no source position; the interpreter adds the caller's.
Result<Value> apply_filter(Interpreter& in, std::string_view name, const Value& input, CallArgs& args);
Result<bool> apply_test(Interpreter& in, std::string_view name, const Value& input, CallArgs& args);

// Global functions: range, namespace, dict, joiner, cycler, raise_exception, strftime_now.
ValueDict builtin_globals();

// obj.name for str/dict/list/tuple values: a bound method, or Undefined when there is none.
// Mutating methods (append, pop, update...) come back as Undefined that fail with jinja2's
// "access to attribute ... is unsafe" when called, as in the immutable sandbox.
Value get_method(const Value& obj, std::string_view name);

// Python's printf-style `format % args` (%s %r %d %i %f %e %g %x %o %c %%, flags and width).
Result<Value> percent_format(Interpreter& in, const std::string& format, const Value& args);
// Python's str.format(*args, **kwargs) with the format-spec mini-language.
Result<Value> str_format(Interpreter& in, const std::string& format, const CallArgs& args);

// Python's int(text, base) and float(text); nullopt where Python raises ValueError.
std::optional<int64_t> py_parse_int(std::string_view text, int base);
std::optional<double> py_parse_float(std::string_view text);

// Binds call arguments to named parameters (Python rules); parameters not passed stay empty.
struct ParamSpec {
  const char* name;
  bool required = false;
};
Status bind_args(std::string_view fn, const CallArgs& args, std::initializer_list<ParamSpec> params,
                 std::vector<std::optional<Value>>& out);

}  // namespace loom::llm::jinja
