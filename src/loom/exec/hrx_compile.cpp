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
#include "loom/store/shipped.h"
#include "loom/store/store.h"

namespace loom::exec::hrx_detail {

Result<uint64_t> plan_scratch(const hrx::Device& dev, Plan& plan, uint64_t bytes) {
  LOOM_ASSIGN_OR_RETURN(hrx::Buffer b, hrx::Buffer::alloc(dev, std::max<uint64_t>(bytes, 4)));
  plan.scratch.push_back(std::move(b));
  return plan.scratch.back().address();
}

namespace {

using kernels::ArgRole;

// One launch of the plan before the merged module is compiled.
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

// Gathers every call's kernels into one module (each distinct op|shape|schedule|kernel once)
// and the launches that will run them.
class PlanCompiler {
 public:
  PlanCompiler(const hrx::Device& dev, std::set<std::string>& stored_used, Plan& plan)
      : dev_(dev), stored_used_(stored_used), plan_(plan), arch_(store::device_arch_of(dev.props())),
        shipped_arch_(store::shipped_arch_of(dev.props())) {
    merged_.source_name = fmt::format("step of {} tokens", plan.n_padded);
  }

  Status add(const OpCall& call) {
    Status v = call.op->validate(call.shape);
    if (!v.ok()) return std::move(v).with_context(call.label);
    kernels::Schedule sched = call.op->default_schedule(call.shape, dev_.target());
    LOOM_ASSIGN_OR_RETURN(kernels::Schedule forced, kernels::schedule_override(call.op->name()));
    for (const auto& [knob, value] : forced) sched[knob] = value;
    std::string key = fmt::format("{}|{}|{}", call.op->name(), call.shape.key(), kernels::schedule_key(sched));
    std::optional<store::Instance> stored = stored_kernel(call, &key);
    LOOM_ASSIGN_OR_RETURN(std::vector<uint64_t> addrs, addresses(call));
    const size_t first = pending_.size();
    if (stored && store::is_text_kind(stored->kind)) {
      LOOM_RETURN_IF_ERROR(add_stored_text(call, *stored, addrs));
    } else {
      auto gen = stored ? Result<kernels::Generated>(std::move(stored->gen))
                        : call.op->generate(call.shape, sched, dev_.target());
      if (!gen.ok()) return std::move(gen).status().with_context(call.label);
      LOOM_RETURN_IF_ERROR(add_generated(call, std::move(gen).value(), key, addrs));
    }
    if (pending_.size() > first) {  // the call's last launch carries its value dump and cost
      Pending& last = pending_.back();
      last.dump_value = call.out_value;
      const kernels::Cost c = call.op->cost(call.shape);
      last.bytes = c.bytes;
      last.flops = c.flops;
    }
    return Status();
  }

  // One compile for the whole plan, then every launch bound to its kernel and arguments.
  Status finish() {
    Progress progress(fmt::format("compiling {} kernels for {}", merged_.kernels.size(), dev_.props().spec), 1);
    auto mod = hrx::Module::compile(dev_, merged_);
    progress.finish();
    if (!mod.ok()) return std::move(mod).status().with_context("compiling the step's kernels");
    for (Pending& pd : pending_) {
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
      plan_.launches.push_back(std::move(bl));
    }
    return Status();
  }

 private:
  // Tuned kernels: the user's kernel store (loom evolve) for this shape, then the kernels that
  // ship with Loom for this device's architecture key (store/shipped.h), then the user's store's
  // kernel for another shape of the class; any of them replaces the default schedule. A store
  // that cannot be read, or a kernel that does not build, leaves the default in place (with a
  // warning).
  std::optional<store::Instance> stored_kernel(const OpCall& call, std::string* key) {
    // LOOM_LOG=debug lists the op calls a plan makes: the shapes worth a search.
    log_debug("plan call: {} --shape {}", call.op->name(), call.shape.key());
    std::optional<store::StoredKernel> found;
    auto sk = store::best_kernel(call.op->name(), call.shape, arch_);
    if (!sk.ok())
      log_warn("kernel store: {}", sk.status().to_string());
    else
      found = std::move(*sk);
    // The user's kernel for this very shape wins; a shipped kernel for this shape wins over one
    // the user's store has for another shape of its class.
    if (!found || found->shape_key != call.shape.key()) {
      auto shipped = store::shipped_kernel(call.op->name(), call.shape, shipped_arch_);
      if (!shipped.ok()) {
        if (shipped_warned_.insert(shipped.status().to_string()).second)
          log_warn("shipped kernels: {}", shipped.status().to_string());
      } else if (*shipped) {
        found = std::move(*shipped);
      }
    }
    if (!found) return std::nullopt;
    const bool is_shipped = found->origin.rfind("shipped:", 0) == 0;
    auto inst = found->instantiate(*call.op, call.shape, dev_.target());
    if (!inst.ok()) {
      log_warn("{}: {} for {} {{{}}}: {}; using the default schedule", is_shipped ? "shipped kernel" : "kernel store",
               found->id(), call.op->name(), call.shape.key(), inst.status().to_string());
      return std::nullopt;
    }
    *key = fmt::format("{}|{}|{}|{}", call.op->name(), call.shape.key(), found->origin, found->id());
    store::record_use(*found, call.shape.key());
    if (stored_used_.insert(*key).second) {
      if (is_shipped)
        std::fprintf(stderr, "loom: shipped kernel: %s %s for %s {%s} (%.2fx over the default schedule where it was searched)\n",
                     found->origin.substr(8).c_str(), found->id().c_str(), std::string(call.op->name()).c_str(),
                     call.shape.key().c_str(), found->speedup);
      else
        std::fprintf(stderr, "loom: kernel store: %s for %s {%s} (%.2fx over the default schedule when stored)\n",
                     found->id().c_str(), std::string(call.op->name()).c_str(), call.shape.key().c_str(), found->speedup);
    }
    return std::move(*inst);
  }

