// The reference CPU backend: interprets a step Program launch by launch with the ops of
// ops_ref, on host memory, with the KV cache of kv_cache.h (F16, or Q8_0 on request). It runs fused Programs too (the
// forms a backend's fusion pass writes), with each fused op computed as its parts.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <cstring>

#include "loom/base/options.h"
#include "loom/base/thread_pool.h"
#include "loom/model/backend.h"
#include "loom/model/kv_cache.h"
#include "loom/ref/ops_ref.h"

namespace loom::llm {
namespace {

class RefBackend final : public Backend {
 public:
  RefBackend(int n_threads, KvCacheTypes kv) : pool_(n_threads), kv_(kv) {}
  std::string_view name() const override { return "cpu-ref"; }

  Status init(const Model& model, int64_t n_ctx, int64_t n_seq) override {
    model_ = &model;
    const ModelConfig& c = model.config();
    return cache_.init(c.n_layer, n_ctx, static_cast<int64_t>(c.n_head_kv) * c.head_dim_k,
                       static_cast<int64_t>(c.n_head_kv) * c.head_dim_v, n_seq, kv_.k, kv_.v);
  }

  Status copy_cells(int64_t src, int64_t dst, int64_t n) override {
    if (!model_) return failed_precondition("backend used before init");
    if (src < 0 || dst < 0 || src >= cache_.n_seq() || dst >= cache_.n_seq() || n < 0 || n > cache_.n_ctx())
      return out_of_range("cannot copy {} cells from sequence {} to {} ({} sequences of {} cells)", n, src, dst,
                          cache_.n_seq(), cache_.n_ctx());
    if (src == dst || n == 0) return Status();
    for (int64_t l = 0; l < model_->config().n_layer; ++l) {
      const size_t kb = cache_.k_row_bytes(), vb = cache_.v_row_bytes(), cells = static_cast<size_t>(cache_.n_ctx());
      std::memcpy(cache_.k(l) + static_cast<size_t>(dst) * cells * kb, cache_.k(l) + static_cast<size_t>(src) * cells * kb,
                  static_cast<size_t>(n) * kb);
      std::memcpy(cache_.v(l) + static_cast<size_t>(dst) * cells * vb, cache_.v(l) + static_cast<size_t>(src) * cells * vb,
                  static_cast<size_t>(n) * vb);
    }
    return Status();
  }

  Status execute(const Program& p, const StepInputs& in, float* logits) override {
    if (!model_) return failed_precondition("backend used before init");
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      if (in.positions[t] < 0 || in.positions[t] >= cache_.n_ctx())
        return resource_exhausted("position {} is beyond the context of {} tokens", in.positions[t], cache_.n_ctx());
      if (in.seq_ids && (in.seq_ids[t] < 0 || in.seq_ids[t] >= cache_.n_seq()))
        return out_of_range("sequence {} outside the cache's {} slots", in.seq_ids[t], cache_.n_seq());
    }
    if (in.n_kv > cache_.n_ctx()) return resource_exhausted("{} cells exceed the context of {}", in.n_kv, cache_.n_ctx());
    if (slots_.size() < p.slot_bytes.size()) slots_.resize(p.slot_bytes.size());
    for (size_t s = 0; s < p.slot_bytes.size(); ++s)
      if (slots_[s].size() * 4 < p.slot_bytes[s]) slots_[s].resize((p.slot_bytes[s] + 3) / 4);
    for (const Launch& l : p.launches) {
      Status s = run(p, l, in);
      if (!s.ok()) return std::move(s).with_context(std::string("executing ") + op_name(l.op));
      if (!dump_dir_.empty())
        for (int32_t v : l.outputs())
          if (v >= 0 && p.values[static_cast<size_t>(v)].type == GgmlType::F32) dump(p, v);
    }
    const ValueDesc& out = p.values[static_cast<size_t>(p.logits)];
    std::memcpy(logits, ptr(p, p.logits), static_cast<size_t>(out.rows * out.cols) * sizeof(float));
    return Status();
  }

 private:
  // LOOM_DUMP_VALUES=DIR writes every launch's output as DIR/<value name>.f32 (debugging the
  // numerics against another implementation's intermediate tensors).
  void dump(const Program& p, int32_t v) {
    const ValueDesc& d = p.values[static_cast<size_t>(v)];
    std::string path = dump_dir_ + "/" + d.name + ".f32";
    if (FILE* fp = std::fopen(path.c_str(), "wb")) {
      std::fwrite(ptr(p, v), sizeof(float), static_cast<size_t>(d.rows * d.cols), fp);
      std::fclose(fp);
    }
  }

  float* ptr(const Program& p, int32_t v) {
    return slots_[static_cast<size_t>(p.values[static_cast<size_t>(v)].slot)].data();
  }

