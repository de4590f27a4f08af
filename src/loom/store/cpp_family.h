// A second kernel family for the search on the cpu device: quantized mat-vec (Q4_0, Q4_1,
// Q8_0 weights, one token) written as C++ with AVX2 intrinsics by evolve's own generator, with
// knobs the search tunes. The cpp target's Loom IR has no byte dot product, shuffle or vector
// f16 convert (docs/kernels.md), so the op library's kernels spend ~70 instructions per weight
// block; this family uses vpmaddubsw/vpmaddwd and F16C. It enters the search as schedule knobs:
// ev_family=1 selects it, cx_* are its knobs; candidates are C++ text (kind cpp) per shape.
//
// Numerics: integer lanes as llm::ref (lane l holds elements 4l..4l+3), one fma per block and
// lane, so with cx_acc=1 the sum order matches the reference; cx_acc=2 splits even and odd
// blocks (within the op's tolerance).
#pragma once

#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/kernels/op_spec.h"

namespace loom::store {

// The family's knobs (ev_family plus cx_*) when it applies to this op, shape and target; empty
// otherwise. ev_family's first choice is 0 (the op's own generator).
std::vector<kernels::Knob> family_knobs(const kernels::OpSpec& op, const kernels::Shape& shape, ir::TargetKind target);

// C++ source (with its `// launch` line) for a schedule whose ev_family is 1.
Result<std::string> family_source(const kernels::OpSpec& op, const kernels::Shape& shape, const kernels::Schedule& knobs);

// Resets knobs that do not matter for the candidate's family to fixed values (the first choice
// of `space`, the op's default for its own knobs), so equal kernels hash equally.
void canonicalize(kernels::Schedule& knobs, const std::vector<kernels::Knob>& space, const kernels::Schedule& op_default);

}  // namespace loom::store
