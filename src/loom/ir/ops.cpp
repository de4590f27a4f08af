// The op table's storage and the name lookups for ops, modes and targets.
#include "loom/ir/ops.h"

#include <array>

namespace loom::ir {
namespace {

constexpr OpInfo kOps[] = {
#define LOOM_IR_OP_INFO(e, text, n, rule, cat, modes, flags, targets) \
  OpInfo{text, n, TypeRule::rule, Category::cat, ModeSet::modes, static_cast<uint16_t>(flags), targets},
    LOOM_IR_OPS(LOOM_IR_OP_INFO)
#undef LOOM_IR_OP_INFO
};

constexpr std::array<std::string_view, 17> kModeNames = {
    "", "eq", "ne", "lt", "le", "gt", "ge", "x", "y", "z", "idx", "xor", "down", "up", "add", "max", "min",
};

}  // namespace

std::string_view target_kind_name(TargetKind t) {
  switch (t) {
    case TargetKind::kPtx: return "ptx";
    case TargetKind::kCpp: return "cpp";
    case TargetKind::kAmdgpu: return "amdgpu";
  }
  return "?";
}

std::optional<TargetKind> parse_target_kind(std::string_view name) {
  if (name == "ptx") return TargetKind::kPtx;
  if (name == "cpp") return TargetKind::kCpp;
  if (name == "amdgpu") return TargetKind::kAmdgpu;
  return std::nullopt;
}

std::string_view mode_name(Mode m) { return kModeNames[static_cast<int>(m)]; }

bool mode_in_set(Mode m, ModeSet set) {
  switch (set) {
    case ModeSet::kNone: return m == Mode::kNone;
    case ModeSet::kCmp: return m >= Mode::kEq && m <= Mode::kGe;
    case ModeSet::kDim: return m >= Mode::kX && m <= Mode::kZ;
    case ModeSet::kShuffle: return m >= Mode::kIdx && m <= Mode::kUp;
    case ModeSet::kReduce: return m >= Mode::kAdd && m <= Mode::kMin;
    case ModeSet::kAtomic: return m == Mode::kAdd || m == Mode::kMax;
  }
  return false;
}

std::optional<Mode> parse_mode(std::string_view text, ModeSet set) {
  for (size_t i = 1; i < kModeNames.size(); ++i) {
    if (kModeNames[i] == text && mode_in_set(static_cast<Mode>(i), set)) return static_cast<Mode>(i);
  }
  return std::nullopt;
}

const OpInfo& op_info(Op op) { return kOps[static_cast<int>(op)]; }

int num_ops() { return static_cast<int>(sizeof(kOps) / sizeof(kOps[0])); }

std::optional<Op> parse_op(std::string_view name) {
  for (int i = 0; i < num_ops(); ++i)
    if (kOps[i].name == name) return static_cast<Op>(i);
  return std::nullopt;
}

}  // namespace loom::ir
