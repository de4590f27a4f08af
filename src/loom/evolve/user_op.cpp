// User-defined ops from a JSON file (see user_op.h and docs/evolve.md, "Your own op"): an
// OpSpec whose arguments, sizes, cost and tolerance are expressions over the shape's dims, whose
// reference is C++ (system compiler, dlopen) or Loom IR (cpp target, run on the host), and whose
// schedule space is the knobs of a Loom IR kernel template.
#include "loom/evolve/user_op.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "loom/codegen/cpp/host_compiler.h"
#include "loom/store/candidate.h"
#include "loom/evolve/store_names.h"
#include "loom/gguf/quant.h"
#include "loom/ir/verifier.h"

namespace loom::evolve {
namespace {

using kernels::ArgKind;
using kernels::ArgRole;
using kernels::ArgSpec;
using kernels::HostArg;
using kernels::Shape;
using json = nlohmann::ordered_json;  // keeps "dims" in file order (the C++ reference's dims[])

using CppReferenceFn = void (*)(void* const* args, const long long* dims);

struct DimRule {
  int64_t min = 1, max = std::numeric_limits<int64_t>::max(), multiple_of = 1;
};

struct UserArg {
  std::string name;
  ArgRole role = ArgRole::kInput;
  ir::Scalar elem = ir::Scalar::kF32;
  std::string count;       // elements, an expression over the dims
  double lo = -1, hi = 1;  // range of random inputs
  bool special = false;    // the reference defines inf/NaN/-0.0/denormals/extremes for it
};

class FileOp final : public kernels::OpSpec {
 public:
  static Result<std::unique_ptr<FileOp>> load(const std::string& path);

  std::string_view name() const override { return name_; }
  std::string_view description() const override { return description_; }
  const std::string& file() const { return file_; }
  const std::string& objective() const { return objective_; }

  Status validate(const Shape& shape) const override {
    for (const auto& [n, v] : shape.dims)
      if (!rules_.count(n)) return invalid_argument("op {} has no dimension '{}' (dims: {})", name_, n, dim_list());
    for (const auto& [n, r] : rules_) {
      auto it = shape.dims.find(n);
      if (it == shape.dims.end()) return invalid_argument("op {}: the shape needs '{}' (dims: {})", name_, n, dim_list());
      if (it->second < r.min || it->second > r.max)
        return invalid_argument("op {}: {}={} is outside [{}, {}]", name_, n, it->second, r.min, r.max);
      if (it->second % r.multiple_of != 0)
        return invalid_argument("op {}: {}={} is not a multiple of {}", name_, n, it->second, r.multiple_of);
    }
    for (const UserArg& a : args_) {
      LOOM_ASSIGN_OR_RETURN(int64_t c, eval_expr(a.count, shape));
      if (c < 1) return invalid_argument("op {}: argument {} has {} elements at {{{}}}", name_, a.name, c, shape.key());
    }
    return Status();
  }

  std::vector<ArgSpec> args(const Shape& shape) const override {
    std::vector<ArgSpec> out;
    for (const UserArg& a : args_) {
      ArgSpec s;
      s.name = a.name;
      s.role = a.role;
      s.elem = a.elem;
      auto c = eval_expr(a.count, shape);
      s.bytes = (c.ok() ? *c : 0) * ir::scalar_bits(a.elem) / 8;
      out.push_back(s);
    }
    return out;
  }

  kernels::Cost cost(const Shape& shape) const override {
    kernels::Cost c;
    if (!bytes_expr_.empty()) {
      auto b = eval_expr(bytes_expr_, shape);
      c.bytes = b.ok() ? static_cast<double>(*b) : 0;
    } else {
      for (const ArgSpec& a : args(shape)) c.bytes += static_cast<double>(a.bytes);
    }
    if (!flops_expr_.empty()) {
      auto f = eval_expr(flops_expr_, shape);
      c.flops = f.ok() ? static_cast<double>(*f) : 0;
    }
    return c;
  }

