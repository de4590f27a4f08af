// ggml nodes -> op-library calls (see lower.h). One small function per ggml op; each refuses,
// with the reason, the types and layouts its op-library op does not take, so that supports_op
// claims exactly what a tested kernel computes and the rest stays on ggml's CPU backend.
#include "ggml_hrx/lower.h"

#include <cstring>
#include <initializer_list>
#include <string>

#include <fmt/format.h>

#include "loom/exec/weight_plan.h"
#include "loom/gguf/ggml_types.h"
#include "loom/kernels/elementwise_util.h"
#include "loom/kernels/op_spec.h"
#include "loom/ref/ops_ref.h"

namespace loom::ggml_hrx {
namespace {

using exec::OpCall;
using kernels::ArgRole;
using llm::GgmlType;

// ggml's type numbers are GGUF's, which llm::GgmlType spells.
static_assert(GGML_TYPE_F32 == static_cast<int>(GgmlType::F32) && GGML_TYPE_F16 == static_cast<int>(GgmlType::F16) &&
              GGML_TYPE_Q4_0 == static_cast<int>(GgmlType::Q4_0) && GGML_TYPE_Q8_0 == static_cast<int>(GgmlType::Q8_0) &&
              GGML_TYPE_Q4_K == static_cast<int>(GgmlType::Q4_K) && GGML_TYPE_Q6_K == static_cast<int>(GgmlType::Q6_K) &&
              GGML_TYPE_BF16 == static_cast<int>(GgmlType::BF16) && GGML_TYPE_I32 == static_cast<int>(GgmlType::I32) &&
              GGML_TYPE_I64 == static_cast<int>(GgmlType::I64));

GgmlType type_of(const ggml_tensor* t) { return static_cast<GgmlType>(t->type); }
uint64_t addr(const ggml_tensor* t) { return reinterpret_cast<uint64_t>(t->data); }
float f32_param(const ggml_tensor* t, int i) {
  float f;
  std::memcpy(&f, &t->op_params[i], sizeof f);
  return f;
}

// What every call needs of a tensor it reads or writes: rows one after another (the op
// library's buffers are dense) and, for a view, an offset that keeps vector loads aligned.
Status dense(const ggml_tensor* t, const char* role) {
  if (!ggml_is_contiguous(t)) return unimplemented("{} {} is not contiguous", role, t->name);
  if (t->view_src && t->view_offs % 16 != 0)
    return unimplemented("{} {} is a view at offset {} (not a multiple of 16)", role, t->name, t->view_offs);
  return Status();
}

Status of_type(const ggml_tensor* t, ggml_type type, const char* role) {
  if (t->type != type) return unimplemented("{} {} is {}, not {}", role, t->name, ggml_type_name(t->type), ggml_type_name(type));
  return dense(t, role);
}

// The element stride between consecutive rows of an f32 tensor whose values within a row are
// contiguous and whose rows lie evenly apart through dimensions 1..3 (dense tensors, and views
// of every row's first part as ggml's fused-QKV and GLU views are), else an error. Rows of a
// view start at multiples of 4 bytes; the view itself at a multiple of 16 (vector loads).
Result<int64_t> row_stride(const ggml_tensor* t, const char* role) {
  if (t->type != GGML_TYPE_F32) return unimplemented("{} {} is {}, not f32", role, t->name, ggml_type_name(t->type));
  if (t->nb[0] != sizeof(float) || t->nb[1] % sizeof(float))
    return unimplemented("{} {}: values of a row not contiguous", role, t->name);
  if ((t->ne[2] > 1 && t->nb[2] != t->nb[1] * t->ne[1]) || (t->ne[3] > 1 && t->nb[3] != t->nb[2] * t->ne[2]))
    return unimplemented("{} {}: rows not evenly strided", role, t->name);
  if (t->view_src && t->view_offs % 16 != 0)
    return unimplemented("{} {} is a view at offset {} (not a multiple of 16)", role, t->name, t->view_offs);
  return static_cast<int64_t>(t->nb[1] / sizeof(float));
}

std::string label_of(const ggml_tensor* node, std::string_view op) {
  return fmt::format("{} -> {} ({})", ggml_op_desc(node), node->name, op);
}

// A call of op `name` on `shape`, checked by the op's validate(); arguments bound by name.
Result<OpCall> make_call(const ggml_tensor* node, std::string_view name, kernels::Shape shape,
                         std::map<std::string, uint64_t> bind) {
  OpCall call;
  call.op = kernels::find_op(name);
  if (!call.op) return internal_error("the op library has no op '{}'", name);
  call.shape = std::move(shape);
  call.label = label_of(node, name);
  Status v = call.op->validate(call.shape);
  if (!v.ok()) return unimplemented("{}: {}", call.label, v.message());
  call.bind = std::move(bind);
  return call;
}

// Element-wise ops name their arguments themselves: inputs in the op's order, then the output.
Result<OpCall> make_elementwise(const ggml_tensor* node, std::string_view name, kernels::Shape shape,
                                std::initializer_list<const ggml_tensor*> inputs) {
  LOOM_ASSIGN_OR_RETURN(OpCall call, make_call(node, name, std::move(shape), {}));
  auto in = inputs.begin();
  for (const kernels::ArgSpec& a : call.op->args(call.shape)) {
    if (a.role == ArgRole::kInput) {
      if (in == inputs.end()) return internal_error("{}: the op takes more inputs than the node has", call.label);
      call.bind[a.name] = addr(*in++);
    } else if (a.role == ArgRole::kOutput) {
      call.bind[a.name] = addr(node);
    }
  }
  return call;
}

using Calls = std::vector<OpCall>;

bool elt_gpu(ir::TargetKind t) { return kernels::elt::gpu_target(t); }

// ggml's batched forms (a table or a weight matrix per batch) become one call per batch on the
// batch's rows, all of one shape (one kernel); past this many batches a node is not covered
// (the op library has no batched op, and thousands of launches would not pay).
constexpr int64_t kMaxBatches = 64;

// ADD and MUL of f32 tensors of one shape, or with src1 one row broadcast over every row of
// src0 (a bias, a norm's weight): add / add_bias, mul_rows. Other broadcasts stay on the CPU.
Result<Calls> lower_binary(const ggml_tensor* n, bool mul) {
  const ggml_tensor *a = n->src[0], *b = n->src[1];
  LOOM_RETURN_IF_ERROR(of_type(a, GGML_TYPE_F32, "src0"));
  LOOM_RETURN_IF_ERROR(of_type(b, GGML_TYPE_F32, "src1"));
  LOOM_RETURN_IF_ERROR(of_type(n, GGML_TYPE_F32, "dst"));
  if (!ggml_are_same_shape(a, n)) return unimplemented("{}: src0 {} and dst differ in shape", ggml_op_desc(n), a->name);
  const bool same = ggml_are_same_shape(a, b);
  if (!same && !(ggml_nrows(b) == 1 && b->ne[0] == a->ne[0]))
    return unimplemented("{} with src1 {} broadcast other than one row over all rows", ggml_op_desc(n), b->name);
  if (!mul && same) {
    LOOM_ASSIGN_OR_RETURN(OpCall c, make_elementwise(n, "add", kernels::Shape{{{"n", ggml_nelements(n)}}}, {a, b}));
    return Calls{std::move(c)};
  }
  // Same shapes as one row of all the elements; a broadcast row over ggml_nrows rows.
  const int64_t rows = same ? 1 : ggml_nrows(a), len = same ? ggml_nelements(a) : a->ne[0];
  kernels::Shape shape = kernels::elt::make_shape({{"n_rows", rows}, {"n", len}});
  LOOM_ASSIGN_OR_RETURN(OpCall c, make_call(n, mul ? "mul_rows" : "add_bias", std::move(shape),
                                            {{"x", addr(a)}, {"b", addr(b)}, {"y", addr(n)}}));
  return Calls{std::move(c)};
}

// ROPE (normal and NeoX) of an f32 [head_dim, n_head, n_tokens] tensor by i32 positions, with
// optional freq factors: rope, x dense or a view at whole-value head and token strides.
// Multi-section, vision and offset forms stay on the CPU.
Result<Calls> lower_rope(const ggml_tensor* n) {
  const ggml_tensor *x = n->src[0], *pos = n->src[1], *ff = n->src[2];
  // x dense, or a view whose heads and tokens lie at whole-value strides (a fused QKV row's q
  // or k): read through them; the result is dense.
  if (x->type != GGML_TYPE_F32) return unimplemented("src0 {} is {}, not f32", x->name, ggml_type_name(x->type));
  const bool x_dense = ggml_is_contiguous(x);
  if (x_dense) LOOM_RETURN_IF_ERROR(dense(x, "src0"));
  else if (x->nb[0] != sizeof(float) || x->nb[1] % sizeof(float) || x->nb[2] % sizeof(float) || addr(x) % sizeof(float))
    return unimplemented("ROPE of {}: values of a head not contiguous", x->name);
  LOOM_RETURN_IF_ERROR(of_type(pos, GGML_TYPE_I32, "src1"));
  LOOM_RETURN_IF_ERROR(of_type(n, GGML_TYPE_F32, "dst"));
  if (ff) LOOM_RETURN_IF_ERROR(of_type(ff, GGML_TYPE_F32, "src2"));
  const int32_t* p = n->op_params;  // n_past, n_dims, mode, n_ctx, n_ctx_orig, 6 floats, sections, n_offs
  const int32_t n_dims = p[1], mode = p[2], n_ctx_orig = p[4], n_offs = p[15];
  if (mode != GGML_ROPE_TYPE_NORMAL && mode != GGML_ROPE_TYPE_NEOX) return unimplemented("ROPE mode {}", mode);
  if (n_offs != 0) return unimplemented("ROPE from offset {}", n_offs);
  if (x->ne[3] != 1 || !ggml_are_same_shape(x, n) || pos->ne[0] != x->ne[2])
    return unimplemented("ROPE of a {}-d batch or with {} positions for {} tokens", x->ne[3], pos->ne[0], x->ne[2]);
  if (ff && ff->ne[0] < n_dims / 2) return unimplemented("ROPE with {} freq factors for {} dims", ff->ne[0], n_dims);
  auto f = [&](int i) { return f32_param(n, i); };
  kernels::Shape shape = kernels::elt::make_shape(
      {{"n_tokens", x->ne[2]}, {"n_head", x->ne[1]}, {"head_dim", x->ne[0]}, {"n_dims", n_dims}, {"mode", mode},
       {"has_ff", ff ? 1 : 0}, {"n_ctx_orig", n_ctx_orig}},
      {{"freq_base_f32", f(5)}, {"freq_scale_f32", f(6)}, {"ext_factor_f32", f(7)}, {"attn_factor_f32", f(8)},
       {"beta_fast_f32", f(9)}, {"beta_slow_f32", f(10)}});
  if (!x_dense) {
    shape.dims["x_head"] = static_cast<int64_t>(x->nb[1] / sizeof(float));
    shape.dims["x_tok"] = static_cast<int64_t>(x->nb[2] / sizeof(float));
  }
  std::map<std::string, uint64_t> bind = {{"x", addr(x)}, {"pos", addr(pos)}, {"y", addr(n)}};
  if (ff) bind["ff"] = addr(ff);
  LOOM_ASSIGN_OR_RETURN(OpCall c, make_call(n, "rope", std::move(shape), std::move(bind)));
  return Calls{std::move(c)};
}

// GLU (SWIGLU, GEGLU): swiglu, geglu. The split form (gate and up as two tensors of one shape,
// as llama.cpp's llama and gemma graphs build it) and the fused form (one tensor holding both
// halves of each row, Phi-3's; `swapped` puts the gate second), dense or views of rows that lie
// evenly apart: the op's strided rows read each half in place. Other GLU variants stay on the CPU.
Result<Calls> lower_glu(const ggml_tensor* n) {
  const ggml_tensor *a = n->src[0], *b = n->src[1];
  LOOM_RETURN_IF_ERROR(of_type(n, GGML_TYPE_F32, "dst"));
  const ggml_glu_op kind = ggml_get_glu_op(n);
  const char* op = kind == GGML_GLU_OP_SWIGLU ? "swiglu" : kind == GGML_GLU_OP_GEGLU ? "geglu" : nullptr;
  if (!op) return unimplemented("GLU {}", ggml_glu_op_name(kind));
  const bool swapped = n->op_params[1] != 0;  // op_params: glu op, swapped
  const int64_t nc = n->ne[0], rows = ggml_nrows(n);
  if (b) {
    if (!ggml_are_same_shape(a, b) || !ggml_are_same_shape(a, n)) return unimplemented("GLU of tensors of different shapes");
    const ggml_tensor *g = swapped ? b : a, *u = swapped ? a : b;
    if (ggml_is_contiguous(a) && ggml_is_contiguous(b)) {
      LOOM_RETURN_IF_ERROR(dense(a, "src0"));
      LOOM_RETURN_IF_ERROR(dense(b, "src1"));
      LOOM_ASSIGN_OR_RETURN(OpCall c, make_elementwise(n, op, kernels::Shape{{{"n", ggml_nelements(n)}}}, {g, u}));
      return Calls{std::move(c)};
    }
    LOOM_ASSIGN_OR_RETURN(int64_t sa, row_stride(a, "src0"));
    LOOM_ASSIGN_OR_RETURN(int64_t sb, row_stride(b, "src1"));
    if (sa != sb) return unimplemented("GLU halves {} and {} of different row strides", a->name, b->name);
    kernels::Shape shape{{{"n", nc}, {"n_rows", rows}, {"x_row", sa}}};
    LOOM_ASSIGN_OR_RETURN(OpCall c, make_elementwise(n, op, std::move(shape), {g, u}));
    return Calls{std::move(c)};
  }
  // Fused: row r holds [first half | second half] of nc = ne0 / 2 values each (an odd last
  // value is not read, as in ggml).
  if (a->ne[0] / 2 != nc || a->ne[1] != n->ne[1] || a->ne[2] != n->ne[2] || a->ne[3] != n->ne[3])
    return unimplemented("GLU of {} halves {} into {}", a->name, a->ne[0], nc);
  LOOM_ASSIGN_OR_RETURN(int64_t sa, row_stride(a, "src0"));
  LOOM_ASSIGN_OR_RETURN(OpCall c, make_call(n, op, kernels::Shape{{{"n", nc}, {"n_rows", rows}, {"x_row", sa}}}, {}));
  const uint64_t first = addr(a), second = first + sizeof(float) * static_cast<uint64_t>(nc);
  c.bind = {{"g", swapped ? second : first}, {"u", swapped ? first : second}, {"y", addr(n)}};
  return Calls{std::move(c)};
}

Result<Calls> lower_scale(const ggml_tensor* n) {
  const ggml_tensor* x = n->src[0];
  LOOM_RETURN_IF_ERROR(of_type(x, GGML_TYPE_F32, "src0"));
  LOOM_RETURN_IF_ERROR(of_type(n, GGML_TYPE_F32, "dst"));
  const float s = f32_param(n, 0), bias = f32_param(n, 1);
  if (bias != 0.0f) return unimplemented("SCALE with a bias ({})", bias);
  kernels::Shape shape = kernels::elt::make_shape({{"n", ggml_nelements(n)}}, {{"s_f32", s}});
  LOOM_ASSIGN_OR_RETURN(OpCall c, make_elementwise(n, "scale", std::move(shape), {x}));
  return Calls{std::move(c)};
}

Result<Calls> lower_rms_norm(const ggml_tensor* n) {
  const ggml_tensor* x = n->src[0];
  LOOM_RETURN_IF_ERROR(of_type(x, GGML_TYPE_F32, "src0"));
  LOOM_RETURN_IF_ERROR(of_type(n, GGML_TYPE_F32, "dst"));
  kernels::Shape shape = kernels::elt::make_shape({{"n_rows", ggml_nrows(n)}, {"n", n->ne[0]}, {"has_weight", 0}},
                                                  {{"eps_f32", f32_param(n, 0)}});
  LOOM_ASSIGN_OR_RETURN(OpCall c, make_call(n, "rms_norm", std::move(shape), {{"x", addr(x)}, {"y", addr(n)}}));
  return Calls{std::move(c)};
}

// NORM: layer norm of f32 rows without weight (ggml multiplies and adds the weight and bias in
// separate MUL and ADD nodes): layer_norm.
Result<Calls> lower_norm(const ggml_tensor* n) {
  const ggml_tensor* x = n->src[0];
  LOOM_RETURN_IF_ERROR(of_type(x, GGML_TYPE_F32, "src0"));
  LOOM_RETURN_IF_ERROR(of_type(n, GGML_TYPE_F32, "dst"));
  kernels::Shape shape = kernels::elt::make_shape({{"n_rows", ggml_nrows(n)}, {"n", n->ne[0]}}, {{"eps_f32", f32_param(n, 0)}});
  LOOM_ASSIGN_OR_RETURN(OpCall c, make_call(n, "layer_norm", std::move(shape), {{"x", addr(x)}, {"y", addr(n)}}));
  return Calls{std::move(c)};
}

// out[:, i, b1, b2] = table[:, ids[i, b1, b2], b1, b2]: one get_rows per batch (b1, b2).
Result<Calls> lower_get_rows(const ggml_tensor* n) {
  const ggml_tensor *table = n->src[0], *ids = n->src[1];
  LOOM_RETURN_IF_ERROR(dense(table, "src0"));
  LOOM_RETURN_IF_ERROR(of_type(ids, GGML_TYPE_I32, "src1"));
  LOOM_RETURN_IF_ERROR(of_type(n, GGML_TYPE_F32, "dst"));
  const int64_t b1 = table->ne[2], b2 = table->ne[3];
  if (b1 * b2 > kMaxBatches) return unimplemented("GET_ROWS over {} batches of tables", b1 * b2);
  kernels::Shape shape{{{"wtype", static_cast<int64_t>(table->type)}, {"n_in", table->ne[0]},
                        {"n_vocab", table->ne[1]}, {"n_ids", ids->ne[0]}}};
  // Dense tensors: batch b starts b whole batches in (ggml's strides of size-1 dimensions are
  // arbitrary, so they are not used).
  const uint64_t t_batch = ggml_row_size(table->type, table->ne[0]) * table->ne[1];
  const uint64_t id_batch = sizeof(int32_t) * ids->ne[0], out_batch = sizeof(float) * n->ne[0] * n->ne[1];
  Calls calls;
  for (int64_t b = 0; b < b1 * b2; ++b) {
    const uint64_t i = static_cast<uint64_t>(b);
    LOOM_ASSIGN_OR_RETURN(OpCall c, make_call(n, "get_rows", shape,
                                              {{"table", addr(table) + i * t_batch}, {"ids", addr(ids) + i * id_batch},
                                               {"out", addr(n) + i * out_batch}}));
    calls.push_back(std::move(c));
  }
  return calls;
}

// SET_ROWS: rows of f32 src0 written into dst (src2's data: ggml's result is a view of it), f32
// or f16, at the i64 / i32 row indices of src1, batched as ggml broadcasts the indices: set_rows.
// src0 may be a view (rows and batches at whole-value strides). Quantized destinations and
// non-contiguous destinations or indices stay on the CPU.
Result<Calls> lower_set_rows(const ggml_tensor* n) {
  const ggml_tensor *x = n->src[0], *ids = n->src[1], *dst = n->src[2];
  // src0 dense, or a view whose rows and batches lie at whole-value strides (V of a fused QKV
  // row, test-backend-ops' views): read through them.
  if (x->type != GGML_TYPE_F32) return unimplemented("src0 {} is {}, not f32", x->name, ggml_type_name(x->type));
  const bool x_dense = ggml_is_contiguous(x);
  if (x_dense) LOOM_RETURN_IF_ERROR(dense(x, "src0"));
  else if (x->nb[0] != sizeof(float) || x->nb[1] % 4 || x->nb[2] % 4 || x->nb[3] % 4 || addr(x) % 4)
    return unimplemented("SET_ROWS of {}: values of a row not contiguous", x->name);
  if (dst->type != GGML_TYPE_F32 && dst->type != GGML_TYPE_F16)
    return unimplemented("SET_ROWS into {} (f32 and f16 only)", ggml_type_name(dst->type));
  LOOM_RETURN_IF_ERROR(dense(dst, "src2"));
  LOOM_RETURN_IF_ERROR(of_type(n, dst->type, "dst"));
  if (ids->type != GGML_TYPE_I64 && ids->type != GGML_TYPE_I32)
    return unimplemented("SET_ROWS with {} row indices", ggml_type_name(ids->type));
  LOOM_RETURN_IF_ERROR(dense(ids, "src1"));
  if (n->data != dst->data) return unimplemented("SET_ROWS whose result is not its destination's memory");
  if (x->ne[0] != dst->ne[0] || x->ne[2] != dst->ne[2] || x->ne[3] != dst->ne[3] || ids->ne[0] != x->ne[1] || ids->ne[3] != 1)
    return unimplemented("SET_ROWS of shapes other than ggml's [n, rows, b2, b3] -> [n, n_dst, b2, b3] by [rows, i2, i3]");
  kernels::Shape shape{{{"n", x->ne[0]}, {"n_rows", x->ne[1]}, {"n_dst", dst->ne[1]}, {"b2", x->ne[2]}, {"b3", x->ne[3]},
                        {"i2", ids->ne[1]}, {"i3", ids->ne[2]}, {"itype", static_cast<int64_t>(ids->type)},
                        {"dtype", static_cast<int64_t>(dst->type)}}};
  if (!x_dense) {
    // Strides of size-1 dimensions are arbitrary in ggml: not used (0 there).
    shape.dims["x_row"] = x->ne[1] > 1 ? static_cast<int64_t>(x->nb[1] / 4) : x->ne[0];
    shape.dims["x_b2"] = x->ne[2] > 1 ? static_cast<int64_t>(x->nb[2] / 4) : 0;
    shape.dims["x_b3"] = x->ne[3] > 1 ? static_cast<int64_t>(x->nb[3] / 4) : 0;
  }
  LOOM_ASSIGN_OR_RETURN(OpCall c, make_call(n, "set_rows", std::move(shape), {{"x", addr(x)}, {"ids", addr(ids)}, {"dst", addr(n)}}));
  return Calls{std::move(c)};
}

// CONT (src0 into a dense result) and CPY (src0 into src1's memory, the result a view of it):
// f32 values read through src0's strides, any view or permutation, written in ggml's logical
// order as f32 (CONT, CPY) or f16 (CPY): copy. A destination of another shape than the source
// (same element count) must be dense; other types stay on the CPU.
Result<Calls> lower_copy(const ggml_tensor* n) {
  const ggml_tensor *x = n->src[0], *dst = n->op == GGML_OP_CPY ? n->src[1] : n;
  if (x->type != GGML_TYPE_F32) return unimplemented("{} of {} (f32 sources only)", ggml_op_desc(n), ggml_type_name(x->type));
  if (dst->type != GGML_TYPE_F32 && !(n->op == GGML_OP_CPY && dst->type == GGML_TYPE_F16))
    return unimplemented("{} into {}", ggml_op_desc(n), ggml_type_name(dst->type));
  if (n->type != dst->type || n->data != dst->data || ggml_nelements(x) != ggml_nelements(n))
    return unimplemented("{} whose result is not its destination's memory", ggml_op_desc(n));
  const size_t es = ggml_type_size(dst->type);
  for (int k = 0; k < 4; ++k)
    if (x->nb[k] % sizeof(float) || dst->nb[k] % es)
      return unimplemented("{} with strides of partial values", ggml_op_desc(n));
  if (addr(x) % sizeof(float) || addr(dst) % es) return unimplemented("{} of unaligned tensors", ggml_op_desc(n));
  const bool same = ggml_are_same_shape(x, dst);
  if (!same && !ggml_is_contiguous(dst))
    return unimplemented("{} into a non-contiguous destination of another shape", ggml_op_desc(n));
  kernels::Shape shape{{{"dtype", static_cast<int64_t>(dst->type)}}};
  int64_t dense_stride = 1;
  for (int k = 0; k < 4; ++k) {
    shape.dims[fmt::format("n{}", k)] = x->ne[k];
    shape.dims[fmt::format("s{}", k)] = static_cast<int64_t>(x->nb[k] / sizeof(float));
    // Same shapes: through dst's strides; else dense in src0's shape (the same memory order).
    shape.dims[fmt::format("d{}", k)] = same ? static_cast<int64_t>(dst->nb[k] / es) : dense_stride;
    dense_stride *= x->ne[k];
  }
  LOOM_ASSIGN_OR_RETURN(OpCall c, make_call(n, "copy", std::move(shape), {{"x", addr(x)}, {"y", addr(dst)}}));
  return Calls{std::move(c)};
}

// A copy call of f32 `x` (any strides) into the dense f32 or f16 memory at `to`, in x's shape.
Result<OpCall> dense_copy(const ggml_tensor* n, const ggml_tensor* x, uint64_t to, ggml_type to_type) {
  kernels::Shape shape{{{"dtype", static_cast<int64_t>(to_type)}}};
  int64_t dense_stride = 1;
  for (int k = 0; k < 4; ++k) {
    if (x->nb[k] % sizeof(float)) return unimplemented("{} of a tensor with strides of partial values", ggml_op_desc(n));
    shape.dims[fmt::format("n{}", k)] = x->ne[k];
    shape.dims[fmt::format("s{}", k)] = static_cast<int64_t>(x->nb[k] / sizeof(float));
    shape.dims[fmt::format("d{}", k)] = dense_stride;
    dense_stride *= x->ne[k];
  }
  return make_call(n, "copy", std::move(shape), {{"x", addr(x)}, {"y", to}});
}

// SOFT_MAX: softmax(x * scale + mask) per row of f32 x, the mask f32 (dense rows of the row
// length, broadcast over dimensions 2 and 3 as ggml does) or none: x copied into the result
// (copy, unless in place), then softmax in place, one call per batch (i2, i3) with a mask, one
// for all rows without. ALiBi (max_bias), attention sinks and f16 masks stay on the CPU.
Result<Calls> lower_soft_max(const ggml_tensor* n) {
  const ggml_tensor *x = n->src[0], *m = n->src[1];
  if (n->src[2]) return unimplemented("SOFT_MAX with attention sinks");
  if (x->type != GGML_TYPE_F32) return unimplemented("SOFT_MAX of {}", ggml_type_name(x->type));
  LOOM_RETURN_IF_ERROR(of_type(n, GGML_TYPE_F32, "dst"));
  const float scale = f32_param(n, 0), max_bias = f32_param(n, 1);
  if (max_bias != 0.0f) return unimplemented("SOFT_MAX with ALiBi (max_bias {})", max_bias);
  if (!ggml_are_same_shape(x, n)) return unimplemented("SOFT_MAX of another shape than its result");
  const int64_t ne0 = n->ne[0], ne1 = n->ne[1], batches = n->ne[2] * n->ne[3];
  if (m) {
    LOOM_RETURN_IF_ERROR(of_type(m, GGML_TYPE_F32, "mask"));
    if (m->ne[0] != ne0 || m->ne[1] < ne1 || n->ne[2] % m->ne[2] || n->ne[3] % m->ne[3])
      return unimplemented("SOFT_MAX with a mask of [{}, {}, {}, {}]", m->ne[0], m->ne[1], m->ne[2], m->ne[3]);
    if (batches > kMaxBatches) return unimplemented("SOFT_MAX with a mask over {} batches", batches);
  }
  Calls calls;
  if (n->data != x->data) {
    LOOM_ASSIGN_OR_RETURN(OpCall c, dense_copy(n, x, addr(n), GGML_TYPE_F32));
    calls.push_back(std::move(c));
  } else if (!ggml_is_contiguous(x)) {
    return unimplemented("SOFT_MAX in place of a non-contiguous tensor");
  }
  const int64_t rows = m ? ne1 : ggml_nrows(n);
  kernels::Shape shape = kernels::elt::make_shape({{"n_rows", rows}, {"n", ne0}, {"has_mask", m ? 1 : 0}}, {{"scale_f32", scale}});
  const uint64_t batch_bytes = sizeof(float) * static_cast<uint64_t>(ne0 * ne1);
  for (int64_t b = 0; b < (m ? batches : 1); ++b) {
    std::map<std::string, uint64_t> bind = {{"x", addr(n) + static_cast<uint64_t>(b) * batch_bytes}};
    if (m) {
      const int64_t i2 = b % n->ne[2], i3 = b / n->ne[2];
      bind["mask"] = addr(m) + static_cast<uint64_t>(i2 % m->ne[2]) * m->nb[2] + static_cast<uint64_t>(i3 % m->ne[3]) * m->nb[3];
    }
    LOOM_ASSIGN_OR_RETURN(OpCall c, make_call(n, "softmax", shape, std::move(bind)));
    calls.push_back(std::move(c));
  }
  return calls;
}

// dst[m][r] = dot(weight row r, activation row m): the engine's two steps, the activations
// converted to what the kernel reads (quantize_act: the weight's vec_dot_type, Q8_1 for
// matmul_mmq, f16 for matmul_mma; f32 weights read them as they are), then the kernel that the
// engine's weight plan picks for a matrix in GGUF rows and a step of that many rows
// (exec::WeightPlan::for_rows: on PTX matvec_gpu up to 16 rows, the tensor-core matmuls for
// prompts; elsewhere matvec/matmul). One weight matrix serves all activation rows at once;
// batched weights (src0 ne2, ne3 > 1, broadcast over src1's batches as ggml does) take one
// call per activation batch.
Result<Calls> lower_mul_mat(const ggml_tensor* n, ir::TargetKind target, const ScratchAlloc& scratch) {
  const ggml_tensor *w = n->src[0], *x = n->src[1];
  LOOM_RETURN_IF_ERROR(dense(w, "src0"));
  LOOM_RETURN_IF_ERROR(of_type(x, GGML_TYPE_F32, "src1"));
  LOOM_RETURN_IF_ERROR(of_type(n, GGML_TYPE_F32, "dst"));
  const GgmlType wt = type_of(w);
  if (!llm::ref::vec_dot_type(wt).ok()) return unimplemented("MUL_MAT with {} weights", ggml_type_name(w->type));
  const bool batched = w->ne[2] != 1 || w->ne[3] != 1;
  const int64_t n_batches = batched ? x->ne[2] * x->ne[3] : 1;
  if (n_batches > kMaxBatches) return unimplemented("MUL_MAT over {} batches of weights", n_batches);
  const int64_t n_in = w->ne[0], n_out = w->ne[1], rows = ggml_nrows(x), batch_rows = rows / n_batches;
  LOOM_ASSIGN_OR_RETURN(exec::MatmulKernel k,
                        exec::WeightPlan::for_rows(wt, n_in, n_out, batch_rows, target, exec::prefill_matmul_option()));
  Calls calls;
  // Dense rows throughout (ggml's strides of size-1 dimensions are arbitrary: not used).
  uint64_t xq = addr(x), xq_row = sizeof(float) * static_cast<uint64_t>(n_in);
  if (k.xtype != GgmlType::F32) {
    kernels::Shape qs{{{"dtype", static_cast<int64_t>(k.xtype)}, {"n_in", n_in}, {"n_tokens", rows}}};
    LOOM_ASSIGN_OR_RETURN(OpCall q, make_call(n, "quantize_act", std::move(qs), {{"x", addr(x)}}));
    uint64_t bytes = 0;
    for (const kernels::ArgSpec& a : q.op->args(q.shape))
      if (a.name == "xq") bytes = static_cast<uint64_t>(a.bytes);
    LOOM_ASSIGN_OR_RETURN(xq, scratch(bytes));
    xq_row = bytes / static_cast<uint64_t>(rows);
    q.bind["xq"] = xq;
    calls.push_back(std::move(q));
  }
  const std::string x_arg(k.x_arg());
  const int64_t r2 = x->ne[2] / w->ne[2], r3 = x->ne[3] / w->ne[3];  // ggml's broadcast ratios
  const uint64_t w_matrix = ggml_row_size(w->type, n_in) * static_cast<uint64_t>(n_out);
  for (int64_t b = 0; b < n_batches; ++b) {
    const int64_t i2 = b % x->ne[2], i3 = b / x->ne[2];
    const uint64_t wb = addr(w) + static_cast<uint64_t>(i2 / r2 + (i3 / r3) * w->ne[2]) * w_matrix;
    const uint64_t row = static_cast<uint64_t>(b * batch_rows);
    LOOM_ASSIGN_OR_RETURN(OpCall m, make_call(n, k.op->name(), k.shape,
                                              {{"w", wb}, {x_arg, xq + row * xq_row},
                                               {"y", addr(n) + row * sizeof(float) * static_cast<uint64_t>(n_out)}}));
    calls.push_back(std::move(m));
  }
  return calls;
}

// FLASH_ATTN_EXT: softmax(q·k * scale, soft-capped, + mask) · v over f16 K and V with f32 q,
// grouped-query heads: the engine's attention ops in their masked form (attention_decode up to
// the engine's decode size of 8 query tokens, else attention_prompt), q, K and V read through
// their strides (llama.cpp's cache views, test-backend-ops' head-major tensors), one call per
// batch of dimension 3. ALiBi, attention sinks, other K/V types, differing K and V head sizes,
// a mask per head and no mask stay on the CPU.
constexpr int64_t kDecodeTokens = 8;

Result<Calls> lower_flash_attn(const ggml_tensor* n, ir::TargetKind target) {
  const ggml_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *m = n->src[3];
  if (n->src[4]) return unimplemented("FLASH_ATTN_EXT with attention sinks");
  if (!m) return unimplemented("FLASH_ATTN_EXT without a mask");
  if (q->type != GGML_TYPE_F32 || k->type != GGML_TYPE_F16 || v->type != GGML_TYPE_F16 || m->type != GGML_TYPE_F16)
    return unimplemented("FLASH_ATTN_EXT of q {}, K {}, V {}, mask {} (f32, f16, f16, f16 only)", ggml_type_name(q->type),
                         ggml_type_name(k->type), ggml_type_name(v->type), ggml_type_name(m->type));
  LOOM_RETURN_IF_ERROR(of_type(n, GGML_TYPE_F32, "dst"));
  LOOM_RETURN_IF_ERROR(dense(m, "mask"));
  const float scale = f32_param(n, 0), max_bias = f32_param(n, 1), cap = f32_param(n, 2);
  if (max_bias != 0.0f) return unimplemented("FLASH_ATTN_EXT with ALiBi (max_bias {})", max_bias);
  if (!(scale > 0.0f) || cap < 0.0f) return unimplemented("FLASH_ATTN_EXT with scale {}, soft-cap {}", scale, cap);
  const int64_t D = q->ne[0], T = q->ne[1], H = q->ne[2], B = q->ne[3], n_kv = k->ne[1], HK = k->ne[2];
  if (k->ne[0] != D || v->ne[0] != D) return unimplemented("FLASH_ATTN_EXT with K/V head sizes {}/{} for q's {}", k->ne[0], v->ne[0], D);
  if (v->ne[1] != n_kv || v->ne[2] != HK || k->ne[3] != B || v->ne[3] != B || HK < 1 || H % HK)
    return unimplemented("FLASH_ATTN_EXT of K/V shapes other than [head_dim, n_kv, n_head_kv, batches]");
  if (n->ne[0] != D || n->ne[1] != H || n->ne[2] != T || n->ne[3] != B || !ggml_is_contiguous(n))
    return unimplemented("FLASH_ATTN_EXT whose result is not a dense [head_dim, n_head, n_tokens, batches]");
  if (m->ne[0] < n_kv || m->ne[1] < T || m->ne[2] != 1 || B % m->ne[3])
    return unimplemented("FLASH_ATTN_EXT with a mask of [{}, {}, {}, {}] for {} keys, {} tokens", m->ne[0], m->ne[1], m->ne[2],
                         m->ne[3], n_kv, T);
  if (B > kMaxBatches) return unimplemented("FLASH_ATTN_EXT over {} batches", B);
  if (elt_gpu(target) && (D % 32 || (D / 32) & (D / 32 - 1) || D > 256))
    return unimplemented("FLASH_ATTN_EXT with head_dim {} on a GPU (32, 64, 128, 256)", D);
  // Values within a head are contiguous; heads, tokens and cells at whole-value strides, the
  // same for K and V; addresses aligned for the kernels' vector loads.
  if (q->nb[0] != 4 || k->nb[0] != 2 || v->nb[0] != 2 || q->nb[1] % 4 || q->nb[2] % 4 || k->nb[1] % 2 || k->nb[2] % 2 ||
      v->nb[1] != k->nb[1] || v->nb[2] != k->nb[2] || v->nb[3] != k->nb[3])
    return unimplemented("FLASH_ATTN_EXT with q/K/V strides the kernels do not walk");
  if (addr(q) % 32 || addr(k) % 16 || addr(v) % 16 || q->nb[3] % 32 || k->nb[3] % 16)
    return unimplemented("FLASH_ATTN_EXT with q/K/V not aligned to 32/16 bytes");
  const int64_t q_tok = static_cast<int64_t>(q->nb[1] / 4), q_head = static_cast<int64_t>(q->nb[2] / 4);
  const int64_t kv_cell = static_cast<int64_t>(k->nb[1] / 2), kv_head = static_cast<int64_t>(k->nb[2] / 2);
  // ggml soft-caps the scaled score (cap * tanh(s * scale / cap)); the op caps, then scales.
  kernels::Shape shape = kernels::elt::make_shape(
      {{"n_tokens", T}, {"n_head", H}, {"n_head_kv", HK}, {"head_dim", D}, {"n_seq", 1}, {"n_ctx", n_kv}, {"n_swa", 0},
       {"mask", 1}, {"mask_stride", m->ne[0]}},
      {{"scale_f32", scale}, {"softcap_f32", cap > 0.0f ? cap / scale : 0.0f}});
  if (q_tok != H * D || q_head != D || kv_cell != HK * D || kv_head != D) {
    shape.dims["q_tok"] = q_tok;
    shape.dims["q_head"] = q_head;
    shape.dims["kv_cell"] = kv_cell;
    shape.dims["kv_head"] = kv_head;
  }
  const std::string_view op = T <= kDecodeTokens ? "attention_decode" : "attention_prompt";
  Calls calls;
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t i = static_cast<uint64_t>(b), mb = static_cast<uint64_t>(b % m->ne[3]);
    LOOM_ASSIGN_OR_RETURN(OpCall c, make_call(n, op, shape,
                                              {{"q", addr(q) + i * q->nb[3]}, {"mask", addr(m) + mb * m->nb[3]},
                                               {"k_cache", addr(k) + i * k->nb[3]}, {"v_cache", addr(v) + i * v->nb[3]},
                                               {"out", addr(n) + i * n->nb[3]}}));
    calls.push_back(std::move(c));
  }
  return calls;
}

}  // namespace

