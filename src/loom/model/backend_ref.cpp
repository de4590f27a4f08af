// The reference CPU backend: interprets a step Program launch by launch with the ops of
// ops_ref, on host memory, with the F16 KV cache of kv_cache.h.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <cstring>

#include "loom/base/thread_pool.h"
#include "loom/model/backend.h"
#include "loom/model/kv_cache.h"
#include "loom/ref/ops_ref.h"

namespace loom::llm {
namespace {

class RefBackend final : public Backend {
 public:
  explicit RefBackend(int n_threads) : pool_(n_threads) {}
  std::string_view name() const override { return "cpu-ref"; }

  Status init(const Model& model, int64_t n_ctx, int64_t n_seq) override {
    model_ = &model;
    const ModelConfig& c = model.config();
    return cache_.init(c.n_layer, n_ctx, static_cast<int64_t>(c.n_head_kv) * c.head_dim_k,
                       static_cast<int64_t>(c.n_head_kv) * c.head_dim_v, n_seq);
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
    if (slots_.size() < p.slot_floats.size()) slots_.resize(p.slot_floats.size());
    for (size_t s = 0; s < p.slot_floats.size(); ++s)
      if (slots_[s].size() < static_cast<size_t>(p.slot_floats[s])) slots_[s].resize(static_cast<size_t>(p.slot_floats[s]));
    for (const Launch& l : p.launches) {
      Status s = run(p, l, in);
      if (!s.ok()) return std::move(s).with_context(std::string("executing ") + op_name(l.op));
      if (dump_dir_ && l.out >= 0) dump(p, l.out);
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
    std::string path = std::string(dump_dir_) + "/" + d.name + ".f32";
    if (FILE* fp = std::fopen(path.c_str(), "wb")) {
      std::fwrite(ptr(p, v), sizeof(float), static_cast<size_t>(d.rows * d.cols), fp);
      std::fclose(fp);
    }
  }

  float* ptr(const Program& p, int32_t v) {
    return slots_[static_cast<size_t>(p.values[static_cast<size_t>(v)].slot)].data();
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
      case OpCode::kRmsNorm: {
        const float* w = l.weight >= 0 ? model_->weight(l.weight).f32() : nullptr;
        if (w && model_->weight(l.weight).view.n_in != l.group)
          return internal_error("norm weight of {} for groups of {}", model_->weight(l.weight).view.n_in, l.group);
        ref::rms_norm(a, w, out, n / l.group, l.group, l.eps);
        return Status();
      }
      case OpCode::kMatMul:
        return ref::matmul(model_->weight(l.weight).view, a, id->rows, out, &pool_, &scratch_);
      case OpCode::kAdd: ref::add(a, b, out, n); return Status();
      case OpCode::kScale: ref::scale(a, l.f, out, n); return Status();
      case OpCode::kSoftcap: ref::softcap(a, l.f, out, n); return Status();
      case OpCode::kSwiGlu: ref::swiglu(a, b, out, n); return Status();
      case OpCode::kGeGlu: ref::geglu(a, b, out, n); return Status();
      case OpCode::kRope:
        if (out != a) std::memcpy(out, a, static_cast<size_t>(n) * sizeof(float));
        ref::rope(out, od->rows, l.n_head, l.head_dim, in.positions, l.rope);
        return Status();
      case OpCode::kKvStore: {
        const ValueDesc& vd = p.values[static_cast<size_t>(l.in1)];
        if (id->cols != cache_.k_row() || vd.cols != cache_.v_row())
          return internal_error("kv rows {}/{} do not match the cache {}/{}", id->cols, vd.cols, cache_.k_row(), cache_.v_row());
        for (int64_t t = 0; t < id->rows; ++t) {
          const int64_t cell = (in.seq_ids ? in.seq_ids[t] * cache_.n_ctx() : 0) + in.positions[t];
          ref::to_fp16(a + t * id->cols, cache_.k(l.layer) + cell * cache_.k_row(), id->cols);
          ref::to_fp16(b + t * vd.cols, cache_.v(l.layer) + cell * cache_.v_row(), vd.cols);
        }
        return Status();
      }
      case OpCode::kAttention:
        return ref::attention(a, in.positions, id->rows, cache_.k(l.layer), cache_.v(l.layer), in.n_kv, l.attn,
                              out, &pool_, in.seq_ids, cache_.n_ctx());
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
  const char* dump_dir_ = std::getenv("LOOM_DUMP_VALUES");
  const Model* model_ = nullptr;
  KvCache cache_;
  std::vector<std::vector<float>> slots_;
  std::vector<uint8_t> scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_ref_backend(int n_threads) { return std::make_unique<RefBackend>(n_threads); }

}  // namespace loom::llm
