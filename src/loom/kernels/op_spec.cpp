// The non-virtual parts of the op contract: shape keys (the kernel store's index) and schedule
// keys, both canonical text so equal shapes and schedules give equal strings.
#include "loom/kernels/op_spec.h"

#include <cassert>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

namespace loom::kernels {

Result<int64_t> Shape::get(std::string_view name) const {
  auto it = dims.find(std::string(name));
  if (it == dims.end()) return internal_error("shape {{{}}} has no dimension '{}'", key(), name);
  return it->second;
}

int64_t Shape::at(std::string_view name) const {
  auto it = dims.find(std::string(name));
  assert(it != dims.end() && "Shape::at on a dimension that validate() should have required");
  return it == dims.end() ? 0 : it->second;
}

namespace {
std::string join_map(const std::map<std::string, int64_t>& m) {
  std::string out;
  for (const auto& [k, v] : m) {
    if (!out.empty()) out += ',';
    out += fmt::format("{}={}", k, v);
  }
  return out;
}
}  // namespace

std::string Shape::key() const { return join_map(dims); }

Result<Shape> Shape::parse(std::string_view key) {
  Shape s;
  size_t pos = 0;
  while (pos < key.size()) {
    size_t end = key.find(',', pos);
    if (end == std::string_view::npos) end = key.size();
    std::string_view item = key.substr(pos, end - pos);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return invalid_argument("shape '{}': expected NAME=VALUE, got '{}'", key, item);
    std::string_view name = item.substr(0, eq), value = item.substr(eq + 1);
    for (char c : name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
        return invalid_argument("shape '{}': bad dimension name '{}'", key, name);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || p != value.data() + value.size() || value.empty())
      return invalid_argument("shape '{}': '{}' is not an integer", key, value);
    if (!s.dims.emplace(std::string(name), v).second)
      return invalid_argument("shape '{}': dimension '{}' given twice", key, name);
    pos = end + 1;
  }
  return s;
}

std::string schedule_key(const Schedule& s) { return join_map(s); }

Result<Schedule> schedule_override(std::string_view op) {
  static const Result<std::map<std::string, Schedule, std::less<>>> table =
      []() -> Result<std::map<std::string, Schedule, std::less<>>> {
    std::map<std::string, Schedule, std::less<>> t;
    const char* env = std::getenv("LOOM_SCHEDULE");
    std::string_view text = env ? env : "";
    while (!text.empty()) {
      const size_t end = std::min(text.find(';'), text.size());
      std::string_view item = text.substr(0, end);
      text.remove_prefix(std::min(end + 1, text.size()));
      if (item.empty()) continue;
      const size_t colon = item.find(':');
      if (colon == std::string_view::npos || colon == 0)
        return invalid_argument("LOOM_SCHEDULE: expected OP:KNOB=VALUE,..., got '{}'", item);
      auto knobs = Shape::parse(item.substr(colon + 1));
      if (!knobs.ok()) return std::move(knobs).status().with_context("LOOM_SCHEDULE");
      t[std::string(item.substr(0, colon))] = Schedule(knobs->dims.begin(), knobs->dims.end());
    }
    return t;
  }();
  if (!table.ok()) return table.status();
  auto it = table->find(op);
  return it == table->end() ? Schedule{} : it->second;
}

}  // namespace loom::kernels