bool is_noop(const ggml_tensor* node) {
  switch (node->op) {
    case GGML_OP_NONE: case GGML_OP_VIEW: case GGML_OP_RESHAPE: case GGML_OP_PERMUTE: case GGML_OP_TRANSPOSE:
      return true;
    default:
      return false;
  }
}

Result<std::vector<OpCall>> lower_node(const ggml_tensor* node, ir::TargetKind target, const ScratchAlloc& scratch) {
  if (is_noop(node)) return Calls{};
  switch (node->op) {
    case GGML_OP_ADD: return lower_binary(node, /*mul=*/false);
    case GGML_OP_MUL: return lower_binary(node, /*mul=*/true);
    case GGML_OP_GLU: return lower_glu(node);
    case GGML_OP_ROPE: return lower_rope(node);
    case GGML_OP_SCALE: return lower_scale(node);
    case GGML_OP_RMS_NORM: return lower_rms_norm(node);
    case GGML_OP_NORM: return lower_norm(node);
    case GGML_OP_GET_ROWS: return lower_get_rows(node);
    case GGML_OP_SET_ROWS: return lower_set_rows(node);
    case GGML_OP_CONT: case GGML_OP_CPY: return lower_copy(node);
    case GGML_OP_SOFT_MAX: return lower_soft_max(node);
    case GGML_OP_MUL_MAT: return lower_mul_mat(node, target, scratch);
    case GGML_OP_FLASH_ATTN_EXT: return lower_flash_attn(node, target);
    default: return unimplemented("{} has no lowering", ggml_op_desc(node));
  }
}

Status check_node(const ggml_tensor* node, ir::TargetKind target) {
  // Addresses do not matter to the decision; the scratch need not exist.
  auto no_memory = [](uint64_t) -> Result<uint64_t> { return uint64_t{0}; };
  return lower_node(node, target, no_memory).status();
}

}  // namespace loom::ggml_hrx
