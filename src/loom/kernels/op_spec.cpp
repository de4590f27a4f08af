// The non-virtual parts of the op contract: shape keys (the kernel store's index) and schedule
// keys, both canonical text so equal shapes and schedules give equal strings.
#include "loom/kernels/op_spec.h"

#include <cassert>
#include <cctype>
#include <charconv>
#include <map>
#include <mutex>
#include <cstdlib>

#include <fmt/format.h>

#include "loom/base/options.h"

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

namespace {

using OverrideTable = std::map<std::string, Schedule, std::less<>>;

Result<OverrideTable> parse_overrides(std::string_view text) {
  OverrideTable t;
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
}

// The override text and its parse, made from $LOOM_SCHEDULE on first use.
struct Overrides {
  std::mutex mu;
  bool loaded = false;
  std::string text;
  Result<OverrideTable> table = OverrideTable{};

  void load_locked() {
    if (loaded) return;
    text = opt::get_string(opt::Opt::kSchedule);
    table = parse_overrides(text);
    loaded = true;
  }
};

Overrides& overrides() {
  static Overrides o;
  return o;
}

}  // namespace

Result<Schedule> schedule_override(std::string_view op) {
  Overrides& o = overrides();
  std::lock_guard<std::mutex> lock(o.mu);
  o.load_locked();
  if (!o.table.ok()) return o.table.status();
  auto it = o.table->find(op);
  return it == o.table->end() ? Schedule{} : it->second;
}

std::string set_schedule_overrides(std::string text) {
  Overrides& o = overrides();
  std::lock_guard<std::mutex> lock(o.mu);
  o.load_locked();
  o.table = parse_overrides(text);
  std::swap(o.text, text);
  return text;
}

}  // namespace loom::kernels
