// The kernels that ship with Loom (see shipped.h).
#include "loom/store/shipped.h"

#include <algorithm>
#include <mutex>

#include <nlohmann/json.hpp>

#include "loom/base/options.h"
#include "loom/codegen/cpp/host_compiler.h"
#include "loom/store/embedded.h"
#include "loom/store/kernel_json.h"

namespace loom::store {

namespace {

using Json = nlohmann::ordered_json;

}  // namespace

Result<ShippedFile> parse_shipped(std::string_view name, std::string_view text) {
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return data_loss("{}: not a JSON object", name);
  if (j.value("format", 0) != 1) return data_loss("{}: format {} (this Loom reads format 1)", name, j.value("format", 0));
  ShippedFile f;
  f.name = std::string(name);
  f.device_arch = j.value("device_arch", "");
  if (f.device_arch.empty()) return data_loss("{}: no device_arch", name);
  f.searched_on = j.value("searched_on", "");
  f.commit = j.value("commit", "");
  f.date = j.value("date", "");
  f.command = j.value("command", "");
  if (!j.contains("kernels") || !j["kernels"].is_array()) return data_loss("{}: no kernels array", name);
  for (size_t i = 0; i < j["kernels"].size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(StoredKernel k, kernel_from_json(j["kernels"][i], fmt::format("{}: kernel {}", name, i)));
    k.device_arch = f.device_arch;
    k.origin = fmt::format("shipped:{}", name);
    for (const StoredKernel& o : f.kernels)
      if (o.op == k.op && o.shape_key == k.shape_key)
        return data_loss("{}: {} {{{}}} is listed twice", name, k.op, k.shape_key);
    f.kernels.push_back(std::move(k));
  }
  return f;
}

std::string shipped_json(const ShippedFile& f) {
  std::vector<const StoredKernel*> ks;
  for (const StoredKernel& k : f.kernels) ks.push_back(&k);
  std::sort(ks.begin(), ks.end(), [](const StoredKernel* a, const StoredKernel* b) {
    return std::tie(a->op, a->shape_key) < std::tie(b->op, b->shape_key);
  });
  Json arr = Json::array();
  for (const StoredKernel* k : ks) arr.push_back(kernel_json(*k));
  Json j{{"format", 1},          {"device_arch", f.device_arch}, {"searched_on", f.searched_on},
         {"commit", f.commit},   {"date", f.date},               {"command", f.command},
         {"kernels", std::move(arr)}};
  return j.dump(1) + "\n";
}

Result<const std::vector<ShippedFile>*> shipped_files() {
  static std::once_flag once;
  static std::vector<ShippedFile> files;
  static Status error;
  std::call_once(once, [] {
    for (size_t i = 0; i < kShippedKernelFileCount; ++i) {
      const EmbeddedFile& e = kShippedKernelFiles[i];
      Result<ShippedFile> f = parse_shipped(e.name, std::string_view(e.text, e.size));
      if (!f.ok()) {
        error = std::move(f).status().with_context("the shipped kernels (data/kernels)");
        files.clear();
        return;
      }
      files.push_back(std::move(f).value());
    }
  });
  if (!error.ok()) return error;
  return &files;
}

std::string shipped_arch_of(const hrx::DeviceProps& p) {
  if (p.driver == hrx::DriverKind::kCuda) return fmt::format("cuda:{}", p.arch);
  if (p.driver == hrx::DriverKind::kAmdgpu) return fmt::format("amdgpu:{}", p.arch);
  const std::string sel = codegen::selected_cpu_arch();
  if (sel != "native") return "cpu:" + sel;
  for (const char* level : {"x86-64-v4", "x86-64-v3", "x86-64-v2"})
    if (codegen::check_cpu_arch(level).ok()) return std::string("cpu:") + level;
  return "cpu:native";
}

std::optional<StoredKernel> find_shipped(const std::vector<ShippedFile>& files, std::string_view op,
                                         const kernels::Shape& shape, std::string_view arch) {
  const std::string key = shape.key();
  for (const ShippedFile& f : files) {
    if (f.device_arch != arch) continue;
    for (const StoredKernel& k : f.kernels)
      if (k.op == op && k.shape_key == key) return k;
  }
  return std::nullopt;
}

Result<std::optional<StoredKernel>> shipped_kernel(std::string_view op, const kernels::Shape& shape,
                                                   std::string_view arch) {
  if (opt::get_bool(opt::Opt::kNoKernelStore) || opt::get_bool(opt::Opt::kNoShippedKernels))
    return std::optional<StoredKernel>();
  LOOM_ASSIGN_OR_RETURN(const std::vector<ShippedFile>* files, shipped_files());
  return find_shipped(*files, op, shape, arch);
}

}  // namespace loom::store