  // The device address of every buffer argument (scratch allocated here), in op argument order.
  Result<std::vector<uint64_t>> addresses(const OpCall& call) {
    std::vector<kernels::ArgSpec> args = call.op->args(call.shape);
    std::vector<uint64_t> addrs(args.size(), 0);
    for (size_t i = 0; i < args.size(); ++i) {
      const kernels::ArgSpec& a = args[i];
      if (a.kind != kernels::ArgKind::kBuffer) continue;
      if (a.role == ArgRole::kScratch) {
        LOOM_ASSIGN_OR_RETURN(addrs[i], plan_scratch(dev_, plan_, static_cast<uint64_t>(a.bytes)));
        continue;
      }
      auto it = call.bind.find(a.name);
      if (it == call.bind.end())
        return internal_error("{}: op {} argument '{}' is not bound", call.label, call.op->name(), a.name);
      addrs[i] = it->second;
    }
    return addrs;
  }

  // Text from the store (C++, PTX, CUDA C++): a module of its own, loaded the way evolve's
  // evaluator loaded it when it measured the kernel (store/load.h).
  Status add_stored_text(const OpCall& call, const store::Instance& stored, const std::vector<uint64_t>& addrs) {
    auto m = store::load_text_module(dev_, stored);
    if (!m.ok()) return std::move(m).status().with_context(call.label + ": stored kernel");
    for (size_t li = 0; li < stored.launches.size(); ++li) {
      const kernels::KernelLaunch& kl = stored.launches[li];
      Pending pd;
      LOOM_ASSIGN_OR_RETURN(pd.direct, m->kernel(kl.kernel));
      pd.has_direct = true;
      pd.kernel = kl.kernel;
      pd.launch = kl;
      pd.addrs = addrs;
      if (li < stored.scalar_types.size()) pd.scalar_types = stored.scalar_types[li];  // as the text declares them
      pd.label = call.label;
      pd.op = std::string(call.op->name());
      pending_.push_back(std::move(pd));
    }
    return Status();
  }

  // Loom IR kernels: merged into the plan's module, each distinct one once.
  Status add_generated(const OpCall& call, kernels::Generated g, const std::string& key, const std::vector<uint64_t>& addrs) {
    for (const kernels::KernelLaunch& kl : g.launches) {
      const std::string kkey = key + "|" + kl.kernel;
      auto r = renamed_.find(kkey);
      ir::Kernel* k = nullptr;
      if (r == renamed_.end()) {
        auto owned = std::find_if(g.module.kernels.begin(), g.module.kernels.end(),
                                  [&](const std::unique_ptr<ir::Kernel>& x) { return x && x->name == kl.kernel; });
        if (owned == g.module.kernels.end())
          return internal_error("{}: generated module lacks kernel {}", call.label, kl.kernel);
        std::string name = fmt::format("k{}_{}", renamed_.size(), kl.kernel);
        (*owned)->name = name;
        k = owned->get();
        merged_.kernels.push_back(std::move(*owned));
        r = renamed_.emplace(kkey, name).first;
      } else {
        k = merged_.find(r->second);
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
      pending_.push_back(std::move(pd));
    }
    return Status();
  }

  const hrx::Device& dev_;
  std::set<std::string>& stored_used_;
  Plan& plan_;
  const std::string arch_, shipped_arch_;
  std::set<std::string> shipped_warned_;
  ir::Module merged_;
  std::vector<Pending> pending_;
  std::map<std::string, std::string> renamed_;  // op|shape|schedule|kernel -> merged name
};

}  // namespace

Result<std::unique_ptr<Plan>> compile_plan(const hrx::Device& dev, std::set<std::string>& stored_used,
                                           std::unique_ptr<Plan> plan, std::vector<OpCall> calls) {
  PlanCompiler c(dev, stored_used, *plan);
  for (const OpCall& call : calls) LOOM_RETURN_IF_ERROR(c.add(call));
  LOOM_RETURN_IF_ERROR(c.finish());
  return plan;
}

}  // namespace loom::exec::hrx_detail
