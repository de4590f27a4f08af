// Building blocks the architecture recipes (arch_*.cpp) write their step Programs with: each
// call appends one launch and returns the value it produces. Internal to the engine.
#pragma once

#include <string>
#include <utility>

#include "loom/model/model.h"
#include "loom/model/program.h"

namespace loom::llm {

class Recipe {
 public:
  Recipe(const Model& model, int64_t n_tokens, int64_t n_outputs)
      : model_(model), b_(n_tokens, n_outputs) {}

  int64_t n_tokens() const { return b_.n_tokens(); }
  int64_t n_outputs() const { return b_.n_outputs(); }
  int64_t rows(int32_t v) const { return b_.desc(v).rows; }
  int64_t cols(int32_t v) const { return b_.desc(v).cols; }

  int32_t get_rows(int32_t table) {
    const Weight& w = model_.weight(table);
    int32_t out = b_.value(n_tokens(), w.view.n_in, "inp_embd");
    Launch l; l.op = OpCode::kGetRows; l.out = out; l.weight = table;
    b_.launch(l);
    return out;
  }
  // RMS norm over groups of `group` values (0: the whole row), times the weight if given.
  int32_t rms_norm(int32_t x, int32_t weight, float eps, const std::string& name, int64_t group = 0) {
    int32_t out = b_.value(rows(x), cols(x), name);
    Launch l; l.op = OpCode::kRmsNorm; l.out = out; l.in0 = x; l.weight = weight; l.eps = eps;
    l.group = group > 0 ? group : cols(x);
    b_.launch(l);
    return out;
  }
  int32_t matmul(int32_t weight, int32_t x, const std::string& name) {
    int32_t out = b_.value(rows(x), model_.weight(weight).view.n_out, name);
    Launch l; l.op = OpCode::kMatMul; l.out = out; l.in0 = x; l.weight = weight;
    b_.launch(l);
    return out;
  }
  int32_t binary(OpCode op, int32_t a, int32_t b, const std::string& name) {
    int32_t out = b_.value(rows(a), cols(a), name);
    Launch l; l.op = op; l.out = out; l.in0 = a; l.in1 = b;
    b_.launch(l);
    return out;
  }
  int32_t add(int32_t a, int32_t b, const std::string& name) { return binary(OpCode::kAdd, a, b, name); }
  // x + bias in every row (bias: an f32 vector weight of x's cols).
  int32_t add_bias(int32_t x, int32_t bias, const std::string& name) {
    int32_t out = b_.value(rows(x), cols(x), name);
    Launch l; l.op = OpCode::kAddBias; l.out = out; l.in0 = x; l.weight = bias;
    b_.launch(l);
    return out;
  }
  int32_t unary(OpCode op, int32_t x, float f, const std::string& name) {
    int32_t out = b_.value(rows(x), cols(x), name);
    Launch l; l.op = op; l.out = out; l.in0 = x; l.f = f;
    b_.launch(l);
    return out;
  }
  int32_t scale(int32_t x, float s, const std::string& name) { return unary(OpCode::kScale, x, s, name); }
  // Rotates q in place and stores the rotated k with v in the layer's cache; returns q.
  int32_t rope_kv(int32_t q, int32_t k, int32_t v, int layer, int n_head, int n_head_kv, int head_dim,
                  const ref::RopeParams& p) {
    Launch l; l.op = OpCode::kRopeKv; l.out = q; l.in0 = q; l.in1 = k; l.in2 = v; l.layer = layer;
    l.n_head = n_head; l.n_head_kv = n_head_kv; l.head_dim = head_dim; l.rope = p;
    b_.launch(l);
    return q;
  }
  int32_t attention(int32_t q, int layer, const ref::AttentionParams& p, const std::string& name) {
    int32_t out = b_.value(rows(q), static_cast<int64_t>(p.n_head) * p.head_dim_v, name);
    Launch l; l.op = OpCode::kAttention; l.out = out; l.in0 = q; l.layer = layer; l.attn = p;
    b_.launch(l);
    return out;
  }
  int32_t gather_outputs(int32_t x, const std::string& name) {
    int32_t out = b_.value(n_outputs(), cols(x), name);
    Launch l; l.op = OpCode::kGatherRows; l.out = out; l.in0 = x;
    b_.launch(l);
    return out;
  }
  // The router: {weights [rows, k] f32, ids [rows, k] i32} from logits [rows, n_expert].
  std::pair<int32_t, int32_t> moe_route(int32_t logits, int64_t k, bool norm, const std::string& w_name,
                                        const std::string& id_name) {
    int32_t w = b_.value(rows(logits), k, w_name);
    int32_t ids = b_.value(rows(logits), k, id_name, GgmlType::I32);
    Launch l; l.op = OpCode::kMoeRoute; l.out = w; l.out1 = ids; l.in0 = logits; l.norm_w = norm;
    b_.launch(l);
    return {w, ids};
  }
  // Expert mat-vecs of x ([rows, n_in]: one input per token; [rows, k * n_in]: one per slot).
  int32_t matmul_id(int32_t experts, int32_t x, int32_t ids, const std::string& name) {
    const Weight& w = model_.weight(experts);
    int32_t out = b_.value(rows(x), cols(ids) * w.expert_rows(), name);
    Launch l; l.op = OpCode::kMatMulId; l.out = out; l.in0 = x; l.in1 = ids; l.weight = experts;
    b_.launch(l);
    return out;
  }
  // sum_j x[:, j] * w[:, j] (x: [rows, k * n], w: [rows, k]).
  int32_t moe_sum(int32_t x, int32_t w, const std::string& name) {
    int32_t out = b_.value(rows(x), cols(x) / cols(w), name);
    Launch l; l.op = OpCode::kMoeSum; l.out = out; l.in0 = x; l.in1 = w;
    b_.launch(l);
    return out;
  }
  Program finish(int32_t logits) { return b_.finish(logits); }

 private:
  const Model& model_;
  ProgramBuilder b_;
};

// Binds a matrix and checks the reference backend can multiply by it (model.cpp).
Status bind_matrix_checked(Model& m, const std::string& name, int64_t n_in, int64_t n_out, int32_t* id);
// The same for rows [row0, row0 + n_rows) of a fused [n_in, n_total] tensor (Model::bind_rows).
Status bind_rows_checked(Model& m, const std::string& name, int64_t n_in, int64_t n_total, int64_t row0,
                         int64_t n_rows, int32_t* id);
// Binds token_embd / output_norm / output (tied to token_embd when absent); sets n_vocab.
Status bind_globals_checked(Model& m);

inline std::string layer_name(const char* what, int il) { return std::string(what) + "-" + std::to_string(il); }

}  // namespace loom::llm