  uint8_t* bytes(const Program& p, int32_t v) { return reinterpret_cast<uint8_t*>(ptr(p, v)); }

  // Rows of `x` (f32, cols values each) quantized into value v's type.
  void quantize_into(const Program& p, const float* x, int32_t v) {
    const ValueDesc& d = p.values[static_cast<size_t>(v)];
    const size_t row = ref::quantized_row_bytes(d.type, d.cols);
    for (int64_t t = 0; t < d.rows; ++t) ref::quantize_activation(d.type, x + t * d.cols, bytes(p, v) + t * row, d.cols);
  }

  Status rms_norm(const Launch& l, const float* x, float* y, int64_t n) {
    const float* w = l.weight >= 0 ? model_->weight(l.weight).f32() : nullptr;
    if (w && model_->weight(l.weight).view.n_in != l.group)
      return internal_error("norm weight of {} for groups of {}", model_->weight(l.weight).view.n_in, l.group);
    ref::rms_norm(x, w, y, n / l.group, l.group, l.eps);
    return Status();
  }

  // weight · in0 into y, from in0 in whatever form the launch's producer wrote it.
  Status matmul(const Program& p, int32_t weight, int32_t in0, float* y) {
    const ref::WeightView& w = model_->weight(weight).view;
    const ValueDesc& x = p.values[static_cast<size_t>(in0)];
    if (x.type == GgmlType::F32) return ref::matmul(w, ptr(p, in0), x.rows, y, &pool_, &scratch_);
    LOOM_ASSIGN_OR_RETURN(GgmlType dot, ref::vec_dot_type(w.type));
    if (x.type == dot) return ref::matmul_quantized(w, bytes(p, in0), x.rows, y, &pool_);
    if (x.type == GgmlType::F16)
      return ref::matmul_dequantized(w, reinterpret_cast<const uint16_t*>(bytes(p, in0)), x.rows, y, &pool_);
    if (x.type == GgmlType::Q8_1) return ref::matmul_q8_1(w, bytes(p, in0), x.rows, y, &pool_);
    return internal_error("a {} weight cannot read {} activations", ggml_type_name(w.type), ggml_type_name(x.type));
  }

  // Expert mat-vecs, grouped: the (token, slot) pairs that chose expert e are gathered into one
  // batch and multiplied by e's matrix (a row view of the stacked tensor), so only the chosen
  // experts' weights are read, each once per step. Every element is its single-token dot product.
  Status matmul_id(const Program& p, const Launch& l, int32_t weight, float* y) {
    const Weight& W = model_->weight(weight);
    const ValueDesc& x = p.values[static_cast<size_t>(l.in0)];
    const ValueDesc& idd = p.values[static_cast<size_t>(l.in1)];
    const int64_t n_in = W.view.n_in, n_out = W.expert_rows(), k = idd.cols, rows = x.rows;
    if (W.n_expert <= 0 || idd.type != GgmlType::I32 || idd.rows != rows)
      return internal_error("matmul_id of {} with ids {}", W.name, idd.name);
    const bool per_slot = x.cols == k * n_in;
    if (!per_slot && x.cols != n_in) return internal_error("matmul_id: {} has {} cols for rows of {}", x.name, x.cols, n_in);
    const bool f32 = x.type == GgmlType::F32;
    if (!f32) {
      LOOM_ASSIGN_OR_RETURN(GgmlType dot, ref::vec_dot_type(W.view.type));
      if (x.type != dot) return internal_error("a {} weight cannot read {} activations", ggml_type_name(W.view.type),
                                               ggml_type_name(x.type));
    }
    const size_t xrow = f32 ? static_cast<size_t>(n_in) * 4 : ref::quantized_row_bytes(x.type, n_in);
    const int32_t* ids = reinterpret_cast<const int32_t*>(ptr(p, l.in1));
    const uint8_t* xb = bytes(p, l.in0);
    std::vector<std::vector<int64_t>> users(static_cast<size_t>(W.n_expert));  // (t * k + j) per expert
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = ids[t * k + j];
        if (e < 0 || e >= W.n_expert) return out_of_range("expert {} outside the {} of {}", e, W.n_expert, W.name);
        users[static_cast<size_t>(e)].push_back(t * k + j);
      }
    for (int64_t e = 0; e < W.n_expert; ++e) {
      const std::vector<int64_t>& u = users[static_cast<size_t>(e)];
      if (u.empty()) continue;
      ref::WeightView sub = W.view;
      sub.data = W.view.row(e * n_out);
      sub.n_out = n_out;
      gather_.resize(u.size() * xrow);
      for (size_t i = 0; i < u.size(); ++i)
        std::memcpy(gather_.data() + i * xrow, xb + static_cast<size_t>(per_slot ? u[i] : u[i] / k) * xrow, xrow);
      expert_out_.resize(u.size() * static_cast<size_t>(n_out));
      const int64_t n = static_cast<int64_t>(u.size());
      if (f32) {
        LOOM_RETURN_IF_ERROR(ref::matmul(sub, reinterpret_cast<const float*>(gather_.data()), n, expert_out_.data(), &pool_,
                                         &scratch_));
      } else {
        LOOM_RETURN_IF_ERROR(ref::matmul_quantized(sub, gather_.data(), n, expert_out_.data(), &pool_));
      }
      for (size_t i = 0; i < u.size(); ++i)
        std::memcpy(y + u[i] * n_out, expert_out_.data() + i * static_cast<size_t>(n_out),
                    static_cast<size_t>(n_out) * sizeof(float));
    }
    return Status();
  }

