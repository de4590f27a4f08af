// `loom info MODEL.gguf`: architecture, hyper-parameters, tokenizer, chat template and the tensor
// table of a GGUF file, as text or --json. `loom info --flags`: every option of the registry
// (base/options.h) with its default, current value and where that value came from.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "loom/base/options.h"
#include "loom/gguf/gguf.h"

namespace loom::cli {
namespace {

using llm::GgufFile;
using llm::GgufType;
using llm::GgufValue;

// JSON form of a metadata value; arrays longer than `max_elems` are summarized.
nlohmann::ordered_json to_json(const GgufValue& v, size_t max_elems) {
  using json = nlohmann::ordered_json;
  if (auto* u = std::get_if<uint64_t>(&v.v)) return *u;
  if (auto* i = std::get_if<int64_t>(&v.v)) return *i;
  if (auto* d = std::get_if<double>(&v.v)) return *d;
  if (auto* b = std::get_if<bool>(&v.v)) return *b;
  if (auto* s = std::get_if<std::string_view>(&v.v)) return std::string(*s);
  const auto& arr = *std::get<std::shared_ptr<const llm::GgufArray>>(v.v);
  if (arr.size() > max_elems) {
    return json{{"array_of", std::string(llm::gguf_type_name(arr.elem_type))}, {"length", arr.size()}};
  }
  json out = json::array();
  for (size_t i = 0; i < arr.size(); ++i) out.push_back(to_json(arr.at(i), max_elems));
  return out;
}

std::string shape_string(const llm::GgufTensor& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", t.shape[i]);
  return s + "]";
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) { b /= 1024; ++u; }
  return u == 0 ? fmt::format("{:.0f} {}", b, units[u]) : fmt::format("{:.2f} {}", b, units[u]);
}

int run_info(const std::string& path, bool json_out) {
  auto file = GgufFile::open(path);
  if (!file.ok()) return report(file.status());
  const GgufFile& f = *file;
  std::string arch(f.architecture());
  std::string tok_model;
  if (auto* v = f.find("tokenizer.ggml.model")) tok_model = v->to_string();
  uint64_t total_bytes = 0, total_elems = 0;
  std::map<std::string, uint64_t> bytes_by_type;
  for (const auto& t : f.tensors()) {
    total_bytes += t.n_bytes;
    total_elems += static_cast<uint64_t>(t.n_elements());
    bytes_by_type[std::string(llm::ggml_type_name(t.type))] += t.n_bytes;
  }
  const GgufValue* tmpl = f.find("tokenizer.chat_template");

  if (json_out) {
    nlohmann::ordered_json j;
    j["file"] = path;
    j["version"] = f.version();
    j["alignment"] = f.alignment();
    j["data_offset"] = f.data_offset();
    j["architecture"] = arch;
    j["name"] = f.find("general.name") ? to_json(*f.find("general.name"), 0) : nlohmann::ordered_json();
    nlohmann::ordered_json hp = nlohmann::ordered_json::object();
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : f.metadata()) {
      meta[k] = to_json(v, 64);
      if (!arch.empty() && k.rfind(arch + ".", 0) == 0) hp[k.substr(arch.size() + 1)] = to_json(v, 64);
    }
    j["hyperparameters"] = hp;
    j["tokenizer"] = {{"model", f.find("tokenizer.ggml.model") ? to_json(*f.find("tokenizer.ggml.model"), 0) : nlohmann::ordered_json()},
                      {"pre", f.find("tokenizer.ggml.pre") ? to_json(*f.find("tokenizer.ggml.pre"), 0) : nlohmann::ordered_json()},
                      {"vocab_size", f.find("tokenizer.ggml.tokens") ? to_json(*f.find("tokenizer.ggml.tokens"), 0)["length"] : nlohmann::ordered_json()}};
    j["chat_template"] = tmpl != nullptr;
    j["metadata"] = meta;
    nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
    for (const auto& t : f.tensors()) {
      tensors.push_back({{"name", t.name}, {"type", std::string(llm::ggml_type_name(t.type))},
                         {"shape", t.shape}, {"bytes", t.n_bytes}, {"offset", t.offset}});
    }
    j["tensors"] = tensors;
    j["total_bytes"] = total_bytes;
    j["total_elements"] = total_elems;
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    return 0;
  }

