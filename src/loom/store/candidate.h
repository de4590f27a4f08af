// A candidate kernel of an evolve search and how it becomes code for one shape and target.
//
// Kinds: `schedule` (a point of the op's schedule space plus evolve's IR rewrite knobs, named
// "ev_*", applied to the op generator's IR), `ir` (Loom IR text), `cpp` (C++ for the cpu
// device, the entry-point ABI of loom/codegen/cpp/cpu_abi.h), `cuda` (CUDA C++, through NVRTC)
// and `ptx`. Text kinds are templates: `${expr}` is replaced by the value of an integer
// expression over the shape's dimensions (`${n_out}`, `${(n_out+3)/4}`), so one text runs on the
// searched shape and on held-out shapes. A text names its launches in comment lines:
//     // launch KERNEL grid=X,Y,Z block=X,Y,Z args=0,1,2 [scalars=i32:5,i64:7]
// (args index the op's arguments, OpSpec::args order).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/kernels/op_spec.h"

namespace loom::store {

enum class CandKind { kSchedule, kIr, kCpp, kCuda, kPtx };
std::string_view cand_kind_name(CandKind k);
Result<CandKind> parse_cand_kind(std::string_view s);

struct Candidate {
  CandKind kind = CandKind::kSchedule;
  kernels::Schedule knobs;  // kSchedule: op knobs and ev_* rewrite knobs
  std::string source;       // text kinds: the template

  // Canonical JSON text ({"kind":..,"knobs":{..}} or {"kind":..,"source":..}): the DB body.
  std::string body() const;
  static Result<Candidate> from_body(std::string_view body);
  std::string hash() const;     // 16 hex digits of a 64-bit hash of body()
  std::string summary() const;  // one line for progress output
};

// The rewrite knobs evolve adds to every op's schedule space (see rewrites.h).
std::vector<kernels::Knob> rewrite_knobs(ir::TargetKind target);
// Drops the knob values that give other bytes than the reference on the cpu (float operations in
// another order): what an exact search (JobConfig::exact) may not try.
void keep_exact_choices(std::vector<kernels::Knob>& space);
// Splits a schedule into the op's own knobs and evolve's ev_* / cx_* knobs.
void split_knobs(const kernels::Schedule& all, kernels::Schedule& op_knobs, kernels::Schedule& ev_knobs);

// A candidate made concrete for one shape and target.
struct Instance {
  CandKind kind = CandKind::kSchedule;
  kernels::Generated gen;                       // kSchedule, kIr
  std::string source;                           // kCpp, kCuda, kPtx (substituted)
  std::vector<kernels::KernelLaunch> launches;  // every kind (IR: copied from gen)
  std::vector<std::vector<ir::Type>> scalar_types;  // per launch, text kinds
};

// A text candidate from a file: .loom (ir), .cpp/.cc (cpp), .cu (cuda), .ptx (ptx).
Result<Candidate> candidate_from_file(const std::string& path);

Result<Instance> instantiate(const Candidate& c, const kernels::OpSpec& op, const kernels::Shape& shape,
                             ir::TargetKind target);

// Integer expression over shape dimensions: + - * / % ( ), decimal literals, dim names.
Result<int64_t> eval_expr(std::string_view expr, const kernels::Shape& shape);
// Replaces every ${expr} in `text`.
Result<std::string> substitute(std::string_view text, const kernels::Shape& shape);

}  // namespace loom::store