  kernels::Tolerance tolerance(const Shape&) const override { return tolerance_; }
  std::vector<kernels::Knob> schedule_space(const Shape&, ir::TargetKind) const override { return knobs_; }
  kernels::Schedule default_schedule(const Shape&, ir::TargetKind) const override { return default_; }

  Result<kernels::Generated> generate(const Shape& shape, const kernels::Schedule& schedule,
                                      ir::TargetKind target) const override {
    Shape merged = shape;  // ${...} sees the dims and the knobs
    for (const kernels::Knob& k : knobs_) {
      auto it = schedule.find(k.name);
      const int64_t v = it == schedule.end() ? default_.at(k.name) : it->second;
      if (std::find(k.choices.begin(), k.choices.end(), v) == k.choices.end())
        return invalid_argument("op {}: knob {}={} is outside its choices", name_, k.name, v);
      merged.dims[k.name] = v;
    }
    Candidate c;
    c.kind = CandKind::kIr;
    LOOM_ASSIGN_OR_RETURN(c.source, substitute(kernel_, merged));
    LOOM_ASSIGN_OR_RETURN(Instance inst, instantiate(c, *this, shape, target));
    return std::move(inst.gen);
  }

  bool special_values(const Shape&, size_t arg) const override { return arg < args_.size() && args_[arg].special; }

  void fill_inputs(const Shape& shape, std::mt19937_64& rng, std::span<HostArg> host) const override {
    const std::vector<ArgSpec> specs = args(shape);
    for (size_t i = 0; i < args_.size() && i < host.size(); ++i) {
      const UserArg& a = args_[i];
      std::vector<uint8_t>& b = host[i].bytes;
      b.assign(static_cast<size_t>(specs[i].bytes), 0);
      if (a.role == ArgRole::kOutput || a.role == ArgRole::kScratch) continue;
      std::uniform_real_distribution<double> u(a.lo, a.hi);
      const size_t n = b.size() / std::max(1, ir::scalar_bits(a.elem) / 8);
      for (size_t j = 0; j < n; ++j) {
        const double v = u(rng);
        switch (a.elem) {
          case ir::Scalar::kF32: { float f = static_cast<float>(v); std::memcpy(&b[4 * j], &f, 4); break; }
          case ir::Scalar::kF16: { uint16_t h = llm::fp32_to_fp16(static_cast<float>(v)); std::memcpy(&b[2 * j], &h, 2); break; }
          case ir::Scalar::kI32: { int32_t x = static_cast<int32_t>(std::floor(v)); std::memcpy(&b[4 * j], &x, 4); break; }
          default: b[j] = static_cast<uint8_t>(static_cast<int64_t>(std::floor(v)) & 0xFF); break;
        }
      }
    }
  }