  std::printf("file:          %s (GGUF v%u, %s)\n", path.c_str(), f.version(), human_bytes(static_cast<double>(f.file_size())).c_str());
  if (auto* n = f.find("general.name")) std::printf("name:          %s\n", n->to_string().c_str());
  std::printf("architecture:  %s\n", arch.empty() ? "(none)" : arch.c_str());
  std::printf("tokenizer:     %s", tok_model.empty() ? "(none)" : tok_model.c_str());
  if (auto* v = f.find("tokenizer.ggml.pre")) std::printf(", pre %s", v->to_string().c_str());
  if (auto* v = f.find("tokenizer.ggml.tokens"); v && v->type == GgufType::ARRAY)
    std::printf(", %zu tokens", (*v->as_array())->size());
  std::printf("\nchat template: %s\n", tmpl ? "yes" : "no");
  std::printf("parameters:    %.1f M in %zu tensors, %s\n", static_cast<double>(total_elems) / 1e6,
              f.tensors().size(), human_bytes(static_cast<double>(total_bytes)).c_str());
  std::printf("\nhyper-parameters:\n");
  for (const auto& [k, v] : f.metadata())
    if (!arch.empty() && k.rfind(arch + ".", 0) == 0) std::printf("  %-40s %s\n", k.c_str(), v.to_string().c_str());
  std::printf("\nother metadata:\n");
  for (const auto& [k, v] : f.metadata())
    if (arch.empty() || k.rfind(arch + ".", 0) != 0) std::printf("  %-40s %s\n", k.c_str(), v.to_string(4).c_str());
  std::printf("\nbytes by type:\n");
  for (const auto& [type, b] : bytes_by_type) std::printf("  %-8s %s\n", type.c_str(), human_bytes(static_cast<double>(b)).c_str());
  std::printf("\n%-40s %-8s %-24s %12s\n", "tensor", "type", "shape", "bytes");
  for (const auto& t : f.tensors())
    std::printf("%-40s %-8s %-24s %12llu\n", t.name.c_str(), std::string(llm::ggml_type_name(t.type)).c_str(),
                shape_string(t).c_str(), static_cast<unsigned long long>(t.n_bytes));
  return 0;
}

// The option table as it stands in this process. Refused environment values are listed with
// their reason (and the default in force), which is why main() lets `info` run despite them.
int run_flags(bool json_out) {
  const std::vector<opt::Resolved> all = opt::registry().list();
  if (json_out) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const opt::Resolved& r : all) {
      const opt::OptionInfo& i = *r.info;
      nlohmann::ordered_json j = {{"name", i.name},
                                  {"env", i.env},
                                  {"flag", i.flag},
                                  {"type", std::string(opt::type_name(i.type))},
                                  {"default", i.def},
                                  {"value", r.value},
                                  {"source", std::string(opt::source_name(r.source))},
                                  {"help", i.help}};
      if (*i.choices) j["choices"] = i.choices;
      if (i.type == opt::Type::kInt) j["range"] = {i.min, i.max};
      if (i.system) j["system"] = true;
      if (i.secret) j["secret"] = true;
      if (!r.error.empty()) j["error"] = r.error;
      arr.push_back(std::move(j));
    }
    nlohmann::ordered_json out = {{"options", arr}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%-22s %-27s %-7s %-10s %-10s %s\n", "option", "environment", "type", "default", "value", "source");
  int errors = 0;
  for (const opt::Resolved& r : all) {
    const opt::OptionInfo& i = *r.info;
    auto shown = [](const std::string& v) { return v.empty() ? std::string("\"\"") : v; };
    std::printf("%-22s %-27s %-7s %-10s %-10s %s%s\n", i.name, *i.env ? i.env : "-",
                std::string(opt::type_name(i.type)).c_str(), shown(i.def).c_str(), shown(r.value).c_str(),
                std::string(opt::source_name(r.source)).c_str(), i.system ? " (system)" : "");
    std::string more = i.help;
    if (*i.flag) more += fmt::format("; flag {}", i.flag);
    if (*i.choices) more += fmt::format("; one of {}", i.choices);
    std::printf("    %s\n", more.c_str());
    if (!r.error.empty()) {
      std::printf("    refused: %s\n", r.error.c_str());
      ++errors;
    }
  }
  std::printf("\nvalues come from a flag, else the environment (read once), else the default; an empty\n"
              "variable counts as unset.%s\n",
              errors ? " Refused environment values stop every other command." : "");
  return 0;
}

LOOM_COMMAND(kInfo, "info", "Show a GGUF file's architecture, hyper-parameters, tokenizer and tensors; --flags: every option",
             [](CLI::App& sub) -> Action {
               auto path = std::make_shared<std::string>();
               auto json_out = std::make_shared<bool>(false);
               auto flags = std::make_shared<bool>(false);
               sub.add_option("model", *path, "GGUF file");
               sub.add_flag("--flags", *flags,
                            "list every option: environment variable, type, default, current value and its source");
               sub.add_flag("--json", *json_out, "print JSON");
               return [=] {
                 if (*flags) return run_flags(*json_out);
                 if (path->empty()) return report(invalid_argument("loom info needs a GGUF file (or --flags)"));
                 if (Status s = opt::check_environment(); !s.ok()) return report(s);
                 return run_info(*path, *json_out);
               };
             });

}  // namespace
}  // namespace loom::cli