  // One cache row in the cache's type, as llama.cpp's CPU backend stores it (fp16 rounding, or
  // its x86 Q8_0 quantizer: the same as the matmuls' activation blocks).
  static void store_row(GgmlType type, const float* x, uint8_t* dst, int64_t n) {
    if (type == GgmlType::Q8_0) ref::quantize_activation(GgmlType::Q8_0, x, dst, n);
    else ref::to_fp16(x, reinterpret_cast<uint16_t*>(dst), n);
  }

  // q rotated in place; k rotated on its way into the cache (the value itself stays as it
  // was) and stored with v at each token's (sequence, position) cell.
  Status rope_kv(const Program& p, const Launch& l, const StepInputs& in) {
    const ValueDesc& qd = p.values[static_cast<size_t>(l.in0)];
    const ValueDesc& kd = p.values[static_cast<size_t>(l.in1)];
    const ValueDesc& vd = p.values[static_cast<size_t>(l.in2)];
    if (kd.cols != cache_.k_row() || vd.cols != cache_.v_row())
      return internal_error("kv rows {}/{} do not match the cache {}/{}", kd.cols, vd.cols, cache_.k_row(), cache_.v_row());
    float* q = ptr(p, l.out);
    if (l.out != l.in0) std::memcpy(q, ptr(p, l.in0), static_cast<size_t>(qd.rows * qd.cols) * sizeof(float));
    ref::rope(q, qd.rows, l.n_head, l.head_dim, in.positions, l.rope);
    const float* k = ptr(p, l.in1);
    rot_k_.assign(k, k + kd.rows * kd.cols);
    ref::rope(rot_k_.data(), kd.rows, l.n_head_kv, l.head_dim, in.positions, l.rope);
    const float* v = ptr(p, l.in2);
    for (int64_t t = 0; t < kd.rows; ++t) {
      const int64_t cell = (in.seq_ids ? in.seq_ids[t] * cache_.n_ctx() : 0) + in.positions[t];
      store_row(cache_.k_type(), rot_k_.data() + t * kd.cols, cache_.k(l.layer) + cell * cache_.k_row_bytes(), kd.cols);
      store_row(cache_.v_type(), v + t * vd.cols, cache_.v(l.layer) + cell * cache_.v_row_bytes(), vd.cols);
    }
    return Status();
  }

