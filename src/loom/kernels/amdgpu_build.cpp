// Builds the op library for AMDGPU and reads each kernel's resources from its code object. One
// job per op shape (generate, emit, llc, lld, read the metadata), run `threads` at a time: llc
// is a separate process, so the pool's threads mostly wait on it.
#include "loom/kernels/amdgpu_build.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "loom/base/thread_pool.h"
#include "loom/codegen/amdgpu/amdgpu_emitter.h"
#include "loom/codegen/target.h"
#include "loom/kernels/op_list.h"

namespace loom::kernels {
namespace {

struct Job {
  const OpSpec* op = nullptr;
  Shape shape;
};

struct JobResult {
  std::vector<AmdgpuKernelReport> kernels;
  Status refused, failed;
};

int launch_threads(const KernelLaunch& l) { return static_cast<int>(l.block[0] * l.block[1] * l.block[2]); }

// The code object's kernels, checked against the module (every kernel present) and the target's
// limits (wave32, at most 64 KiB of LDS per workgroup).
Result<std::vector<AmdgpuKernelReport>> kernel_reports(const Job& j, const Schedule& sc, const Generated& g,
                                                       const codegen::AmdgpuCodeObjectInfo& info,
                                                       const codegen::AmdgpuArchLimits& limits) {
  std::vector<AmdgpuKernelReport> out;
  for (const auto& k : g.module.kernels) {
    auto it = std::find_if(info.kernels.begin(), info.kernels.end(),
                           [&](const codegen::AmdgpuKernelInfo& i) { return i.name == k->name; });
    if (it == info.kernels.end()) return internal_error("kernel {} is missing from the code object's metadata", k->name);
    if (it->wavefront_size != 32) return internal_error("kernel {} has wavefront size {}, not 32", k->name, it->wavefront_size);
    if (it->lds_bytes > limits.lds_per_workgroup)
      return resource_exhausted("kernel {} uses {} bytes of LDS, more than the {} a workgroup may have", k->name,
                                it->lds_bytes, limits.lds_per_workgroup);
    AmdgpuKernelReport r{std::string(j.op->name()), j.shape.key(), schedule_key(sc), *it, 0, {}};
    for (const KernelLaunch& l : g.launches)
      if (l.kernel == k->name) r.block_threads = std::max(r.block_threads, launch_threads(l));
    if (r.block_threads > it->max_flat_workgroup_size)
      return resource_exhausted("kernel {} is launched with {} threads, its code object allows {}", k->name,
                                r.block_threads, it->max_flat_workgroup_size);
    r.occupancy = codegen::amdgpu_occupancy(*it, limits, r.block_threads);
    out.push_back(std::move(r));
  }
  return out;
}

// Verified, emitted with each kernel's launch bound (the largest block its launches use, as a
// runtime that knows the launches compiles them), and compiled.
Result<std::vector<uint8_t>> compile(const Generated& g, std::string_view arch) {
  LOOM_RETURN_IF_ERROR(codegen::amdgpu_target().verify(g.module, arch));
  codegen::AmdgpuEmitOptions opts;
  for (const KernelLaunch& l : g.launches) {
    int& n = opts.max_block_threads[l.kernel];
    n = std::max(n, launch_threads(l));
  }
  LOOM_ASSIGN_OR_RETURN(std::string text, codegen::emit_amdgpu_llvm(g.module, opts));
  return codegen::compile_amdgpu_code_object(text, arch);
}

JobResult run_job(const Job& j, std::string_view arch, const codegen::AmdgpuArchLimits& limits) {
  JobResult res;
  const Schedule sc = j.op->default_schedule(j.shape, ir::TargetKind::kAmdgpu);
  auto g = j.op->generate(j.shape, sc, ir::TargetKind::kAmdgpu);
  if (!g.ok()) {
    (g.status().code() == StatusCode::kUnimplemented ? res.refused : res.failed) = g.status();
    return res;
  }
  auto binary = compile(*g, arch);
  if (!binary.ok()) {
    res.failed = binary.status();
    return res;
  }
  auto info = codegen::read_amdgpu_code_object(*binary);
  if (!info.ok()) {
    res.failed = info.status();
    return res;
  }
  auto reports = kernel_reports(j, sc, *g, *info, limits);
  if (!reports.ok()) {
    res.failed = reports.status();
    return res;
  }
  res.kernels = std::move(*reports);
  return res;
}

// The first line of a status message (llc's output follows on the next lines).
std::string first_line(const Status& s) {
  std::string m = s.to_string();
  return m.substr(0, m.find('\n'));
}

}  // namespace

Result<AmdgpuBuildReport> build_ops_amdgpu(std::string_view arch, std::string_view op_filter, int threads) {
  LOOM_RETURN_IF_ERROR(codegen::amdgpu_target().verify(ir::Module{}, arch));  // checks the arch
  LOOM_ASSIGN_OR_RETURN(codegen::AmdgpuArchLimits limits, codegen::amdgpu_arch_limits(arch));
  // The toolchain is needed by every job: a missing llc is one error, not one per shape.
  LOOM_RETURN_IF_ERROR(codegen::compile_amdgpu_code_object("", arch));
  std::vector<Job> jobs;
  bool found = op_filter.empty();
  for (const OpSpec* op : all_ops()) {
    if (!op_filter.empty() && op->name() != op_filter) continue;
    found = true;
    for (const Shape& s : op->test_shapes()) jobs.push_back({op, s});
  }
  if (!found) return invalid_argument("unknown op '{}' (see `loom ops list`)", op_filter);
  std::vector<JobResult> results(jobs.size());
  ThreadPool pool(std::max(1, threads));
  pool.parallel_for(static_cast<int64_t>(jobs.size()), [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) results[i] = run_job(jobs[i], arch, limits);
  });
  AmdgpuBuildReport r;
  r.arch = std::string(arch);
  r.shapes = static_cast<int>(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const std::string op(jobs[i].op->name()), shape = jobs[i].shape.key();
    for (auto& k : results[i].kernels) r.kernels.push_back(std::move(k));
    if (!results[i].refused.ok()) r.refused.push_back({op, shape, first_line(results[i].refused)});
    if (!results[i].failed.ok()) r.failed.push_back({op, shape, first_line(results[i].failed)});
  }
  return r;
}

