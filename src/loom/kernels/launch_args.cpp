// The launch binder (see launch_args.h).
#include "loom/kernels/launch_args.h"

#include <bit>

namespace loom::kernels {

Result<hrx::KernelArgs> bind_launch_args(const KernelLaunch& l, std::span<const uint64_t> addrs,
                                         std::span<const ir::Type> scalar_types) {
  if (scalar_types.size() != l.scalars.size())
    return invalid_argument("launch of {} passes {} scalars, the kernel takes {}", l.kernel, l.scalars.size(),
                            scalar_types.size());
  hrx::KernelArgs ka;
  for (int a : l.args) {
    if (a < 0 || static_cast<size_t>(a) >= addrs.size())
      return invalid_argument("launch of {} names argument {} of {}", l.kernel, a, addrs.size());
    ka.address(addrs[static_cast<size_t>(a)]);
  }
  for (size_t j = 0; j < l.scalars.size(); ++j) {
    const ir::Type t = scalar_types[j];
    const int64_t v = l.scalars[j];
    if (t.is_float()) {
      if (t.elem() == ir::Scalar::kF32) ka.f32(static_cast<float>(v));
      else if (t.elem() == ir::Scalar::kF64) ka.i64(std::bit_cast<int64_t>(static_cast<double>(v)));
      else return unimplemented("launch of {}: scalar {} has type {}, which launches cannot pass", l.kernel, j, t.str());
    } else if (t.elem_bytes() == 8) {
      ka.i64(v);
    } else {
      ka.i32(static_cast<int32_t>(v));
    }
  }
  return ka;
}

Result<std::vector<ir::Type>> scalar_param_types(const ir::Kernel& k, const KernelLaunch& l) {
  if (k.params.size() != l.args.size() + l.scalars.size())
    return invalid_argument("kernel '{}' has {} parameters, the launch passes {}", k.name, k.params.size(),
                            l.args.size() + l.scalars.size());
  std::vector<ir::Type> types;
  for (size_t p = l.args.size(); p < k.params.size(); ++p) types.push_back(k.params[p]->type);
  return types;
}

Result<std::vector<ir::Type>> scalar_param_types(const ir::Module& m, const KernelLaunch& l) {
  const ir::Kernel* k = m.find(l.kernel);
  if (!k) return invalid_argument("launch names kernel '{}', which the module lacks", l.kernel);
  return scalar_param_types(*k, l);
}

}  // namespace loom::kernels