  Status reference(const Shape& shape, std::span<HostArg> host) const override {
    const std::vector<ArgSpec> specs = args(shape);
    if (host.size() != specs.size()) return invalid_argument("op {}: {} arguments, reference got {}", name_, specs.size(), host.size());
    std::vector<void*> ptrs;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (host[i].bytes.size() != static_cast<size_t>(specs[i].bytes)) host[i].bytes.assign(static_cast<size_t>(specs[i].bytes), 0);
      ptrs.push_back(host[i].bytes.data());
    }
    if (ref_lang_ == "cpp") {
      LOOM_ASSIGN_OR_RETURN(CppReferenceFn fn, cpp_reference());
      std::vector<long long> dims;
      for (const std::string& d : dim_order_) dims.push_back(shape.at(d));
      fn(ptrs.data(), dims.data());
      return Status();
    }
    // Loom IR: compiled for the host (cpp target) and run on this thread's pool-less launcher.
    Candidate c;
    c.kind = CandKind::kIr;
    c.source = ref_source_;
    LOOM_ASSIGN_OR_RETURN(Instance inst, instantiate(c, *this, shape, ir::TargetKind::kCpp));
    LOOM_RETURN_IF_ERROR(ir::verify(inst.gen.module, ir::TargetKind::kCpp).with_context("reference"));
    LOOM_ASSIGN_OR_RETURN(codegen::CpuModule m, codegen::compile_cpu_module(inst.gen.module));
    for (const kernels::KernelLaunch& l : inst.launches) {
      const ir::Kernel* k = inst.gen.module.find(l.kernel);
      if (!k) return invalid_argument("op {}: the reference launches '{}', which it does not define", name_, l.kernel);
      LOOM_ASSIGN_OR_RETURN(codegen::CpuKernelFn fn, m.kernel(l.kernel));
      std::vector<void*> slots;  // args[i] points at parameter i's value
      const size_t ns = l.scalars.size();
      std::vector<int32_t> s32(ns);
      std::vector<int64_t> s64(ns);
      std::vector<float> sf(ns);
      for (int a : l.args) {
        if (a < 0 || static_cast<size_t>(a) >= ptrs.size()) return invalid_argument("op {}: reference launch names argument {}", name_, a);
        slots.push_back(&ptrs[static_cast<size_t>(a)]);
      }
      for (size_t j = 0; j < ns; ++j) {
        const size_t p = l.args.size() + j;
        const ir::Type t = p < k->params.size() ? k->params[p]->type : ir::Type::scalar(ir::Scalar::kI32);
        s32[j] = static_cast<int32_t>(l.scalars[j]);
        s64[j] = l.scalars[j];
        sf[j] = static_cast<float>(l.scalars[j]);
        slots.push_back(t.is_float() ? static_cast<void*>(&sf[j]) : t.elem_bytes() == 8 ? static_cast<void*>(&s64[j]) : static_cast<void*>(&s32[j]));
      }
      LOOM_RETURN_IF_ERROR(codegen::launch_cpu(fn, slots.data(), l.grid, l.block, 1).with_context("reference " + l.kernel));
    }
    return Status();
  }

  std::vector<Shape> test_shapes() const override { return test_shapes_; }

 private:
  std::string dim_list() const {
    std::string s;
    for (const std::string& d : dim_order_) s += (s.empty() ? "" : ",") + d;
    return s;
  }

  Result<CppReferenceFn> cpp_reference() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (ref_fn_) return ref_fn_;
    LOOM_ASSIGN_OR_RETURN(std::string so, codegen::compile_shared_object(ref_source_));
    LOOM_ASSIGN_OR_RETURN(ref_lib_, codegen::SharedLibrary::open(so));
    LOOM_ASSIGN_OR_RETURN(void* sym, ref_lib_.symbol(ref_entry_));
    ref_fn_ = reinterpret_cast<CppReferenceFn>(sym);
    return ref_fn_;
  }

  std::string name_, description_, file_, objective_ = "median";
  std::vector<std::string> dim_order_;
  std::map<std::string, DimRule> rules_;
  std::vector<UserArg> args_;
  std::string bytes_expr_, flops_expr_;
  kernels::Tolerance tolerance_;
  std::string ref_lang_, ref_source_, ref_entry_ = "reference";
  std::string kernel_;
  std::vector<kernels::Knob> knobs_;
  kernels::Schedule default_;
  std::vector<Shape> test_shapes_;
  mutable std::mutex mu_;
  mutable codegen::SharedLibrary ref_lib_;
  mutable CppReferenceFn ref_fn_ = nullptr;
};

// A text field: a string, or an array of lines (JSON has no multi-line strings).
Result<std::string> text_field(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) return std::string();
  const json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string out;
    for (const json& line : v) {
      if (!line.is_string()) return invalid_argument("{}: '{}' must be a string or an array of strings", where, key);
      out += line.get<std::string>() + "\n";
    }
    return out;
  }
  return invalid_argument("{}: '{}' must be a string or an array of strings", where, key);
}

Result<ArgRole> parse_role(const std::string& s) {
  if (s == "input") return ArgRole::kInput;
  if (s == "output") return ArgRole::kOutput;
  if (s == "inout") return ArgRole::kInOut;
  return invalid_argument("role '{}' (input, output, inout)", s);
}

