// Text form of Loom IR. The output is canonical (fixed spacing, every result typed) and parses
// back to the same IR; see docs/ir.md for the grammar.
#include <cctype>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "loom/ir/ir.h"

namespace loom::ir {

Namer::Namer(const Kernel& kernel) : names_(kernel.num_values()) {
  std::unordered_set<std::string> used;
  std::vector<const Value*> order;  // definition order: params, then program order
  for (const Value* p : kernel.params) order.push_back(p);
  walk(kernel.body, [&](const Inst* inst) {
    for (const Block& r : inst->regions)
      for (const Value* a : r.args) order.push_back(a);
    for (const Value* v : inst->results) order.push_back(v);
  });
  // Names the lexer would not read back (builder names are free-form) are sanitized.
  auto sanitize = [](std::string n) {
    for (char& c : n)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') c = '_';
    return n;
  };
  std::vector<const Value*> unnamed;
  for (const Value* v : order) {
    if (!names_[v->id].empty()) continue;  // listed twice (malformed IR); keep the first name
    std::string want = sanitize(v->name);
    if (!want.empty() && used.insert(want).second) {
      names_[v->id] = want;
      continue;
    }
    unnamed.push_back(v);
  }
  // Anonymous values get numbers, repeated names a suffix; both skip every name in use.
  // Counters continue per base name, so naming stays linear when unrolling repeats a name.
  int next = 0;
  std::unordered_map<std::string, int> next_suffix;
  for (const Value* v : unnamed) {
    std::string n;
    if (v->name.empty()) {
      do n = std::to_string(next++); while (!used.insert(n).second);
    } else {
      std::string base = sanitize(v->name);
      int& k = next_suffix.try_emplace(base, 1).first->second;
      do n = base + "_" + std::to_string(k++); while (!used.insert(n).second);
    }
    names_[v->id] = n;
  }
}

const std::string& Namer::name(const Value* v) const {
  static const std::string kUnknown = "<?>";
  return v && v->id < names_.size() && !names_[v->id].empty() ? names_[v->id] : kUnknown;
}

std::string print_literal(const Literal& lit, Type type) {
  if (!lit.is_float) {
    if (type.valid() && type.elem() == Scalar::kU64) return fmt::format("{}", static_cast<uint64_t>(lit.i));
    return fmt::format("{}", lit.i);
  }
  if (std::isnan(lit.f)) return "nan";
  if (std::isinf(lit.f)) return lit.f < 0 ? "-inf" : "inf";
  std::string s = fmt::format("{}", lit.f);  // shortest text that reads back to the same double
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

namespace {

class Printer {
 public:
  Printer(const Namer& namer, std::string& out) : namer_(namer), out_(out) {}

  void value(const Value* v) {
    out_ += '%';
    out_ += namer_.name(v);
  }

  void value_list(const std::vector<Value*>& vs, size_t from = 0, size_t to = SIZE_MAX) {
    to = std::min(to, vs.size());
    for (size_t i = from; i < to; ++i) {
      if (i > from) out_ += ", ";
      value(vs[i]);
    }
  }

  void result_types(const Inst& inst) {
    if (inst.results.empty()) return;
    out_ += " : ";
    for (size_t i = 0; i < inst.results.size(); ++i) {
      if (i) out_ += ", ";
      out_ += inst.results[i]->type.str();
    }
  }

  // "%p[%i], %q[%j]" from operands 0..3 (cp_async's and wgmma's two pointers with their indices).
  void ptr_index_pair(const std::vector<Value*>& ops) {
    for (size_t k = 0; k < 4; k += 2) {
      if (k) out_ += ", ";
      value(ops[k]);
      out_ += '[';
      value(ops[k + 1]);
      out_ += ']';
    }
  }

  // The instruction's text up to (not including) its regions' bodies.
  void header(const Inst& inst) {
    if (!inst.results.empty()) {
      value_list(inst.results);
      out_ += " = ";
    }
    out_ += op_name(inst.op);
    if (inst.mode != Mode::kNone) {
      out_ += '.';
      out_ += mode_name(inst.mode);
    }
    const auto& ops = inst.operands;
    switch (inst.op) {
      case Op::kConst:
        out_ += ' ';
        out_ += print_literal(inst.lit, inst.results.empty() ? Type() : inst.results[0]->type);
        break;
      case Op::kLoad:
      case Op::kStore:
      case Op::kAtomic:
      case Op::kPrefetch:
        if (ops.size() >= 2) {
          out_ += ' ';
          value(ops[0]);
          out_ += '[';
          value(ops[1]);
          out_ += ']';
          if (ops.size() > 2) {
            out_ += ", ";
            value_list(ops, 2);
          }
        }
        if (inst.imm != 0 && inst.op != Op::kAtomic) out_ += fmt::format(", align {}", inst.imm);
        break;
      case Op::kCpAsync:  // cp_async %dst[%i], %src[%j], BYTES
        if (ops.size() == 4) {
          out_ += ' ';
          ptr_index_pair(ops);
          out_ += fmt::format(", {}", inst.imm);
        }
        break;
      case Op::kCpAsyncWait:
      case Op::kWgmmaWait:
        out_ += fmt::format(" {}", inst.imm);
        break;
      case Op::kWgmma:  // wgmma %a[%i], %b[%j], %c, lbo L, sbo S
        if (ops.size() == 5) {
          out_ += ' ';
          ptr_index_pair(ops);
          out_ += ", ";
          value(ops[4]);
          out_ += fmt::format(", lbo {}, sbo {}", inst.imm & 0xFFFFFFFF, inst.imm >> 32);
        }
        break;
      case Op::kWgmmaRs:  // wgmma_rs %a, %b[%j], %c, lbo L, sbo S
        if (ops.size() == 4) {
          out_ += ' ';
          value(ops[0]);
          out_ += ", ";
          value(ops[1]);
          out_ += '[';
          value(ops[2]);
          out_ += "], ";
          value(ops[3]);
          out_ += fmt::format(", lbo {}, sbo {}", inst.imm & 0xFFFFFFFF, inst.imm >> 32);
        }
        break;
      case Op::kAmxZero:
      case Op::kAmxLoad:
      case Op::kAmxStore:
        out_ += fmt::format(" {}, rows {}, bytes {}", inst.imm & 0xFF, (inst.imm >> 8) & 0xFF, (inst.imm >> 16) & 0xFF);
        if (ops.size() == 3) {
          out_ += ", ";
          value(ops[0]);
          out_ += '[';
          value(ops[1]);
          out_ += "], ";
          value(ops[2]);
        }
        break;
      case Op::kAmxDpI8:
      case Op::kAmxDpBf16:
        out_ += fmt::format(" {}, {}, {}", inst.imm & 0xFF, (inst.imm >> 8) & 0xFF, (inst.imm >> 16) & 0xFF);
        break;
      case Op::kExtract:
        out_ += ' ';
        value_list(ops);
        out_ += fmt::format("[{}]", inst.imm);
        break;
      case Op::kAllocShared:
      case Op::kAllocLocal:
        out_ += fmt::format(" {}", inst.imm);
        break;
      case Op::kFor:
        if (ops.size() >= 3 && !inst.regions.empty() && !inst.regions[0].args.empty()) {
          const Block& body = inst.regions[0];
          out_ += ' ';
          value(body.args[0]);
          out_ += " = ";
          value(ops[0]);
          out_ += " to ";
          value(ops[1]);
          out_ += " step ";
          value(ops[2]);
          if (ops.size() > 3) {
            out_ += " iter(";
            for (size_t i = 3; i < ops.size(); ++i) {
              if (i > 3) out_ += ", ";
              if (i - 2 < body.args.size()) value(body.args[i - 2]);
              out_ += " = ";
              value(ops[i]);
            }
            out_ += ')';
          }
        }
        break;
      default:
        if (!ops.empty()) {
          out_ += ' ';
          value_list(ops);
        }
        break;
    }
    result_types(inst);
  }

  void indent(int depth) { out_.append(static_cast<size_t>(depth) * 2, ' '); }

  void block(const Block& b, int depth) {
    for (const Inst* inst : b.insts) {
      indent(depth);
      header(*inst);
      if (inst->op == Op::kFor && !inst->regions.empty()) {
        out_ += " {\n";
        block(inst->regions[0], depth + 1);
        indent(depth);
        out_ += '}';
      } else if (inst->op == Op::kIf && inst->regions.size() == 2) {
        out_ += " {\n";
        block(inst->regions[0], depth + 1);
        indent(depth);
        out_ += '}';
        if (!inst->regions[1].insts.empty() || !inst->results.empty()) {
          out_ += " else {\n";
          block(inst->regions[1], depth + 1);
          indent(depth);
          out_ += '}';
        }
      }
      out_ += '\n';
    }
  }

  void kernel(const Kernel& k) {
    out_ += "kernel @";
    out_ += k.name;
    out_ += '(';
    for (size_t i = 0; i < k.params.size(); ++i) {
      if (i) out_ += ", ";
      value(k.params[i]);
      out_ += ": ";
      out_ += k.params[i]->type.str();
    }
    out_ += ')';
    if (k.max_threads > 0) out_ += fmt::format(" bounds({}, {})", k.max_threads, k.min_blocks);
    out_ += " {\n";
    block(k.body, 1);
    out_ += "}\n";
  }

 private:
  const Namer& namer_;
  std::string& out_;
};

}  // namespace

std::string print_inst(const Inst& inst, const Namer& namer) {
  std::string out;
  Printer(namer, out).header(inst);
  if (inst.info().has(kHasRegions)) out += " { ... }";
  return out;
}

std::string print(const Kernel& kernel) {
  std::string out;
  Namer namer(kernel);
  Printer(namer, out).kernel(kernel);
  return out;
}

std::string print(const Module& module) {
  std::string out;
  for (size_t i = 0; i < module.kernels.size(); ++i) {
    if (i) out += '\n';
    out += print(*module.kernels[i]);
  }
  return out;
}

}  // namespace loom::ir
