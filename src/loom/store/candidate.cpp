// Candidates: canonical bodies, hashes, templates and instantiation (see candidate.h).
#include "loom/store/candidate.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "loom/base/hash.h"
#include "loom/store/cpp_family.h"
#include "loom/store/rewrites.h"
#include "loom/ir/parser.h"
#include "loom/ir/passes/passes.h"

namespace loom::store {
namespace {

// Recursive-descent integer expressions (for templates).
class ExprParser {
 public:
  ExprParser(std::string_view s, const kernels::Shape& shape) : s_(s), shape_(shape) {}
  Result<int64_t> parse() {
    LOOM_ASSIGN_OR_RETURN(int64_t v, sum());
    skip();
    if (p_ != s_.size()) return invalid_argument("unexpected '{}' in expression '{}'", s_.substr(p_), s_);
    return v;
  }

 private:
  void skip() {
    while (p_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[p_]))) ++p_;
  }
  Result<int64_t> sum() {
    LOOM_ASSIGN_OR_RETURN(int64_t v, product());
    while (true) {
      skip();
      if (p_ >= s_.size() || (s_[p_] != '+' && s_[p_] != '-')) return v;
      char o = s_[p_++];
      LOOM_ASSIGN_OR_RETURN(int64_t r, product());
      v = o == '+' ? v + r : v - r;
    }
  }
  Result<int64_t> product() {
    LOOM_ASSIGN_OR_RETURN(int64_t v, atom());
    while (true) {
      skip();
      if (p_ >= s_.size() || (s_[p_] != '*' && s_[p_] != '/' && s_[p_] != '%')) return v;
      char o = s_[p_++];
      LOOM_ASSIGN_OR_RETURN(int64_t r, atom());
      if (o != '*' && r == 0) return invalid_argument("division by zero in '{}'", s_);
      v = o == '*' ? v * r : o == '/' ? v / r : v % r;
    }
  }
  Result<int64_t> atom() {
    skip();
    if (p_ >= s_.size()) return invalid_argument("expression '{}' ends early", s_);
    char c = s_[p_];
    if (c == '(') {
      ++p_;
      LOOM_ASSIGN_OR_RETURN(int64_t v, sum());
      skip();
      if (p_ >= s_.size() || s_[p_] != ')') return invalid_argument("missing ')' in '{}'", s_);
      ++p_;
      return v;
    }
    if (c == '-') {
      ++p_;
      LOOM_ASSIGN_OR_RETURN(int64_t v, atom());
      return -v;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t v = 0;
      while (p_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p_]))) v = v * 10 + (s_[p_++] - '0');
      return v;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = p_;
      while (p_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[p_])) || s_[p_] == '_')) ++p_;
      std::string name(s_.substr(b, p_ - b));
      auto it = shape_.dims.find(name);
      if (it == shape_.dims.end()) return invalid_argument("unknown dimension '{}' in '{}'", name, s_);
      return it->second;
    }
    return invalid_argument("unexpected '{}' in expression '{}'", c, s_);
  }

  std::string_view s_;
  const kernels::Shape& shape_;
  size_t p_ = 0;
};

Result<std::vector<int64_t>> int_list(std::string_view s) {
  std::vector<int64_t> out;
  size_t p = 0;
  while (p <= s.size()) {
    size_t e = s.find(',', p);
    if (e == std::string_view::npos) e = s.size();
    std::string item(s.substr(p, e - p));
    if (item.empty()) return invalid_argument("empty item in '{}'", s);
    char* end = nullptr;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (*end) return invalid_argument("'{}' is not an integer", item);
    out.push_back(v);
    p = e + 1;
  }
  return out;
}

