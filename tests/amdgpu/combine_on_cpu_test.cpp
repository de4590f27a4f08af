// The amdgpu form of attention_decode's combine kernel (loops over the splits, where the other
// targets unroll them) has no AMD GPU to run on here, but it uses nothing the cpp target lacks:
// this runs it on the CPU after the cpp partial kernel, through the differential harness,
// against the op's reference.
#include <gtest/gtest.h>

#include <algorithm>

#include "loom/kernels/op_harness.h"
#include "loom/kernels/op_list.h"

namespace loom::kernels {
namespace {

// attention_decode, except that its combine kernel and launch come from the amdgpu generator.
class AmdgpuCombineOnCpu final : public OpSpec {
 public:
  explicit AmdgpuCombineOnCpu(const OpSpec& base) : b_(base) {}
  std::string_view name() const override { return b_.name(); }
  std::string_view description() const override { return b_.description(); }
  Status validate(const Shape& s) const override { return b_.validate(s); }
  std::vector<ArgSpec> args(const Shape& s) const override { return b_.args(s); }
  Cost cost(const Shape& s) const override { return b_.cost(s); }
  Tolerance tolerance(const Shape& s) const override { return b_.tolerance(s); }
  std::vector<Knob> schedule_space(const Shape& s, ir::TargetKind t) const override { return b_.schedule_space(s, t); }
  Schedule default_schedule(const Shape& s, ir::TargetKind t) const override { return b_.default_schedule(s, t); }
  void fill_inputs(const Shape& s, std::mt19937_64& rng, std::span<HostArg> a) const override {
    b_.fill_inputs(s, rng, a);
  }
  Status reference(const Shape& s, std::span<HostArg> a) const override { return b_.reference(s, a); }
  std::vector<Shape> test_shapes() const override { return b_.test_shapes(); }

  Result<Generated> generate(const Shape& s, const Schedule& sch, ir::TargetKind t) const override {
    LOOM_ASSIGN_OR_RETURN(Generated g, b_.generate(s, sch, t));
    Schedule gpu = b_.default_schedule(s, ir::TargetKind::kAmdgpu);
    gpu["splits"] = sch.at("splits");
    LOOM_ASSIGN_OR_RETURN(Generated a, b_.generate(s, gpu, ir::TargetKind::kAmdgpu));
    auto is_combine = [](const auto& k) { return k->name == "attention_combine"; };
    auto ck = std::find_if(g.module.kernels.begin(), g.module.kernels.end(), is_combine);
    auto ak = std::find_if(a.module.kernels.begin(), a.module.kernels.end(), is_combine);
    if (ck == g.module.kernels.end() || ak == a.module.kernels.end())
      return internal_error("no attention_combine kernel to replace");
    *ck = std::move(*ak);
    for (KernelLaunch& l : g.launches)
      for (const KernelLaunch& al : a.launches)
        if (l.kernel == "attention_combine" && al.kernel == l.kernel) l = al;
    return g;
  }

 private:
  const OpSpec& b_;
};

TEST(AmdgpuCombine, MatchesTheReferenceOnTheCpu) {
  const OpSpec* base = find_op("attention_decode");
  ASSERT_NE(base, nullptr);
  AmdgpuCombineOnCpu op(*base);
  auto dev = OpDevice::open("cpu", 2);
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  int checked = 0;
  for (const Shape& s : op.test_shapes()) {
    for (int64_t splits : {2, 8}) {
      Schedule sch = op.default_schedule(s, ir::TargetKind::kCpp);
      sch["splits"] = splits;
      sch["exact"] = 0;
      CheckResult r = check_op(op, s, sch, **dev, 17 + static_cast<uint64_t>(checked++));
      EXPECT_TRUE(r.passed) << s.key() << " splits " << splits << ": " << r.message;
    }
  }
  EXPECT_GE(checked, 8);
}

}  // namespace
}  // namespace loom::kernels
