// graph_compute of ggml-hrx (see graph.h).
#include "ggml_hrx/graph.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>

#include <fmt/format.h>

#include "ggml_hrx/lower.h"

namespace loom::ggml_hrx {
namespace {

using exec::hrx_detail::BoundLaunch;
using exec::hrx_detail::Plan;

bool computes(const ggml_tensor* node) { return !is_noop(node) && (node->flags & GGML_TENSOR_FLAG_COMPUTE); }

template <typename T>
void put(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_tensor(std::string& key, const ggml_tensor* t) {
  put(key, t->type);
  put(key, t->ne);
  put(key, t->nb);
  put(key, t->data);
}

// Everything a plan bakes in: per computed node its op, parameters and tensors (types,
// shapes, strides, addresses).
std::string plan_key(ggml_cgraph* g) {
  std::string key;
  for (int i = 0; i < ggml_graph_n_nodes(g); ++i) {
    const ggml_tensor* n = ggml_graph_node(g, i);
    if (!computes(n)) continue;
    put(key, n->op);
    put(key, n->op_params);
    put_tensor(key, n);
    for (const ggml_tensor* s : n->src)
      if (s) put_tensor(key, s);
    key.push_back('|');
  }
  return key;
}

}  // namespace

Result<std::unique_ptr<GraphRunner>> GraphRunner::create(DeviceContext& dc) {
  std::unique_ptr<GraphRunner> r(new GraphRunner(dc));
  LOOM_ASSIGN_OR_RETURN(r->stream_, hrx::Stream::create(dc.dev));
  return r;
}

Result<std::vector<exec::OpCall>> GraphRunner::lower(ggml_cgraph* g, uint64_t* scratch_bytes) {
  std::vector<exec::OpCall> calls;
  // Scratch is carved from the arena in order; past its end the addresses are placeholders,
  // and the caller grows the arena and lowers again.
  *scratch_bytes = 0;
  auto scratch = [&](uint64_t bytes) -> Result<uint64_t> {
    const uint64_t at = *scratch_bytes;
    *scratch_bytes += (bytes + 255) / 256 * 256;
    return arena_.address() + at;
  };
  for (int i = 0; i < ggml_graph_n_nodes(g); ++i) {
    const ggml_tensor* n = ggml_graph_node(g, i);
    if (!computes(n)) continue;
    // The scheduler places a node here only with its tensors in this device's buffers
    // (supports_buft); anything else is a caller's bug, not garbage to read.
    for (const ggml_tensor* t : std::initializer_list<const ggml_tensor*>{n, n->src[0], n->src[1], n->src[2]})
      if (t && tensor_device(t) != &dc_)
        return failed_precondition("{} ({}): tensor {} is not in an {} buffer", n->name, ggml_op_desc(n), t->name,
                                   dc_.name);
    auto lowered = lower_node(n, dc_.dev.target(), scratch);
    if (!lowered.ok()) return std::move(lowered).status().with_context(fmt::format("node {} ({})", i, n->name));
    for (exec::OpCall& c : *lowered) calls.push_back(std::move(c));
  }
  return calls;
}

Result<std::unique_ptr<Plan>> GraphRunner::build(ggml_cgraph* g) {
  uint64_t need = 0;
  LOOM_ASSIGN_OR_RETURN(std::vector<exec::OpCall> calls, lower(g, &need));
  if (need > arena_.size()) {
    // Every kept plan points into the old arena: they go with it.
    plans_.clear();
    arena_.reset();
    LOOM_ASSIGN_OR_RETURN(arena_, hrx::Buffer::alloc(dc_.dev, std::max(need, 2 * arena_size_)));
    arena_size_ = arena_.size();
    LOOM_ASSIGN_OR_RETURN(calls, lower(g, &need));
  }
  auto plan = std::make_unique<Plan>();
  if (calls.empty()) return plan;
  return exec::hrx_detail::compile_plan(dc_.dev, stored_used_, std::move(plan), std::move(calls));
}

Status GraphRunner::run(Plan& plan) {
  if (plan.graph.raw()) {
    LOOM_RETURN_IF_ERROR(plan.graph.launch(stream_));
  } else {
    for (const BoundLaunch& l : plan.launches) {
      Status s = stream_.launch(l.kernel, l.grid, l.block, l.args);
      if (!s.ok()) return std::move(s).with_context(l.label);
    }
  }
  LOOM_RETURN_IF_ERROR(stream_.synchronize());
  // A first eager run proved the launches; a graph that comes back replays them as one.
  if (++plan.runs == 1 && plan.launches.size() > 1) {
    LOOM_RETURN_IF_ERROR(stream_.begin_capture());
    Status s;
    for (const BoundLaunch& l : plan.launches)
      if (s.ok()) s = stream_.launch(l.kernel, l.grid, l.block, l.args);
    auto captured = stream_.end_capture();
    LOOM_RETURN_IF_ERROR(s);
    if (!captured.ok()) return std::move(captured).status().with_context("capturing the graph");
    plan.graph = std::move(captured).value();
  }
  return Status();
}

Status GraphRunner::compute(ggml_cgraph* g) {
  std::string key = plan_key(g);
  auto it = plans_.begin();
  while (it != plans_.end() && it->key != key) ++it;
  if (it == plans_.end()) {
    LOOM_ASSIGN_OR_RETURN(auto plan, build(g));
    plans_.push_front({std::move(key), std::move(plan)});
    if (plans_.size() > kMaxPlans) plans_.pop_back();
  } else if (it != plans_.begin()) {
    plans_.splice(plans_.begin(), plans_, it);
  }
  return run(*plans_.front().plan);
}

}  // namespace loom::ggml_hrx
