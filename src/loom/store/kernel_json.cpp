// A stored kernel as JSON and back (see kernel_json.h).
#include "loom/store/kernel_json.h"

#include "loom/base/version.h"

namespace loom::store {

nlohmann::ordered_json kernel_json(const StoredKernel& k) {
  return {{"id", k.id()},
          {"op", k.op},
          {"shape", k.shape_key},
          {"shape_class", k.shape_class},
          {"device_arch", k.device_arch},
          {"loom_version", k.loom_version},
          {"kind", cand_kind_name(k.cand.kind)},
          {"body", nlohmann::ordered_json::parse(k.cand.body())},
          {"speedup", k.speedup},
          {"median_us", k.median_us},
          {"baseline_us", k.baseline_us},
          {"job", k.job},
          {"candidate", k.candidate},
          {"seq", k.seq}};
}

Result<StoredKernel> kernel_from_json(const nlohmann::json& j, std::string_view where) {
  if (!j.is_object()) return data_loss("{}: not an object", where);
  StoredKernel k;
  k.op = j.value("op", "");
  k.shape_key = j.value("shape", "");
  if (k.op.empty() || k.shape_key.empty()) return data_loss("{}: lacks op or shape", where);
  if (!kernels::find_op(k.op)) return data_loss("{} names unknown op '{}'", where, k.op);
  auto shape = kernels::Shape::parse(k.shape_key);
  if (!shape.ok()) return std::move(shape).status().with_context(std::string(where));
  k.shape_class = shape_class(k.op, *shape);
  k.device_arch = j.value("device_arch", "");
  k.loom_version = j.value("loom_version", std::string(loom_version()));
  if (!j.contains("body")) return data_loss("{} ({} {{{}}}) has no body", where, k.op, k.shape_key);
  auto cand = Candidate::from_body(j["body"].dump());
  if (!cand.ok()) return std::move(cand).status().with_context(std::string(where));
  k.cand = std::move(cand).value();
  k.speedup = j.value("speedup", 1.0);
  k.median_us = j.value("median_us", 0.0);
  k.baseline_us = j.value("baseline_us", 0.0);
  k.job = j.value("job", int64_t{0});
  k.candidate = j.value("candidate", int64_t{0});
  k.seq = j.value("seq", -1);
  return k;
}

}  // namespace loom::store
