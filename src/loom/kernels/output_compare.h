// Comparing a kernel's buffers with the op's reference after a run: the one comparison of the op
// harness (tests/ops, `loom ops test`) and evolve's evaluator, so "correct" means the same in
// both. Outputs (and in/out buffers) must match the reference, byte for byte where the op's
// tolerance is exact or the element type is not floating point, else element by element within
// atol + rtol * |reference|. NaN matches only NaN, whatever its payload (IEEE arithmetic does not
// define which NaN a result carries: x86 keeps an operand's payload, CUDA returns the canonical
// one); an infinity matches only the same infinity. Inputs must be left as they were.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/kernels/op_spec.h"

namespace loom::kernels {

struct OutputComparison {
  enum class Kind {
    kOk,
    kInputModified,  // a kInput buffer differs from the input it was given
    kBadReference,   // the reference gave another size than args() says
    kMismatch,       // an output element is outside the tolerance
  };
  Kind kind = Kind::kOk;
  // Where (kInputModified, kMismatch): the argument, the byte offset of the first wrong element,
  // and the width compared (1 when bytewise).
  size_t arg = 0, offset = 0, elem_bytes = 1;
  std::string message;                      // what, naming the argument (empty when ok)
  double max_abs_err = 0, max_rel_err = 0;  // over the float elements compared before any mismatch
  bool ok() const { return kind == Kind::kOk; }
};

// `got[i]`: the bytes of buffer argument i after the run (specs[i].bytes of them; ignored for
// scalars). `in`: the inputs as given to the kernel. `want`: the reference's buffers.
OutputComparison compare_outputs(const std::vector<ArgSpec>& specs, const std::vector<const uint8_t*>& got,
                                 const std::vector<HostArg>& in, const std::vector<HostArg>& want,
                                 const Tolerance& tol);

// The value of one element of type `e` at `p` (f32, f64, f16, bf16, i32; other types: the byte).
double element_value(const uint8_t* p, ir::Scalar e);

}  // namespace loom::kernels
