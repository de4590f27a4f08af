// Verifier: walks each kernel once with a scope stack (structured regions make dominance a
// matter of scoping) and checks every instruction against the op table.
#include "loom/ir/verifier.h"

#include <cctype>
#include <unordered_set>

#include "loom/ir/type_rules.h"

namespace loom::ir {
namespace {

class Verifier {
 public:
  Verifier(const Kernel& k, std::optional<TargetKind> target, std::string_view source)
      : k_(k), target_(target), source_(source), namer_(k), state_(k.num_values(), kUnseen) {}

  Status run() {
    bool ident = !k_.name.empty() && !std::isdigit(static_cast<unsigned char>(k_.name[0]));
    for (char c : k_.name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') ident = false;
    if (!ident) return where(k_.loc, fmt::format("kernel name '@{}' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)", k_.name));
    for (const Value* p : k_.params) {
      if (!p || p->id >= state_.size()) return where(k_.loc, fmt::format("kernel @{} has a malformed parameter", k_.name));
      if (!valid_param_type(p->type))
        return where(k_.loc, fmt::format("parameter %{} of @{} has type {}; parameters are scalars or pointers to "
                                         "global or constant memory", namer_.name(p), k_.name, p->type.str()));
      LOOM_RETURN_IF_ERROR(define(p, nullptr));
    }
    return block(k_.body, 0, nullptr);
  }

 private:
  enum : uint8_t { kUnseen, kVisible, kOutOfScope };

  Status where(SourceLoc loc, std::string msg) const {
    if (loc.known()) return invalid_argument("{}:{}:{}: {}", source_, loc.line, loc.col, msg);
    return invalid_argument("kernel @{}: {}", k_.name, msg);
  }

  Status error(const Inst& inst, std::string msg, StatusCode code = StatusCode::kInvalidArgument) const {
    std::string head = inst.loc.known() ? fmt::format("{}:{}:{}", source_, inst.loc.line, inst.loc.col)
                                        : fmt::format("kernel @{}", k_.name);
    return Status(code, fmt::format("{}: {}\n    {}", head, msg, print_inst(inst, namer_)));
  }

  Status define(const Value* v, const Inst* inst) {
    if (!v || v->id >= state_.size()) return internal_error("value outside kernel @{}", k_.name);
    if (state_[v->id] != kUnseen) {
      std::string msg = fmt::format("%{} is defined twice", namer_.name(v));
      return inst ? error(*inst, msg) : where(k_.loc, msg);
    }
    state_[v->id] = kVisible;
    scope_.push_back(v);
    return Status();
  }

  Status check_use(const Inst& inst, const Value* v) const {
    if (!v || v->id >= state_.size()) return error(inst, "operand is not a value of this kernel");
    if (state_[v->id] == kVisible) return Status();
    if (state_[v->id] == kOutOfScope)
      return error(inst, fmt::format("%{} is used outside the region that defines it", namer_.name(v)));
    return error(inst, fmt::format("%{} is used before it is defined", namer_.name(v)));
  }

  Status check_target(const Inst& inst, int depth) {
    if (!target_) return Status();
    TargetKind t = *target_;
    if (!inst.info().legal_on(t))
      return error(inst, fmt::format("'{}' is not supported by the {} target", inst.info().name, target_kind_name(t)),
                   StatusCode::kUnimplemented);
    if (t == TargetKind::kCpp && inst.op == Op::kBarrier && depth > 0)
      return error(inst, "the cpp target runs a block's threads one after another, so 'barrier' must be at the "
                         "top level of the kernel, not inside 'for' or 'if'", StatusCode::kUnimplemented);
    return Status();
  }

  // Checks the yield that ends a region against what its parent op returns.
  Status check_yield(const Inst& yield, const Inst* parent) {
    if (!parent) return error(yield, "'yield' outside a region");
    size_t want = parent->results.size();
    if (yield.operands.size() != want)
      return error(yield, fmt::format("'yield' returns {} value(s) but the enclosing '{}' has {} result(s)",
                                      yield.operands.size(), parent->info().name, want));
    for (size_t i = 0; i < want; ++i) {
      if (yield.operands[i]->type != parent->results[i]->type)
        return error(yield, fmt::format("'yield' value {} is {} but the enclosing '{}' result is {}", i,
                                        yield.operands[i]->type.str(), parent->info().name,
                                        parent->results[i]->type.str()));
    }
    return Status();
  }

  Status block(const Block& b, int depth, const Inst* parent) {
    if (depth > 256) return where(k_.loc, "regions nest deeper than 256 levels");
    for (size_t idx = 0; idx < b.insts.size(); ++idx) {
      const Inst* ip = b.insts[idx];
      if (!ip) return where(k_.loc, "null instruction");
      const Inst& inst = *ip;
      for (const Value* v : inst.operands) LOOM_RETURN_IF_ERROR(check_use(inst, v));
      if (std::string why = check_inst_types(inst); !why.empty()) return error(inst, why);
      LOOM_RETURN_IF_ERROR(check_target(inst, depth));
      if (inst.op == Op::kYield) {
        if (idx + 1 != b.insts.size()) return error(inst, "'yield' must be the last instruction of its region");
        LOOM_RETURN_IF_ERROR(check_yield(inst, parent));
      }
      if (inst.op == Op::kAllocShared) {
        if (depth > 0) return error(inst, "'alloc_shared' must be at the top level of the kernel");
        shared_bytes_ += alloc_shared_bytes(inst);
        if (shared_bytes_ > kMaxSharedBytes)
          return error(inst, fmt::format("kernel uses {} bytes of shared memory; the limit is {}", shared_bytes_,
                                         kMaxSharedBytes));
      }
      for (const Block& region : inst.regions) {
        size_t mark = scope_.size();
        for (const Value* a : region.args) LOOM_RETURN_IF_ERROR(define(a, &inst));
        LOOM_RETURN_IF_ERROR(block(region, depth + 1, &inst));
        const bool ends_in_yield = !region.insts.empty() && region.insts.back()->op == Op::kYield;
        if (!inst.results.empty() && !ends_in_yield)
          return error(inst, fmt::format("each region of this '{}' must end with 'yield' of {} value(s)",
                                         inst.info().name, inst.results.size()));
        while (scope_.size() > mark) {
          state_[scope_.back()->id] = kOutOfScope;
          scope_.pop_back();
        }
      }
      for (const Value* r : inst.results) {
        if (r && r->def != &inst) return error(inst, "result is not linked to its instruction");
        LOOM_RETURN_IF_ERROR(define(r, &inst));
      }
    }
    return Status();
  }

  const Kernel& k_;
  std::optional<TargetKind> target_;
  std::string_view source_;
  Namer namer_;
  std::vector<uint8_t> state_;
  std::vector<const Value*> scope_;
  int64_t shared_bytes_ = 0;
};

}  // namespace

Status verify(const Kernel& kernel, std::optional<TargetKind> target, std::string_view source_name) {
  return Verifier(kernel, target, source_name).run();
}

Status verify(const Module& module, std::optional<TargetKind> target) {
  std::string_view source = module.source_name.empty() ? std::string_view("<input>") : module.source_name;
  std::unordered_set<std::string_view> names;
  for (const auto& k : module.kernels) {
    if (!names.insert(k->name).second) {
      if (k->loc.known()) return invalid_argument("{}:{}:{}: kernel @{} is defined twice", source, k->loc.line, k->loc.col, k->name);
      return invalid_argument("kernel @{} is defined twice", k->name);
    }
    LOOM_RETURN_IF_ERROR(verify(*k, target, source));
  }
  return Status();
}

}  // namespace loom::ir
