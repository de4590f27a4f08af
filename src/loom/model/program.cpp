// Program building (liveness-based slot assignment) and its text listing.
#include "loom/model/program.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace loom::llm {

const char* op_name(OpCode op) {
  switch (op) {
    case OpCode::kGetRows: return "get_rows";
    case OpCode::kRmsNorm: return "rms_norm";
    case OpCode::kMatMul: return "matmul";
    case OpCode::kAdd: return "add";
    case OpCode::kScale: return "scale";
    case OpCode::kSoftcap: return "softcap";
    case OpCode::kRopeKv: return "rope_kv";
    case OpCode::kAttention: return "attention";
    case OpCode::kSwiGlu: return "swiglu";
    case OpCode::kGeGlu: return "geglu";
    case OpCode::kGatherRows: return "gather_rows";
    case OpCode::kQuantize: return "quantize";
    case OpCode::kAddRmsNorm: return "add_rms_norm";
    case OpCode::kRmsNormQ8: return "rms_norm_q8";
    case OpCode::kAddBias: return "add_bias";
    case OpCode::kMoeRoute: return "moe_route";
    case OpCode::kMatMulId: return "matmul_id";
    case OpCode::kMoeSum: return "moe_sum";
  }
  return "?";
}

uint64_t ValueDesc::bytes() const {
  if (type == GgmlType::F32 || type == GgmlType::I32) return static_cast<uint64_t>(rows * cols) * 4;
  return ref::quantized_row_bytes(type, cols) * static_cast<uint64_t>(rows);
}

ProgramBuilder::ProgramBuilder(int64_t n_tokens, int64_t n_outputs) {
  program_.n_tokens = n_tokens;
  program_.n_outputs = n_outputs;
}

int32_t ProgramBuilder::value(int64_t rows, int64_t cols, std::string name, GgmlType type) {
  program_.values.push_back(ValueDesc{rows, cols, std::move(name), -1, type});
  return static_cast<int32_t>(program_.values.size() - 1);
}

Program ProgramBuilder::finish(int32_t logits) {
  program_.logits = logits;
  assign_slots(program_);
  return std::move(program_);
}

void assign_slots(Program& p) {
  p.slot_bytes.clear();
  for (ValueDesc& d : p.values) d.slot = -1;
  const size_t n_values = p.values.size();
  std::vector<int64_t> last_use(n_values, -1);
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const Launch& l = p.launches[i];
    for (int32_t v : l.inputs())
      if (v >= 0) last_use[static_cast<size_t>(v)] = static_cast<int64_t>(i);
    for (int32_t v : l.outputs())
      if (v >= 0) last_use[static_cast<size_t>(v)] = std::max(last_use[static_cast<size_t>(v)], static_cast<int64_t>(i));
  }
  if (p.logits >= 0) last_use[static_cast<size_t>(p.logits)] = static_cast<int64_t>(p.launches.size());

  // Greedy: a launch's output takes the best-fitting free slot (growing one if none fits);
  // inputs are released after the launch, so an output never shares memory with its inputs.
  std::vector<bool> slot_free;
  auto take_slot = [&](uint64_t bytes) {
    int best = -1;
    for (size_t s = 0; s < slot_free.size(); ++s) {
      if (!slot_free[s]) continue;
      const bool fits = p.slot_bytes[s] >= bytes;
      if (best < 0) { best = static_cast<int>(s); continue; }
      const bool best_fits = p.slot_bytes[static_cast<size_t>(best)] >= bytes;
      if (fits && (!best_fits || p.slot_bytes[s] < p.slot_bytes[static_cast<size_t>(best)])) best = static_cast<int>(s);
      else if (!fits && !best_fits && p.slot_bytes[s] > p.slot_bytes[static_cast<size_t>(best)]) best = static_cast<int>(s);
    }
    if (best < 0) {
      p.slot_bytes.push_back(bytes);
      slot_free.push_back(false);
      return static_cast<int32_t>(p.slot_bytes.size() - 1);
    }
    p.slot_bytes[static_cast<size_t>(best)] = std::max(p.slot_bytes[static_cast<size_t>(best)], bytes);
    slot_free[static_cast<size_t>(best)] = false;
    return static_cast<int32_t>(best);
  };
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const Launch& l = p.launches[i];
    for (int32_t v : l.outputs()) {
      if (v < 0) continue;
      ValueDesc& d = p.values[static_cast<size_t>(v)];
      if (d.slot < 0) d.slot = take_slot(d.bytes());
    }
    auto release = [&](int32_t v) {
      if (v < 0 || last_use[static_cast<size_t>(v)] != static_cast<int64_t>(i)) return;
      const int32_t s = p.values[static_cast<size_t>(v)].slot;
      if (s >= 0) slot_free[static_cast<size_t>(s)] = true;
    };
    for (int32_t v : l.inputs()) release(v);
    for (int32_t v : l.outputs()) release(v);
  }
}

std::string Program::to_string(const std::vector<std::string>& weight_names) const {
  auto val = [&](int32_t v) {
    if (v < 0) return std::string("-");
    const ValueDesc& d = values[static_cast<size_t>(v)];
    return d.type == GgmlType::F32 ? fmt::format("%{}[{}x{}]", v, d.rows, d.cols)
                                   : fmt::format("%{}[{}x{} {}]", v, d.rows, d.cols, ggml_type_name(d.type));
  };
  auto weight = [&](int32_t w) {
    return w >= 0 && static_cast<size_t>(w) < weight_names.size() ? weight_names[static_cast<size_t>(w)]
                                                                  : fmt::format("weight {}", w);
  };
  std::string out = fmt::format("program: {} tokens, {} outputs, {} launches, {} slots\n", n_tokens,
                                n_outputs, launches.size(), slot_bytes.size());
  for (const Launch& l : launches) {
    std::vector<std::string> outs, ins;
    for (int32_t v : l.outputs())
      if (v >= 0) outs.push_back(val(v));
    for (int32_t v : l.inputs())
      if (v >= 0) ins.push_back(val(v));
    for (int32_t w : {l.weight, l.weight1, l.weight2})
      if (w >= 0) ins.push_back(weight(w));
    if (l.glu) ins.push_back("glu");
    if (l.layer >= 0) ins.push_back(fmt::format("layer {}", l.layer));
    if (l.op == OpCode::kAttention && l.attn.n_swa > 0) ins.push_back(fmt::format("window {}", l.attn.n_swa));
    if (l.op == OpCode::kScale || l.op == OpCode::kSoftcap) ins.push_back(fmt::format("{}", l.f));
    if (l.op == OpCode::kMoeRoute && l.norm_w) ins.push_back("norm");
    out += fmt::format("  {:<12} {} <- {}\n", op_name(l.op), outs.empty() ? "-" : fmt::format("{}", fmt::join(outs, ", ")),
                       fmt::format("{}", fmt::join(ins, ", ")));
  }
  return out;
}

}  // namespace loom::llm
