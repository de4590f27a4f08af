// Model loading: architecture dispatch, shared hyper-parameters, weight binding and paging-in
// with progress.
#include "loom/model/model.h"

#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "loom/base/log.h"
#include "loom/gguf/quant.h"
#include "loom/model/arch_util.h"

namespace loom::llm {
namespace {

struct ArchEntry {
  const char* name;
  Arch arch;
  Status (*load)(Model&);
};
// Llama-family checkpoints (Llama 2/3, SmolLM2, TinyLlama, Mistral 7B) are stored as "llama";
// Qwen 2/2.5 as "qwen2", Qwen 3 (dense) as "qwen3", Qwen 3 mixture of experts as "qwen3moe",
// Phi-3/Phi-4 as "phi3".
constexpr ArchEntry kArchs[] = {
    {"llama", Arch::kLlama, &load_llama},
    {"mistral", Arch::kLlama, &load_llama},
    {"qwen2", Arch::kQwen2, &load_llama},
    {"qwen3", Arch::kQwen3, &load_llama},
    {"qwen3moe", Arch::kQwen3Moe, &load_llama},
    {"phi3", Arch::kPhi3, &load_llama},
    {"gemma2", Arch::kGemma2, &load_gemma2},
    {"gemma3", Arch::kGemma3, &load_gemma3},
};

Result<uint64_t> get_u64_scalar(const GgufFile& g, const std::string& key) {
  const GgufValue* v = g.find(key);
  if (!v) return not_found("metadata key '{}' is missing", key);
  if (v->type == GgufType::ARRAY) {
    // Some converters store per-layer arrays; accept them only when every layer agrees.
    LOOM_ASSIGN_OR_RETURN(const GgufArray* arr, v->as_array());
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> xs, arr->ints());
    if (xs.empty()) return data_loss("metadata key '{}' is an empty array", key);
    for (int64_t x : xs)
      if (x != xs[0]) return unimplemented("metadata key '{}' varies per layer; not supported", key);
    if (xs[0] < 0) return data_loss("metadata key '{}' is negative", key);
    return static_cast<uint64_t>(xs[0]);
  }
  return v->as_u64().with_context("metadata key '" + key + "'");
}

Result<uint64_t> get_u64_scalar_or(const GgufFile& g, const std::string& key, uint64_t def) {
  if (!g.has(key)) return def;
  return get_u64_scalar(g, key);
}

}  // namespace

