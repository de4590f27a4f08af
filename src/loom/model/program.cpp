// Program building (liveness-based slot assignment) and its text listing.
#include "loom/model/program.h"

#include <algorithm>

#include <fmt/format.h>

namespace loom::llm {

const char* op_name(OpCode op) {
  switch (op) {
    case OpCode::kGetRows: return "get_rows";
    case OpCode::kRmsNorm: return "rms_norm";
    case OpCode::kMatMul: return "matmul";
    case OpCode::kAdd: return "add";
    case OpCode::kScale: return "scale";
    case OpCode::kSoftcap: return "softcap";
    case OpCode::kRope: return "rope";
    case OpCode::kKvStore: return "kv_store";
    case OpCode::kAttention: return "attention";
    case OpCode::kSwiGlu: return "swiglu";
    case OpCode::kGeGlu: return "geglu";
    case OpCode::kGatherRows: return "gather_rows";
  }
  return "?";
}

ProgramBuilder::ProgramBuilder(int64_t n_tokens, int64_t n_outputs) {
  program_.n_tokens = n_tokens;
  program_.n_outputs = n_outputs;
}

int32_t ProgramBuilder::value(int64_t rows, int64_t cols, std::string name) {
  program_.values.push_back(ValueDesc{rows, cols, std::move(name), -1});
  return static_cast<int32_t>(program_.values.size() - 1);
}

Program ProgramBuilder::finish(int32_t logits) {
  Program& p = program_;
  p.logits = logits;
  const size_t n_values = p.values.size();
  std::vector<int64_t> last_use(n_values, -1);
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const Launch& l = p.launches[i];
    for (int32_t v : {l.in0, l.in1, l.out})
      if (v >= 0) last_use[static_cast<size_t>(v)] = static_cast<int64_t>(i);
  }
  if (logits >= 0) last_use[static_cast<size_t>(logits)] = static_cast<int64_t>(p.launches.size());

  // Greedy: a launch's output takes the best-fitting free slot (growing one if none fits);
  // inputs are released after the launch, so an output never shares memory with its inputs.
  std::vector<bool> slot_free;
  auto take_slot = [&](int64_t floats) {
    int best = -1;
    for (size_t s = 0; s < slot_free.size(); ++s) {
      if (!slot_free[s]) continue;
      const bool fits = p.slot_floats[s] >= floats;
      if (best < 0) { best = static_cast<int>(s); continue; }
      const bool best_fits = p.slot_floats[static_cast<size_t>(best)] >= floats;
      if (fits && (!best_fits || p.slot_floats[s] < p.slot_floats[static_cast<size_t>(best)])) best = static_cast<int>(s);
      else if (!fits && !best_fits && p.slot_floats[s] > p.slot_floats[static_cast<size_t>(best)]) best = static_cast<int>(s);
    }
    if (best < 0) {
      p.slot_floats.push_back(floats);
      slot_free.push_back(false);
      return static_cast<int32_t>(p.slot_floats.size() - 1);
    }
    p.slot_floats[static_cast<size_t>(best)] = std::max(p.slot_floats[static_cast<size_t>(best)], floats);
    slot_free[static_cast<size_t>(best)] = false;
    return static_cast<int32_t>(best);
  };
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const Launch& l = p.launches[i];
    if (l.out >= 0) {
      ValueDesc& d = p.values[static_cast<size_t>(l.out)];
      if (d.slot < 0) d.slot = take_slot(d.rows * d.cols);
    }
    for (int32_t v : {l.in0, l.in1, l.out}) {
      if (v < 0 || last_use[static_cast<size_t>(v)] != static_cast<int64_t>(i)) continue;
      const int32_t s = p.values[static_cast<size_t>(v)].slot;
      if (s >= 0) slot_free[static_cast<size_t>(s)] = true;
    }
  }
  return std::move(program_);
}

std::string Program::to_string(const std::vector<std::string>& weight_names) const {
  auto val = [&](int32_t v) {
    if (v < 0) return std::string("-");
    const ValueDesc& d = values[static_cast<size_t>(v)];
    return fmt::format("%{}[{}x{}]", v, d.rows, d.cols);
  };
  std::string out = fmt::format("program: {} tokens, {} outputs, {} launches, {} slots\n", n_tokens,
                                n_outputs, launches.size(), slot_floats.size());
  for (const Launch& l : launches) {
    std::string w = l.weight >= 0 && static_cast<size_t>(l.weight) < weight_names.size()
                        ? weight_names[static_cast<size_t>(l.weight)]
                        : std::string();
    out += fmt::format("  {:<11} {} <- {}{}{}{}{}\n", op_name(l.op), val(l.out), val(l.in0),
                       l.in1 >= 0 ? ", " + val(l.in1) : std::string(), w.empty() ? "" : ", " + w,
                       l.layer >= 0 ? fmt::format(", layer {}", l.layer) : std::string(),
                       l.op == OpCode::kScale || l.op == OpCode::kSoftcap ? fmt::format(", {}", l.f) : std::string());
  }
  return out;
}

}  // namespace loom::llm