  Status run(const Program& p, const Launch& l, const StepInputs& in) {
    const ValueDesc* od = l.out >= 0 ? &p.values[static_cast<size_t>(l.out)] : nullptr;
    const ValueDesc* id = l.in0 >= 0 ? &p.values[static_cast<size_t>(l.in0)] : nullptr;
    float* out = l.out >= 0 ? ptr(p, l.out) : nullptr;
    const float* a = l.in0 >= 0 ? ptr(p, l.in0) : nullptr;
    const float* b = l.in1 >= 0 ? ptr(p, l.in1) : nullptr;
    const int64_t n = od ? od->rows * od->cols : 0;
    switch (l.op) {
      case OpCode::kGetRows:
        return ref::get_rows(model_->weight(l.weight).view, in.tokens, od->rows, out);
      case OpCode::kRmsNorm:
        return rms_norm(l, a, out, n);
      case OpCode::kAddRmsNorm: {
        float* sum = ptr(p, l.out1);
        ref::add(a, b, sum, n);
        return rms_norm(l, sum, out, n);
      }
      case OpCode::kRmsNormQ8: {
        const float* x = a;
        if (l.in1 >= 0) {
          float* sum = ptr(p, l.out1);
          ref::add(a, b, sum, n);
          x = sum;
        }
        norm_.resize(static_cast<size_t>(n));
        LOOM_RETURN_IF_ERROR(rms_norm(l, x, norm_.data(), n));
        quantize_into(p, norm_.data(), l.out);
        return Status();
      }
      case OpCode::kQuantize:
        quantize_into(p, a, l.out);
        return Status();
      case OpCode::kMatMul: {
        if (!l.glu) {
          LOOM_RETURN_IF_ERROR(matmul(p, l.weight, l.in0, out));
          if (l.weight1 >= 0) LOOM_RETURN_IF_ERROR(matmul(p, l.weight1, l.in0, ptr(p, l.out1)));
          if (l.weight2 >= 0) LOOM_RETURN_IF_ERROR(matmul(p, l.weight2, l.in0, ptr(p, l.out2)));
          return Status();
        }
        glu_.resize(static_cast<size_t>(n));
        LOOM_RETURN_IF_ERROR(matmul(p, l.weight, l.in0, out));
        LOOM_RETURN_IF_ERROR(matmul(p, l.weight1, l.in0, glu_.data()));
        ref::swiglu(out, glu_.data(), out, n);
        return Status();
      }
      case OpCode::kAdd: ref::add(a, b, out, n); return Status();
      case OpCode::kAddBias: {
        const Weight& w = model_->weight(l.weight);
        if (w.view.type != GgmlType::F32 || w.view.n_in != od->cols || w.view.n_out != 1)
          return internal_error("bias {} does not fit rows of {}", w.name, od->cols);
        for (int64_t r = 0; r < od->rows; ++r) ref::add(a + r * od->cols, w.f32(), out + r * od->cols, od->cols);
        return Status();
      }
      case OpCode::kScale: ref::scale(a, l.f, out, n); return Status();
      case OpCode::kSoftcap: ref::softcap(a, l.f, out, n); return Status();
      case OpCode::kSwiGlu: ref::swiglu(a, b, out, n); return Status();
      case OpCode::kGeGlu: ref::geglu(a, b, out, n); return Status();
      case OpCode::kRopeKv:
        return rope_kv(p, l, in);
      case OpCode::kAttention:
      {
        ref::AttentionParams attn = l.attn;
        attn.k_type = cache_.k_type();
        attn.v_type = cache_.v_type();
        LOOM_RETURN_IF_ERROR(ref::attention(a, in.positions, id->rows, cache_.k(l.layer), cache_.v(l.layer), in.n_kv,
                                            attn, out, &pool_, in.seq_ids, cache_.n_ctx()));
      }
        if (l.out1 >= 0) quantize_into(p, out, l.out1);
        return Status();
      case OpCode::kMoeRoute: {
        const ValueDesc& w = p.values[static_cast<size_t>(l.out)];
        ref::moe_route(a, id->rows, id->cols, w.cols, l.norm_w, reinterpret_cast<int32_t*>(ptr(p, l.out1)), out);
        return Status();
      }
      case OpCode::kMatMulId:
        if (!l.glu) return matmul_id(p, l, l.weight, out);
        glu_.resize(static_cast<size_t>(n));
        LOOM_RETURN_IF_ERROR(matmul_id(p, l, l.weight, out));
        LOOM_RETURN_IF_ERROR(matmul_id(p, l, l.weight1, glu_.data()));
        ref::swiglu(out, glu_.data(), out, n);
        return Status();
      case OpCode::kMoeSum: {
        const ValueDesc& w = p.values[static_cast<size_t>(l.in1)];
        ref::moe_sum(a, b, od->rows, w.cols, od->cols, out);
        return Status();
      }
      case OpCode::kGatherRows:
        for (int64_t i = 0; i < od->rows; ++i) {
          const int32_t r = in.output_rows[i];
          if (r < 0 || r >= id->rows) return out_of_range("output row {} outside the batch of {}", r, id->rows);
          std::memcpy(out + i * od->cols, a + r * id->cols, static_cast<size_t>(od->cols) * sizeof(float));
        }
        return Status();
    }
    return internal_error("unknown op {}", static_cast<int>(l.op));
  }

  ThreadPool pool_;
  KvCacheTypes kv_;
  const std::string dump_dir_ = opt::get_string(opt::Opt::kDumpValues);
  const Model* model_ = nullptr;
  KvCache cache_;
  std::vector<std::vector<float>> slots_;
  std::vector<uint8_t> scratch_;
  std::vector<float> norm_, glu_, rot_k_;  // parts of fused ops
  std::vector<uint8_t> gather_;            // matmul_id: one expert's input rows
  std::vector<float> expert_out_;          // matmul_id: one expert's output rows
};

}  // namespace

std::unique_ptr<Backend> make_ref_backend(int n_threads, KvCacheTypes kv) {
  return std::make_unique<RefBackend>(n_threads, kv);
}

}  // namespace loom::llm