// "// launch NAME grid=.. block=.. args=.. [scalars=T:V,...]" lines of a substituted text.
Status parse_launches(const std::string& text, Instance& inst) {
  size_t p = 0;
  while ((p = text.find("// launch ", p)) != std::string::npos) {
    size_t e = text.find('\n', p);
    std::string line = text.substr(p + 10, e == std::string::npos ? std::string::npos : e - p - 10);
    p = e == std::string::npos ? text.size() : e;
    kernels::KernelLaunch l;
    std::vector<ir::Type> st;
    size_t q = 0;
    bool first = true;
    while (q < line.size()) {
      while (q < line.size() && line[q] == ' ') ++q;
      size_t w = line.find(' ', q);
      std::string tok = line.substr(q, w == std::string::npos ? std::string::npos : w - q);
      q = w == std::string::npos ? line.size() : w;
      if (tok.empty()) continue;
      if (first) {
        l.kernel = tok;
        first = false;
        continue;
      }
      size_t eq = tok.find('=');
      std::string key, val;
      if (eq == std::string::npos && (tok == "grid" || tok == "block")) {
        // `loom ops ir` writes "grid (X,Y,Z) block (X,Y,Z)".
        while (q < line.size() && line[q] == ' ') ++q;
        size_t w2 = line.find(' ', q);
        val = line.substr(q, w2 == std::string::npos ? std::string::npos : w2 - q);
        q = w2 == std::string::npos ? line.size() : w2;
        if (val.size() >= 2 && val.front() == '(' && val.back() == ')') val = val.substr(1, val.size() - 2);
        key = tok;
      } else if (eq == std::string::npos) {
        return invalid_argument("launch line '{}': '{}' is not KEY=VALUE", line, tok);
      } else {
        key = tok.substr(0, eq);
        val = tok.substr(eq + 1);
      }
      if (key == "grid" || key == "block") {
        LOOM_ASSIGN_OR_RETURN(auto v, int_list(val));
        if (v.size() != 3) return invalid_argument("launch line '{}': {} needs X,Y,Z", line, key);
        for (int d = 0; d < 3; ++d) {
          if (v[static_cast<size_t>(d)] <= 0 || v[static_cast<size_t>(d)] > (int64_t{1} << 31))
            return invalid_argument("launch line '{}': {} out of range", line, key);
          (key == "grid" ? l.grid : l.block)[static_cast<size_t>(d)] = static_cast<uint32_t>(v[static_cast<size_t>(d)]);
        }
      } else if (key == "args") {
        LOOM_ASSIGN_OR_RETURN(auto v, int_list(val));
        for (int64_t a : v) l.args.push_back(static_cast<int>(a));
      } else if (key == "scalars") {
        size_t s = 0;
        while (s < val.size()) {
          size_t c = val.find(',', s);
          std::string item = val.substr(s, c == std::string::npos ? std::string::npos : c - s);
          s = c == std::string::npos ? val.size() : c + 1;
          size_t colon = item.find(':');
          if (colon == std::string::npos) return invalid_argument("scalar '{}' needs TYPE:VALUE", item);
          std::string t = item.substr(0, colon);
          st.push_back(ir::Type::scalar(t == "i64" ? ir::Scalar::kI64 : ir::Scalar::kI32));
          l.scalars.push_back(std::strtoll(item.c_str() + colon + 1, nullptr, 10));
        }
      } else {
        return invalid_argument("launch line '{}': unknown key '{}'", line, key);
      }
    }
    if (l.kernel.empty()) return invalid_argument("launch line without a kernel name");
    inst.launches.push_back(std::move(l));
    inst.scalar_types.push_back(std::move(st));
  }
  if (inst.launches.empty())
    return invalid_argument("the kernel text names no launch (a line '// launch NAME grid=X,Y,Z block=X,Y,Z args=0,1,2')");
  return Status();
}

}  // namespace

std::string_view cand_kind_name(CandKind k) {
  switch (k) {
    case CandKind::kSchedule: return "schedule";
    case CandKind::kIr: return "ir";
    case CandKind::kCpp: return "cpp";
    case CandKind::kCuda: return "cuda";
    case CandKind::kPtx: return "ptx";
  }
  return "?";
}

Result<CandKind> parse_cand_kind(std::string_view s) {
  for (CandKind k : {CandKind::kSchedule, CandKind::kIr, CandKind::kCpp, CandKind::kCuda, CandKind::kPtx})
    if (cand_kind_name(k) == s) return k;
  return invalid_argument("unknown candidate kind '{}' (schedule, ir, cpp, cuda, ptx)", s);
}

std::string Candidate::body() const {
  nlohmann::ordered_json j;
  j["kind"] = cand_kind_name(kind);
  if (kind == CandKind::kSchedule) {
    nlohmann::ordered_json k = nlohmann::ordered_json::object();
    for (const auto& [n, v] : knobs) k[n] = v;  // std::map: sorted, canonical
    j["knobs"] = k;
  } else {
    j["source"] = source;
  }
  return j.dump();
}

Result<Candidate> Candidate::from_body(std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("kind")) return data_loss("bad candidate body: {}", body.substr(0, 80));
  Candidate c;
  LOOM_ASSIGN_OR_RETURN(c.kind, parse_cand_kind(j["kind"].get<std::string>()));
  if (c.kind == CandKind::kSchedule) {
    if (j.contains("knobs"))
      for (auto& [k, v] : j["knobs"].items()) c.knobs[k] = v.get<int64_t>();
  } else {
    c.source = j.value("source", "");
  }
  return c;
}

std::string Candidate::hash() const { return hex64(key_hash64(body())); }

std::string Candidate::summary() const {
  if (kind == CandKind::kSchedule) return kernels::schedule_key(knobs);
  size_t lines = 1;
  for (char ch : source) lines += ch == '\n';
  return fmt::format("{} text, {} lines, {}", cand_kind_name(kind), lines, hash().substr(0, 8));
}

std::vector<kernels::Knob> rewrite_knobs(ir::TargetKind target) {
  std::vector<kernels::Knob> k = {{"ev_unroll", {1, 2, 3, 6}}, {"ev_opt", {0, 1}}};
  if (target == ir::TargetKind::kCpp) k.push_back({"ev_fma", {0, 1}, {1}});
  return k;
}