std::string Model::supported_architectures() {
  std::string s;
  for (const auto& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

Status read_common_hparams(const GgufFile& g, const std::string& a, ModelConfig* c) {
  auto key = [&](const char* k) { return a + "." + k; };
  LOOM_ASSIGN_OR_RETURN(uint64_t n_embd, get_u64_scalar(g, key("embedding_length")));
  LOOM_ASSIGN_OR_RETURN(uint64_t n_layer, get_u64_scalar(g, key("block_count")));
  // Mixture-of-experts files may leave the dense FFN width out: the experts' width stands in.
  const bool moe_ff = !g.has(key("feed_forward_length")) && g.has(key("expert_feed_forward_length"));
  LOOM_ASSIGN_OR_RETURN(uint64_t n_ff, get_u64_scalar(g, key(moe_ff ? "expert_feed_forward_length" : "feed_forward_length")));
  LOOM_ASSIGN_OR_RETURN(uint64_t n_head, get_u64_scalar(g, key("attention.head_count")));
  LOOM_ASSIGN_OR_RETURN(uint64_t n_head_kv, get_u64_scalar_or(g, key("attention.head_count_kv"), n_head));
  if (n_embd == 0 || n_layer == 0 || n_head == 0 || n_head_kv == 0 || n_ff == 0 || n_embd > (1 << 20) ||
      n_layer > 4096 || n_head > 4096 || n_head % n_head_kv != 0)
    return data_loss("implausible hyper-parameters: n_embd={} n_layer={} n_head={} n_head_kv={} n_ff={}",
                     n_embd, n_layer, n_head, n_head_kv, n_ff);
  c->n_embd = static_cast<int64_t>(n_embd);
  c->n_layer = static_cast<int64_t>(n_layer);
  c->n_ff = static_cast<int64_t>(n_ff);
  c->n_head = static_cast<int>(n_head);
  c->n_head_kv = static_cast<int>(n_head_kv);
  LOOM_ASSIGN_OR_RETURN(uint64_t dk, get_u64_scalar_or(g, key("attention.key_length"), n_embd / n_head));
  LOOM_ASSIGN_OR_RETURN(uint64_t dv, get_u64_scalar_or(g, key("attention.value_length"), n_embd / n_head));
  if (dk == 0 || dv == 0 || dk > 4096 || dv > 4096) return data_loss("implausible head size {}/{}", dk, dv);
  c->head_dim_k = static_cast<int>(dk);
  c->head_dim_v = static_cast<int>(dv);
  LOOM_ASSIGN_OR_RETURN(uint64_t n_ctx, get_u64_scalar_or(g, key("context_length"), 2048));
  c->n_ctx_train = static_cast<int64_t>(n_ctx);
  LOOM_ASSIGN_OR_RETURN(double eps, g.get_f64_or(key("attention.layer_norm_rms_epsilon"), 1e-5));
  c->norm_eps = static_cast<float>(eps);
  LOOM_ASSIGN_OR_RETURN(uint64_t n_rot, get_u64_scalar_or(g, key("rope.dimension_count"), dk));
  if (n_rot == 0 || n_rot > dk || n_rot % 2 != 0) return data_loss("bad rope.dimension_count {}", n_rot);
  c->n_rot = static_cast<int>(n_rot);
  LOOM_ASSIGN_OR_RETURN(double base, g.get_f64_or(key("rope.freq_base"), 10000.0));
  c->rope_freq_base = static_cast<float>(base);

  // Rope scaling as llama.cpp reads it: factor f gives freq_scale 1/f; YaRN adds extrapolation.
  double factor = 0.0;
  if (g.has(key("rope.scaling.factor"))) {
    LOOM_ASSIGN_OR_RETURN(factor, g.get_f64(key("rope.scaling.factor")));
  } else if (g.has(key("rope.scale_linear"))) {
    LOOM_ASSIGN_OR_RETURN(factor, g.get_f64(key("rope.scale_linear")));
  }
  std::string scaling_type = factor != 0.0 ? "linear" : "none";
  if (g.has(key("rope.scaling.type"))) {
    LOOM_ASSIGN_OR_RETURN(std::string_view t, g.get_string(key("rope.scaling.type")));
    scaling_type = std::string(t);
  }
  // 0 means no scaling (as in llama.cpp); anything else is inverted, so it must stay finite.
  if (!std::isfinite(factor) || factor < 0.0 || (factor != 0.0 && !std::isfinite(static_cast<float>(1.0 / factor))))
    return data_loss("hyper-parameter {} = {} is out of range (must be a finite number >= 0; 0: no scaling)",
                     g.has(key("rope.scaling.factor")) ? key("rope.scaling.factor") : key("rope.scale_linear"), factor);
  c->rope_freq_scale = factor == 0.0 ? 1.0f : static_cast<float>(1.0 / factor);
  LOOM_ASSIGN_OR_RETURN(uint64_t orig, get_u64_scalar_or(g, key("rope.scaling.original_context_length"), n_ctx));
  c->rope_n_ctx_orig = static_cast<int64_t>(orig);
  if (scaling_type == "yarn") {
    c->yarn_ext_factor = 1.0f;
  } else if (scaling_type != "none" && scaling_type != "linear") {
    return unimplemented("rope scaling type '{}' is not supported (none, linear, yarn)", scaling_type);
  }
  LOOM_ASSIGN_OR_RETURN(double softcap, g.get_f64_or(key("final_logit_softcapping"), 0.0));
  c->final_softcap = static_cast<float>(softcap);
  LOOM_ASSIGN_OR_RETURN(double attn_softcap, g.get_f64_or(key("attn_logit_softcapping"), 0.0));
  c->attn_softcap = static_cast<float>(attn_softcap);
  c->layer_swa.assign(static_cast<size_t>(c->n_layer), false);
  return Status();
}

Status read_swa_layers(const GgufFile& g, uint64_t default_pattern, ModelConfig* c) {
  const std::string key = c->arch_name + ".attention.sliding_window_pattern";
  const GgufValue* pv = g.find(key);
  c->layer_swa.assign(static_cast<size_t>(c->n_layer), false);
  if (pv && pv->type == GgufType::ARRAY) {
    LOOM_ASSIGN_OR_RETURN(const GgufArray* arr, pv->as_array());
    if (static_cast<int64_t>(arr->size()) != c->n_layer)
      return data_loss("metadata key '{}' has {} entries for {} layers", key, arr->size(), c->n_layer);
    for (size_t il = 0; il < arr->size(); ++il) {
      LOOM_ASSIGN_OR_RETURN(bool b, arr->at(il).as_bool().with_context("metadata key '" + key + "'"));
      c->layer_swa[il] = b;
    }
    return Status();
  }
  LOOM_ASSIGN_OR_RETURN(uint64_t pattern, g.get_u64_or(key, default_pattern));
  for (int64_t il = 0; il < c->n_layer; ++il)
    c->layer_swa[static_cast<size_t>(il)] = pattern == 0 || (static_cast<uint64_t>(il) % pattern < pattern - 1);
  return Status();
}

// rope_freq_scale is not listed: it is 1 / rope.scaling.factor, whose raw value
// read_common_hparams checks so that the message shows what the file says.
Status validate_hparams(const ModelConfig& c) {
  struct Check {
    const char* key;  // after "<arch>."
    float value;
    bool zero_ok;     // 0 is accepted (it means "default" or "none")
  };
  const Check checks[] = {
      {"attention.layer_norm_rms_epsilon", c.norm_eps, false},
      {"rope.freq_base", c.rope_freq_base, false},
      {"rope.freq_base_swa", c.rope_freq_base_swa, false},
      {"attention.scale", c.attn_scale, true},
      {"attn_logit_softcapping", c.attn_softcap, true},
      {"final_logit_softcapping", c.final_softcap, true},
  };
  for (const Check& k : checks) {
    if (std::isfinite(k.value) && (k.value > 0.0f || (k.zero_ok && k.value == 0.0f))) continue;
    return data_loss("hyper-parameter {}.{} = {} is out of range (must be a finite number {} 0)", c.arch_name, k.key,
                     k.value, k.zero_ok ? ">=" : ">");
  }
  return Status();
}

Result<int32_t> Model::bind(const std::string& name, int64_t n_in, int64_t n_out, bool required) {
  const GgufTensor* t = gguf_->tensor(name);
  if (!t) {
    if (!required) return -1;
    return not_found("tensor '{}' is missing", name);
  }
  int64_t rest = 1;
  for (size_t i = 2; i < t->shape.size(); ++i) rest *= t->shape[i];
  const int64_t t_out = t->shape.size() >= 2 ? t->shape[1] : 1;
  if (t->shape.empty() || t->shape[0] != n_in || t_out != n_out || rest != 1) {
    std::string shape;
    for (int64_t d : t->shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    return data_loss("tensor '{}' has shape [{}], expected [{}, {}]", name, shape, n_in, n_out);
  }
  auto info = ggml_type_info(static_cast<uint32_t>(t->type));
  if (!info || n_in % info->block_elems != 0)
    return data_loss("tensor '{}': row of {} is not a whole number of {} blocks", name, n_in, ggml_type_name(t->type));
  Weight w;
  w.name = name;
  w.shape = t->shape;
  w.view.type = t->type;
  w.view.data = t->data;
  w.view.n_in = n_in;
  w.view.n_out = n_out;
  w.view.row_stride = row_bytes(t->type, n_in);
  if (w.view.row_stride * static_cast<uint64_t>(n_out) > t->n_bytes)
    return data_loss("tensor '{}' holds {} bytes, fewer than its shape needs", name, t->n_bytes);
  weights_.push_back(std::move(w));
  return static_cast<int32_t>(weights_.size() - 1);
}

Result<int32_t> Model::bind_rows(const std::string& name, int64_t n_in, int64_t n_total, int64_t row0,
                                 int64_t n_rows) {
  if (row0 < 0 || n_rows <= 0 || row0 + n_rows > n_total)
    return internal_error("rows [{}, {}) outside the {} rows of '{}'", row0, row0 + n_rows, n_total, name);
  LOOM_ASSIGN_OR_RETURN(int32_t id, bind(name, n_in, n_total));
  Weight& w = weights_[static_cast<size_t>(id)];
  w.view.data += w.view.row_stride * static_cast<uint64_t>(row0);
  w.view.n_out = n_rows;
  w.shape = {n_in, n_rows};
  w.name = fmt::format("{}[{}:{}]", name, row0, row0 + n_rows);
  return id;
}

Result<int32_t> Model::bind_experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) {
  const GgufTensor* t = gguf_->tensor(name);
  if (!t) return not_found("tensor '{}' is missing", name);
  if (t->shape.size() != 3 || t->shape[0] != n_in || t->shape[1] != n_out || t->shape[2] != n_expert) {
    std::string shape;
    for (int64_t d : t->shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    return data_loss("tensor '{}' has shape [{}], expected [{}, {}, {}] ({} stacked experts)", name, shape, n_in,
                     n_out, n_expert, n_expert);
  }
  auto info = ggml_type_info(static_cast<uint32_t>(t->type));
  if (!info || n_in % info->block_elems != 0)
    return data_loss("tensor '{}': row of {} is not a whole number of {} blocks", name, n_in, ggml_type_name(t->type));
  Weight w;
  w.name = name;
  w.shape = t->shape;
  w.n_expert = n_expert;
  w.view.type = t->type;
  w.view.data = t->data;
  w.view.n_in = n_in;
  w.view.n_out = n_out * n_expert;
  w.view.row_stride = row_bytes(t->type, n_in);
  if (w.view.row_stride * static_cast<uint64_t>(w.view.n_out) > t->n_bytes)
    return data_loss("tensor '{}' holds {} bytes, fewer than its shape needs", name, t->n_bytes);
  weights_.push_back(std::move(w));
  return static_cast<int32_t>(weights_.size() - 1);
}

Result<int32_t> Model::bind_vector(const std::string& name, int64_t n, bool required) {
  LOOM_ASSIGN_OR_RETURN(int32_t id, bind(name, n, 1, required));
  if (id >= 0 && weights_[static_cast<size_t>(id)].view.type != GgmlType::F32)
    return unimplemented("tensor '{}' is {}; norm weights and biases must be f32", name,
                         ggml_type_name(weights_[static_cast<size_t>(id)].view.type));
  return id;
}

std::vector<std::string> Model::weight_names() const {
  std::vector<std::string> names;
  names.reserve(weights_.size());
  for (const auto& w : weights_) names.push_back(w.name);
  return names;
}

uint64_t Model::weight_bytes() const {
  uint64_t n = 0;
  for (const auto& t : gguf_->tensors()) n += t.n_bytes;
  return n;
}

Result<std::unique_ptr<Model>> Model::load(const std::string& path, bool show_progress) {
  auto gguf = GgufFile::open(path);
  if (!gguf.ok()) return std::move(gguf).status().with_context("loading model " + path);
  std::unique_ptr<Model> m(new Model());
  m->gguf_ = std::make_unique<GgufFile>(std::move(gguf).value());
  const std::string arch(m->gguf_->architecture());
  const ArchEntry* entry = nullptr;
  for (const auto& a : kArchs)
    if (arch == a.name) entry = &a;
  if (!entry)
    return unimplemented("model {}: architecture '{}' is not supported (supported: {})", path,
                         arch.empty() ? "<missing general.architecture>" : arch, supported_architectures());
  m->config_.arch = entry->arch;
  m->config_.arch_name = arch;
  if (auto name = m->gguf_->get_string("general.name"); name.ok()) m->config_.name = std::string(*name);
  Status s = read_common_hparams(*m->gguf_, arch, &m->config_);
  if (s.ok()) s = entry->load(*m);
  if (s.ok()) s = validate_hparams(m->config_);
  if (!s.ok()) return std::move(s).with_context("loading model " + path);

  // Page the weights in now, so the first token is not slowed by page faults, and show it.
  std::optional<Progress> progress;
  if (show_progress) progress.emplace("loading model", static_cast<double>(m->weight_bytes()) / (1 << 20), "MiB");
  uint64_t done = 0;
  volatile uint8_t sink = 0;
  for (const auto& t : m->gguf_->tensors()) {
    for (uint64_t off = 0; off < t.n_bytes; off += 4096) sink = sink + t.data[off];
    done += t.n_bytes;
    if (progress) progress->update(static_cast<double>(done) / (1 << 20));
  }
  if (progress) progress->finish();
  return m;
}

namespace {

// The embedding table, final norm and output matrix, shared by every architecture.
Status bind_globals(Model& m) {
  const GgufTensor* emb = m.gguf().tensor("token_embd.weight");
  if (!emb || emb->shape.size() < 2) return not_found("tensor 'token_embd.weight' is missing or not 2-D");
  ModelConfig& c = m.mutable_config();
  c.n_vocab = emb->shape[1];
  if (!emb->data || !ggml_type_info(static_cast<uint32_t>(emb->type))->dequantizable)
    return unimplemented("token_embd.weight is {}; cannot look up embeddings", ggml_type_name(emb->type));
  LOOM_ASSIGN_OR_RETURN(int32_t tok, m.bind("token_embd.weight", c.n_embd, c.n_vocab));
  LOOM_ASSIGN_OR_RETURN(int32_t norm, m.bind_vector("output_norm.weight", c.n_embd));
  LOOM_ASSIGN_OR_RETURN(int32_t out, m.bind("output.weight", c.n_embd, c.n_vocab, /*required=*/false));
  if (out < 0) out = tok;  // tied embeddings
  m.set_globals(tok, norm, out);
  return Status();
}

}  // namespace

Status bind_matrix_checked(Model& m, const std::string& name, int64_t n_in, int64_t n_out, int32_t* id) {
  LOOM_ASSIGN_OR_RETURN(*id, m.bind(name, n_in, n_out));
  LOOM_RETURN_IF_ERROR(ref::vec_dot_type(m.weight(*id).view.type).status().with_context("tensor '" + name + "'"));
  return Status();
}

Status bind_rows_checked(Model& m, const std::string& name, int64_t n_in, int64_t n_total, int64_t row0,
                         int64_t n_rows, int32_t* id) {
  LOOM_ASSIGN_OR_RETURN(*id, m.bind_rows(name, n_in, n_total, row0, n_rows));
  LOOM_RETURN_IF_ERROR(ref::vec_dot_type(m.weight(*id).view.type).status().with_context("tensor '" + name + "'"));
  return Status();
}

Status bind_globals_checked(Model& m) {
  LOOM_RETURN_IF_ERROR(bind_globals(m));
  LOOM_RETURN_IF_ERROR(ref::vec_dot_type(m.weight(m.output()).view.type).status().with_context("output matrix"));
  return Status();
}

Program Model::build_program(int64_t n_tokens, int64_t n_outputs) const {
  switch (config_.arch) {
    case Arch::kGemma2:
    case Arch::kGemma3: return build_gemma(*this, n_tokens, n_outputs);
    case Arch::kLlama:
    case Arch::kQwen2:
    case Arch::kQwen3:
    case Arch::kQwen3Moe:
    case Arch::kPhi3: break;
  }
  return build_llama(*this, n_tokens, n_outputs);
}

}  // namespace loom::llm