Result<std::unique_ptr<FileOp>> FileOp::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open op file {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false, /*ignore_comments=*/true);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("op file {}: not a JSON object", path);
  auto op = std::make_unique<FileOp>();
  op->file_ = path;
  try {
    op->name_ = j.value("name", "");
    if (op->name_.empty()) return invalid_argument("op file {}: needs a \"name\"", path);
    if (kernels::find_op(op->name_)) return invalid_argument("op file {}: '{}' is a built-in op: choose another name", path, op->name_);
    op->description_ = j.value("description", "user-defined op from " + path);
    // dims: {"n": {"min": 1, "max": 1e8, "multiple_of": 4}, ...}, in order (the C++ reference's dims[]).
    if (!j.contains("dims") || !j["dims"].is_object() || j["dims"].empty())
      return invalid_argument("op file {}: needs \"dims\": {{\"n\": {{\"min\": 1}}, ...}}", path);
    for (const auto& [n, r] : j["dims"].items()) {
      DimRule d;
      if (r.is_object()) {
        d.min = r.value("min", d.min);
        d.max = r.value("max", d.max);
        d.multiple_of = std::max<int64_t>(1, r.value("multiple_of", d.multiple_of));
      }
      op->dim_order_.push_back(n);
      op->rules_[n] = d;
    }
    if (!j.contains("args") || !j["args"].is_array() || j["args"].empty())
      return invalid_argument("op file {}: needs \"args\": [{{\"name\", \"role\", \"type\", \"count\"}}, ...]", path);
    bool has_output = false;
    for (const json& a : j["args"]) {
      UserArg u;
      u.name = a.value("name", "");
      LOOM_ASSIGN_OR_RETURN(u.role, parse_role(a.value("role", "input")).with_context("op file " + path + ", arg " + u.name));
      auto elem = ir::parse_scalar(a.value("type", "f32"));
      if (!elem || ir::scalar_bits(*elem) % 8 != 0)
        return invalid_argument("op file {}: arg {}: type '{}' (f32, f16, i32, u8 ...)", path, u.name, a.value("type", ""));
      u.elem = *elem;
      u.count = a.value("count", "");
      if (u.name.empty() || u.count.empty()) return invalid_argument("op file {}: every arg needs a name and a count", path);
      if (a.contains("range") && a["range"].is_array() && a["range"].size() == 2) {
        u.lo = a["range"][0].get<double>();
        u.hi = a["range"][1].get<double>();
      } else if (!ir::is_float(u.elem)) {
        u.lo = -100;
        u.hi = 100;
      }
      if (a.contains("special") && !a["special"].is_boolean())
        return invalid_argument("op file {}: arg {}: \"special\" is true or false", path, u.name);
      u.special = a.value("special", false);
      if (u.special && !ir::is_float(u.elem))
        return invalid_argument("op file {}: arg {}: \"special\" values need a float type", path, u.name);
      has_output = has_output || u.role != ArgRole::kInput;
      op->args_.push_back(u);
    }
    if (!has_output) return invalid_argument("op file {}: no output argument", path);
    if (j.contains("cost")) {
      op->bytes_expr_ = j["cost"].value("bytes", "");
      op->flops_expr_ = j["cost"].value("flops", "");
    }
    if (j.contains("tolerance")) {
      const json& t = j["tolerance"];
      op->tolerance_.atol = t.value("atol", 0.0);
      op->tolerance_.rtol = t.value("rtol", 0.0);
      op->tolerance_.exact = t.value("exact", false);
    } else {
      op->tolerance_.atol = 1e-5;
      op->tolerance_.rtol = 1e-5;
    }
    op->objective_ = j.value("objective", "median");
    if (op->objective_ != "median" && op->objective_ != "p90")
      return invalid_argument("op file {}: objective '{}' (median: typical time, p90: tail time)", path, op->objective_);
    // reference: {"lang": "cpp", "entry": "reference", "source": ...} or {"lang": "ir", "source": ...}
    if (!j.contains("reference") || !j["reference"].is_object()) return invalid_argument("op file {}: needs a \"reference\"", path);
    const json& ref = j["reference"];
    op->ref_lang_ = ref.value("lang", "cpp");
    if (op->ref_lang_ != "cpp" && op->ref_lang_ != "ir") return invalid_argument("op file {}: reference lang '{}' (cpp, ir)", path, op->ref_lang_);
    LOOM_ASSIGN_OR_RETURN(op->ref_source_, text_field(ref, "source", "op file " + path + ", reference"));
    if (op->ref_source_.empty()) return invalid_argument("op file {}: the reference has no source", path);
    op->ref_entry_ = ref.value("entry", "reference");
    // kernel: the search's starting point, a Loom IR template over dims and knobs.
    if (j.contains("kernel")) {
      const json& k = j["kernel"];
      LOOM_ASSIGN_OR_RETURN(op->kernel_, text_field(k, "source", "op file " + path + ", kernel"));
      if (k.contains("knobs"))
        for (const auto& [n, ch] : k["knobs"].items()) {
          if (op->rules_.count(n)) return invalid_argument("op file {}: knob '{}' is also a dim", path, n);
          kernels::Knob kn{n, ch.get<std::vector<int64_t>>()};
          if (kn.choices.empty()) return invalid_argument("op file {}: knob '{}' has no choices", path, n);
          op->knobs_.push_back(kn);
          op->default_[n] = kn.choices.front();
        }
      if (k.contains("default"))
        for (const auto& [n, v] : k["default"].items()) {
          auto kn = std::find_if(op->knobs_.begin(), op->knobs_.end(), [&](const kernels::Knob& x) { return x.name == n; });
          if (kn == op->knobs_.end()) return invalid_argument("op file {}: default for unknown knob '{}'", path, n);
          if (std::find(kn->choices.begin(), kn->choices.end(), v.get<int64_t>()) == kn->choices.end())
            return invalid_argument("op file {}: default {}={} is not one of its choices", path, n, v.get<int64_t>());
          op->default_[n] = v.get<int64_t>();
        }
    } else if (op->ref_lang_ == "ir") {
      op->kernel_ = op->ref_source_;  // the IR reference is the first kernel
    }
    if (op->kernel_.empty())
      return invalid_argument("op file {}: needs a \"kernel\" (Loom IR template) to start the search from, or a reference in Loom IR", path);
    for (const json& s : j.value("test_shapes", json::array())) {
      LOOM_ASSIGN_OR_RETURN(Shape sh, Shape::parse(s.get<std::string>()));
      LOOM_RETURN_IF_ERROR(op->validate(sh).with_context("op file " + path + ", test shape"));
      op->test_shapes_.push_back(std::move(sh));
    }
  } catch (const json::exception& e) {
    return invalid_argument("op file {}: {}", path, e.what());
  }
  return op;
}

struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<FileOp>> by_path;
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

Result<const kernels::OpSpec*> resolve_op(const std::string& name, const std::string& file) {
  if (file.empty()) {
    const kernels::OpSpec* op = kernels::find_op(name);
    if (!op) return invalid_argument("unknown op '{}' (see `loom evolve ops`, or define one with --op-file)", name);
    return op;
  }
  std::error_code ec;
  const std::string path = std::filesystem::absolute(file, ec).string();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_path.find(path);
  if (it == r.by_path.end()) {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<FileOp> op, FileOp::load(path));
    it = r.by_path.emplace(path, std::move(op)).first;
  }
  if (!name.empty() && name != it->second->name())
    return invalid_argument("op file {} defines '{}', not '{}'", path, it->second->name(), name);
  return it->second.get();
}

std::string op_file_of(const kernels::OpSpec& op) {
  if (const auto* f = dynamic_cast<const FileOp*>(&op)) return f->file();
  return "";
}

std::string op_objective(const kernels::OpSpec& op) {
  if (const auto* f = dynamic_cast<const FileOp*>(&op)) return f->objective();
  return "median";
}

}  // namespace loom::evolve