std::string format_amdgpu_report(const AmdgpuBuildReport& r) {
  std::string out = fmt::format(
      "# loom ops build --target amdgpu:{}: every op at its test shapes, default amdgpu schedule.\n"
      "# op shape [schedule] kernel: block threads, VGPRs, SGPRs, LDS bytes, scratch bytes per lane,\n"
      "# VGPR/SGPR spills, waves per SIMD (what bounds them: vgpr, lds, or - for the maximum)\n",
      r.arch);
  for (const AmdgpuKernelReport& k : r.kernels) {
    const auto& i = k.info;
    out += fmt::format("{} {} [{}] {}: block {} vgpr {} sgpr {} lds {} scratch {} spill {}/{} waves {} ({})\n", k.op,
                       k.shape, k.schedule, i.name, k.block_threads, i.vgpr_count, i.sgpr_count, i.lds_bytes,
                       i.scratch_bytes, i.vgpr_spill_count, i.sgpr_spill_count, k.occupancy.waves_per_simd,
                       k.occupancy.limiter);
  }
  for (const AmdgpuShapeProblem& p : r.refused) out += fmt::format("refused {} {}: {}\n", p.op, p.shape, p.reason);
  for (const AmdgpuShapeProblem& p : r.failed) out += fmt::format("FAILED {} {}: {}\n", p.op, p.shape, p.reason);
  std::set<std::string> ops;
  for (const AmdgpuKernelReport& k : r.kernels) ops.insert(k.op);
  out += fmt::format("# {} kernels built ({} ops, {} op shapes), {} op shapes refused, {} failed\n", r.kernels.size(),
                     ops.size(), r.shapes - static_cast<int>(r.refused.size() + r.failed.size()), r.refused.size(),
                     r.failed.size());
  return out;
}

}  // namespace loom::kernels
