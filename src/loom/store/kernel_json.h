// A stored kernel as JSON and back: the entries `loom kernels export` writes and `import` reads,
// and those of the shipped kernel files (shipped.h).
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "loom/base/status.h"
#include "loom/store/store.h"

namespace loom::store {

// {"id", "op", "shape", "shape_class", "device_arch", "loom_version", "kind", "body", "speedup",
//  "median_us", "baseline_us", "job", "candidate", "seq"}
nlohmann::ordered_json kernel_json(const StoredKernel& k);

// Needs op (a known one), shape and body; the shape class is computed from the shape, the other
// fields default (device_arch empty, loom_version this Loom's). `where` names the entry in
// errors ("file.json: kernel 3").
Result<StoredKernel> kernel_from_json(const nlohmann::json& j, std::string_view where);

}  // namespace loom::store
