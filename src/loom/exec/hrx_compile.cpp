// The HRX backend's plan compile: every op call's kernels generated (or taken from the kernel
// store), merged into one module, compiled once, and the launches bound to device addresses.
#include <algorithm>
#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "loom/base/log.h"
#include "loom/exec/hrx_plan.h"
#include "loom/ir/ir.h"
#include "loom/kernels/launch_args.h"
#include "loom/store/load.h"
#include "loom/store/store.h"

namespace loom::exec::hrx_detail {
namespace {

using kernels::ArgRole;

template <typename P>
void mark_cost(P& pd, const OpCall& call) {
  const kernels::Cost c = call.op->cost(call.shape);
  pd.bytes = c.bytes;
  pd.flops = c.flops;
}

}  // namespace

Result<uint64_t> plan_scratch(const hrx::Device& dev, Plan& plan, uint64_t bytes) {
  LOOM_ASSIGN_OR_RETURN(hrx::Buffer b, hrx::Buffer::alloc(dev, std::max<uint64_t>(bytes, 4)));
  plan.scratch.push_back(std::move(b));
  return plan.scratch.back().address();
}

Result<std::unique_ptr<Plan>> compile_plan(const hrx::Device& dev, std::set<std::string>& stored_used,
                                           std::unique_ptr<Plan> plan, std::vector<OpCall> calls) {
  const ir::TargetKind target = dev.target();
  ir::Module merged;
  merged.source_name = fmt::format("step of {} tokens", plan->n_padded);
  struct Pending {
    std::string kernel;
    hrx::Kernel direct;  // a stored text kernel, loaded as a module of its own
    bool has_direct = false;
    kernels::KernelLaunch launch;
    std::vector<uint64_t> addrs;  // per op argument
    std::vector<ir::Type> scalar_types;
    std::string label;
    int32_t dump_value = -1;
    std::string op;
    double bytes = 0, flops = 0;
  };
  std::vector<Pending> pending;
  std::map<std::string, std::string> renamed;  // op|shape|schedule|kernel -> merged name
  const std::string arch = store::device_arch_of(dev.props());
  for (OpCall& call : calls) {
    Status v = call.op->validate(call.shape);
    if (!v.ok()) return std::move(v).with_context(call.label);
    kernels::Schedule sched = call.op->default_schedule(call.shape, target);
    LOOM_ASSIGN_OR_RETURN(kernels::Schedule forced, kernels::schedule_override(call.op->name()));
    for (const auto& [knob, value] : forced) sched[knob] = value;
    std::string key = fmt::format("{}|{}|{}", call.op->name(), call.shape.key(), kernels::schedule_key(sched));
    // The kernel store (loom evolve): its best kernel for this op, shape and device replaces
    // the default schedule; a store that cannot be read, or a kernel that does not build,
    // leaves the default in place (with a warning).
    std::optional<store::Instance> stored;
    if (auto sk = store::best_kernel(call.op->name(), call.shape, arch); !sk.ok()) {
      log_warn("kernel store: {}", sk.status().to_string());
    } else if (*sk) {
      auto inst = (*sk)->instantiate(*call.op, call.shape, target);
      if (!inst.ok()) {
        log_warn("kernel store: {} for {} {{{}}}: {}; using the default schedule", (*sk)->id(), call.op->name(),
                      call.shape.key(), inst.status().to_string());
      } else {
        stored = std::move(*inst);
        key = fmt::format("{}|{}|{}", call.op->name(), call.shape.key(), (*sk)->id());
        if (stored_used.insert(key).second)
          std::fprintf(stderr, "loom: kernel store: %s for %s {%s} (%.2fx over the default schedule when stored)\n",
                       (*sk)->id().c_str(), std::string(call.op->name()).c_str(), call.shape.key().c_str(), (*sk)->speedup);
      }
    }
    std::vector<kernels::ArgSpec> args = call.op->args(call.shape);
    std::vector<uint64_t> addrs(args.size(), 0);
    for (size_t i = 0; i < args.size(); ++i) {
      const kernels::ArgSpec& a = args[i];
      if (a.kind != kernels::ArgKind::kBuffer) continue;
      if (a.role == ArgRole::kScratch) {
        LOOM_ASSIGN_OR_RETURN(addrs[i], plan_scratch(dev, *plan, static_cast<uint64_t>(a.bytes)));
        continue;
      }
      auto it = call.bind.find(a.name);
      if (it == call.bind.end())
        return internal_error("{}: op {} argument '{}' is not bound", call.label, call.op->name(), a.name);
      addrs[i] = it->second;
    }
    if (stored && store::is_text_kind(stored->kind)) {
      // Text from the store (C++, PTX, CUDA C++): a module of its own, loaded the way evolve's
      // evaluator loaded it when it measured the kernel (store/load.h).
      auto m = store::load_text_module(dev, *stored);
      if (!m.ok()) return std::move(m).status().with_context(call.label + ": stored kernel");
      for (size_t li = 0; li < stored->launches.size(); ++li) {
        const kernels::KernelLaunch& kl = stored->launches[li];
        Pending pd;
        LOOM_ASSIGN_OR_RETURN(pd.direct, m->kernel(kl.kernel));
        pd.has_direct = true;
        pd.kernel = kl.kernel;
        pd.launch = kl;
        pd.addrs = addrs;
        if (li < stored->scalar_types.size()) pd.scalar_types = stored->scalar_types[li];  // as the text declares them
        pd.label = call.label;
        pd.op = std::string(call.op->name());
        pending.push_back(std::move(pd));
      }
      if (!stored->launches.empty()) {
        pending.back().dump_value = call.out_value;
        mark_cost(pending.back(), call);
      }
      continue;
    }
    auto gen = stored ? Result<kernels::Generated>(std::move(stored->gen)) : call.op->generate(call.shape, sched, target);
    if (!gen.ok()) return std::move(gen).status().with_context(call.label);
    kernels::Generated g = std::move(gen).value();
    for (const kernels::KernelLaunch& kl : g.launches) {
      const std::string kkey = key + "|" + kl.kernel;
      auto r = renamed.find(kkey);
      ir::Kernel* k = nullptr;
      if (r == renamed.end()) {
        auto owned = std::find_if(g.module.kernels.begin(), g.module.kernels.end(),
                                  [&](const std::unique_ptr<ir::Kernel>& x) { return x && x->name == kl.kernel; });
        if (owned == g.module.kernels.end())
          return internal_error("{}: generated module lacks kernel {}", call.label, kl.kernel);
        std::string name = fmt::format("k{}_{}", renamed.size(), kl.kernel);
        (*owned)->name = name;
        k = owned->get();
        merged.kernels.push_back(std::move(*owned));
        r = renamed.emplace(kkey, name).first;
      } else {
        k = merged.find(r->second);
      }
      Pending pd;
      pd.kernel = r->second;
      pd.launch = kl;
      pd.addrs = addrs;
      auto types = kernels::scalar_param_types(*k, kl);
      if (!types.ok()) return std::move(types).status().with_context(call.label);
      pd.scalar_types = std::move(types).value();
      pd.label = call.label;
      pd.op = std::string(call.op->name());
      pending.push_back(std::move(pd));
    }
    if (!g.launches.empty()) {
      pending.back().dump_value = call.out_value;
      mark_cost(pending.back(), call);
    }
  }
  Progress progress(fmt::format("compiling {} kernels for {}", merged.kernels.size(), dev.props().spec), 1);
  auto mod = hrx::Module::compile(dev, merged);
  progress.finish();
  if (!mod.ok()) return std::move(mod).status().with_context("compiling the step's kernels");
  for (Pending& pd : pending) {
    BoundLaunch bl;
    if (pd.has_direct) {
      bl.kernel = std::move(pd.direct);
    } else {
      LOOM_ASSIGN_OR_RETURN(bl.kernel, mod->kernel(pd.kernel));
    }
    bl.grid = hrx::Dim3(pd.launch.grid[0], pd.launch.grid[1], pd.launch.grid[2]);
    bl.block = hrx::Dim3(pd.launch.block[0], pd.launch.block[1], pd.launch.block[2]);
    auto args = kernels::bind_launch_args(pd.launch, pd.addrs, pd.scalar_types);
    if (!args.ok()) return std::move(args).status().with_context(pd.label);
    bl.args = std::move(args).value();
    bl.label = std::move(pd.label);
    bl.dump_value = pd.dump_value;
    bl.op = pd.op;
    bl.bytes = pd.bytes;
    bl.flops = pd.flops;
    plan->launches.push_back(std::move(bl));
  }
  return plan;
}

}  // namespace loom::exec::hrx_detail