void keep_exact_choices(std::vector<kernels::Knob>& space) {
  // The knobs name their inexact values (Knob::inexact): fma contraction (ev_fma), two blocks'
  // lanes in one register (cx_pair), two accumulators (cx_acc), a block's lanes summed in
  // integers before the scale (the prompt matmul's summed token lanes).
  for (kernels::Knob& k : space)
    std::erase_if(k.choices, [&](int64_t v) { return std::find(k.inexact.begin(), k.inexact.end(), v) != k.inexact.end(); });
}

void split_knobs(const kernels::Schedule& all, kernels::Schedule& op_knobs, kernels::Schedule& ev_knobs) {
  for (const auto& [k, v] : all)
    (k.rfind("ev_", 0) == 0 || k.rfind("cx_", 0) == 0 ? ev_knobs : op_knobs)[k] = v;
}

Result<int64_t> eval_expr(std::string_view expr, const kernels::Shape& shape) { return ExprParser(expr, shape).parse(); }

Result<std::string> substitute(std::string_view text, const kernels::Shape& shape) {
  std::string out;
  size_t p = 0;
  while (p < text.size()) {
    size_t d = text.find("${", p);
    if (d == std::string_view::npos) {
      out.append(text.substr(p));
      break;
    }
    out.append(text.substr(p, d - p));
    size_t e = text.find('}', d);
    if (e == std::string_view::npos) return invalid_argument("unterminated ${{ in kernel text");
    LOOM_ASSIGN_OR_RETURN(int64_t v, eval_expr(text.substr(d + 2, e - d - 2), shape));
    out += std::to_string(v);
    p = e + 1;
  }
  return out;
}

Result<Candidate> candidate_from_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot read {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  Candidate c;
  c.source = ss.str();
  const std::string ext = path.substr(path.find_last_of('.') + 1);
  if (ext == "loom") c.kind = CandKind::kIr;
  else if (ext == "cpp" || ext == "cc") c.kind = CandKind::kCpp;
  else if (ext == "cu") c.kind = CandKind::kCuda;
  else if (ext == "ptx") c.kind = CandKind::kPtx;
  else return invalid_argument("{}: unknown kernel file type '.{}' (.loom, .cpp, .cu, .ptx)", path, ext);
  return c;
}

Result<Instance> instantiate(const Candidate& c, const kernels::OpSpec& op, const kernels::Shape& shape,
                             ir::TargetKind target) {
  Instance inst;
  inst.kind = c.kind;
  if (c.kind == CandKind::kSchedule) {
    if (auto fam = c.knobs.find("ev_family"); fam != c.knobs.end() && fam->second == 1) {
      LOOM_ASSIGN_OR_RETURN(inst.source, family_source(op, shape, c.knobs));
      inst.kind = CandKind::kCpp;
      LOOM_RETURN_IF_ERROR(parse_launches(inst.source, inst));
      return inst;
    }
    kernels::Schedule op_knobs, ev;
    split_knobs(c.knobs, op_knobs, ev);
    LOOM_ASSIGN_OR_RETURN(inst.gen, op.generate(shape, op_knobs, target));
    for (auto& k : inst.gen.module.kernels) {
      if (auto it = ev.find("ev_opt"); it != ev.end() && it->second) ir::optimize(*k);
      if (auto it = ev.find("ev_fma"); it != ev.end() && it->second) split_vector_fma(*k);
      if (auto it = ev.find("ev_unroll"); it != ev.end() && it->second > 1)
        unroll_inner_loops(*k, static_cast<int>(it->second));
    }
    inst.launches = inst.gen.launches;
    return inst;
  }
  LOOM_ASSIGN_OR_RETURN(std::string text, substitute(c.source, shape));
  LOOM_RETURN_IF_ERROR(parse_launches(text, inst));
  if (c.kind == CandKind::kIr) {
    LOOM_ASSIGN_OR_RETURN(inst.gen.module, ir::parse_module(text, "candidate.loom"));
    for (kernels::KernelLaunch& l : inst.launches)  // no args=: the kernel's pointer parameters in op order
      if (l.args.empty())
        if (const ir::Kernel* k = inst.gen.module.find(l.kernel))
          for (size_t p = 0; p < k->params.size() && k->params[p]->type.is_pointer(); ++p) l.args.push_back(static_cast<int>(p));
    inst.gen.launches = inst.launches;
    return inst;
  }
  if ((c.kind == CandKind::kCpp) != (target == ir::TargetKind::kCpp))
    return invalid_argument("a {} candidate does not run on a {} device", cand_kind_name(c.kind),
                            ir::target_kind_name(target));
  for (const kernels::KernelLaunch& l : inst.launches)
    if (l.args.empty()) return invalid_argument("launch of {} names no args= (which op arguments it takes)", l.kernel);
  inst.source = std::move(text);
  return inst;
}

}  // namespace loom::store
