// Loom IR -> LLVM IR for AMDGPU. The function is built as a list of basic blocks so that loop
// header phis can be completed once the body (and the block it ends in) is known.
#include "loom/codegen/amdgpu/amdgpu_emitter.h"

#include <map>
#include <set>

#include "loom/codegen/emit_util.h"
#include "loom/ir/passes/passes.h"

namespace loom::codegen {
namespace {

using namespace ir;

std::string scalar_ty(Scalar s) {
  switch (s) {
    case Scalar::kI1: return "i1";
    case Scalar::kI8: case Scalar::kU8: return "i8";
    case Scalar::kI16: case Scalar::kU16: return "i16";
    case Scalar::kI32: case Scalar::kU32: return "i32";
    case Scalar::kI64: case Scalar::kU64: return "i64";
    case Scalar::kF16: return "half";
    case Scalar::kBF16: return "bfloat";
    case Scalar::kF32: return "float";
    case Scalar::kF64: return "double";
  }
  return "i32";
}

int addr_space_number(AddrSpace a) {
  switch (a) {
    case AddrSpace::kGlobal: return 1;
    case AddrSpace::kShared: return 3;
    case AddrSpace::kConstant: return 4;
    case AddrSpace::kLocal: return 5;
  }
  return 1;
}

std::string ty(Type t) {
  if (t.is_pointer()) return fmt::format("ptr addrspace({})", addr_space_number(t.addr_space()));
  if (t.is_vector()) return fmt::format("<{} x {}>", t.lanes(), scalar_ty(t.elem()));
  return scalar_ty(t.elem());
}

// Intrinsic name suffix: f32, v4f32, i32, ...
std::string mangle(Type t) {
  std::string s = is_float(t.elem()) ? fmt::format("f{}", scalar_bits(t.elem())) : fmt::format("i{}", scalar_bits(t.elem()));
  if (t.elem() == Scalar::kBF16) s = "bf16";
  return t.is_vector() ? fmt::format("v{}{}", t.lanes(), s) : s;
}

std::string scalar_literal(const Literal& lit, Scalar s) {
  switch (s) {
    case Scalar::kI1: return lit.i ? "true" : "false";
    case Scalar::kF16: return fmt::format("0xH{:04X}", f16_bits(lit.f));
    case Scalar::kBF16: return fmt::format("0xR{:04X}", bf16_bits(lit.f));
    case Scalar::kF32:
    case Scalar::kF64: return fmt::format("0x{:016X}", f64_bits(lit.f));  // LLVM writes floats as doubles
    default: return fmt::format("{}", lit.i);  // LLVM takes any value that fits the width
  }
}

std::string splat_literal(const std::string& scalar, Type t) {
  if (!t.is_vector()) return scalar;
  std::string out = "<";
  for (int l = 0; l < t.lanes(); ++l) out += (l ? ", " : "") + scalar_ty(t.elem()) + " " + scalar;
  return out + ">";
}

struct BasicBlock {
  std::string label;
  std::vector<std::string> phis;
  std::vector<std::string> lines;
};

class FunctionEmitter {
 public:
  FunctionEmitter(const Kernel& k, std::map<std::string, std::string>& decls, std::string& globals)
      : k_(k), namer_(k), val_(k.num_values()), decls_(decls), globals_(globals) {}

  Result<std::string> run(int attr_group) {
    std::string params;
    for (size_t i = 0; i < k_.params.size(); ++i) {
      const Value* p = k_.params[i];
      val_[p->id] = "%" + value_ident(p, namer_);
      params += fmt::format("{}{} {}", i ? ", " : "", ty(p->type), val_[p->id]);
    }
    new_block("entry");
    LOOM_RETURN_IF_ERROR(block(k_.body));
    emit("ret void");
    std::string out = fmt::format("\ndefine amdgpu_kernel void @{}({}) #{} {{\n", k_.name, params, attr_group);
    for (size_t b = 0; b < blocks_.size(); ++b) {
      out += blocks_[b].label + ":\n";
      if (b == 0)
        for (const auto& a : allocas_) out += "  " + a + "\n";  // static allocas live in the entry block
      for (const auto& l : blocks_[b].phis) out += "  " + l + "\n";
      for (const auto& l : blocks_[b].lines) out += "  " + l + "\n";
    }
    out += "}\n";
    return out;
  }

 private:
  void new_block(std::string label) {
    blocks_.push_back({std::move(label), {}, {}});
    cur_ = blocks_.size() - 1;
  }
  void emit(std::string s) { blocks_[cur_].lines.push_back(std::move(s)); }
  std::string tmp() { return fmt::format("%t{}", tmps_++); }
  std::string label(std::string_view what) { return fmt::format("{}{}", what, labels_++); }
  const std::string& v(const Value* x) const { return val_[x->id]; }
  std::string tv(const Value* x) const { return ty(x->type) + " " + v(x); }
  std::string define(const Value* r) { return val_[r->id] = "%" + value_ident(r, namer_); }

  std::string call(const std::string& ret, const std::string& name, const std::vector<std::string>& typed_args) {
    std::string types, args;
    for (size_t i = 0; i < typed_args.size(); ++i) {
      const std::string& a = typed_args[i];
      // The type: a vector type ends at its first '>' (the value may be a splat literal, with
      // spaces of its own); any other type is everything up to the value, after the last space.
      size_t split = a.starts_with('<') ? a.find('>') + 1 : a.rfind(' ');
      types += (i ? ", " : "") + a.substr(0, split);
      args += (i ? ", " : "") + a;
    }
    decls_[name] = fmt::format("declare {} @{}({})", ret, name, types);
    return fmt::format("call {} @{}({})", ret, name, args);
  }

  std::string special(const char* intrinsic) {
    std::string t = tmp();
    emit(t + " = " + call("i32", intrinsic, {}));
    return t;
  }

  // Block size or grid size (in blocks) from the HSA dispatch packet.
  std::string dispatch_dim(bool grid, int dim) {
    std::string dp = tmp();
    emit(dp + " = " + call("ptr addrspace(4)", "llvm.amdgcn.dispatch.ptr", {}));
    std::string g = tmp(), s16 = tmp(), size = tmp();
    emit(fmt::format("{} = getelementptr inbounds i8, ptr addrspace(4) {}, i64 {}", g, dp, 4 + 2 * dim));
    emit(fmt::format("{} = load i16, ptr addrspace(4) {}, align 2", s16, g));
    emit(fmt::format("{} = zext i16 {} to i32", size, s16));
    if (!grid) return size;
    std::string gg = tmp(), items = tmp(), blocks = tmp();
    emit(fmt::format("{} = getelementptr inbounds i8, ptr addrspace(4) {}, i64 {}", gg, dp, 12 + 4 * dim));
    emit(fmt::format("{} = load i32, ptr addrspace(4) {}, align 4", items, gg));
    emit(fmt::format("{} = udiv i32 {}, {}", blocks, items, size));
    return blocks;
  }

  std::string lane_id() {
    std::string t = tmp();
    emit(t + " = " + call("i32", "llvm.amdgcn.mbcnt.lo", {"i32 -1", "i32 0"}));
    return t;
  }

  // A 32-bit scalar of type t as i32 and back (the lane-moving intrinsics take i32).
  std::string to_bits(const std::string& x, Type t) {
    if (!t.is_float()) return x;
    std::string bits = tmp();
    emit(fmt::format("{} = bitcast float {} to i32", bits, x));
    return bits;
  }
  std::string from_bits(const std::string& bits, Type t) {
    if (!t.is_float()) return bits;
    std::string f = tmp();
    emit(fmt::format("{} = bitcast i32 {} to float", f, bits));
    return f;
  }

  // Value `x` (32-bit scalar of type t) from lane `src` via ds_bpermute.
  std::string permute(const std::string& x, Type t, const std::string& src) {
    std::string addr = tmp(), out = tmp();
    emit(fmt::format("{} = shl i32 {}, 2", addr, src));
    std::string bits = to_bits(x, t);
    emit(out + " = " + call("i32", "llvm.amdgcn.ds.bpermute", {"i32 " + addr, "i32 " + bits}));
    return from_bits(out, t);
  }

  // Value `x` from lane `lane ^ mask` for a constant 0 < mask < 32, in one instruction that
  // stays in the VALU (docs/ir.md, "amdgpu", lists which lanes each control reads): a DPP
  // quad_perm (mask < 4) or row_xmask (mask < 16) inside each row of 16 lanes, or a
  // v_permlanex16 from the other row (mask >= 16). llc folds a DPP move into the VALU
  // instruction that consumes it (v_add_f32_dpp ...).
  std::string xor_lanes(const std::string& x, Type t, int mask) {
    const AmdgpuLaneXor how = amdgpu_lane_xor(mask);
    std::string bits = to_bits(x, t), out = tmp();
    if (how.permlanex16)
      emit(fmt::format("{} = {}", out, call("i32", "llvm.amdgcn.permlanex16",
                                            {"i32 poison", "i32 " + bits, fmt::format("i32 {}", static_cast<int32_t>(how.sel_lo)),
                                             fmt::format("i32 {}", static_cast<int32_t>(how.sel_hi)), "i1 false", "i1 false"})));
    else  // every row and bank written; bound_ctrl: a source lane outside the exec mask reads 0
      emit(fmt::format("{} = {}", out, call("i32", "llvm.amdgcn.update.dpp.i32",
                                            {"i32 poison", "i32 " + bits, fmt::format("i32 {}", how.dpp_ctrl), "i32 15",
                                             "i32 15", "i1 true"})));
    return from_bits(out, t);
  }

  // acc + the four signed byte products of a and b: gfx11's v_dot4_i32_iu8 with both sources
  // signed (llvm.amdgcn.sudot4 with the sign flags set; no clamp, the sum wraps like the other
  // targets').
  std::string sdot4(const std::string& a, const std::string& b, const std::string& acc) {
    return call("i32", "llvm.amdgcn.sudot4", {"i1 true", "i32 " + a, "i1 true", "i32 " + b, "i32 " + acc, "i1 false"});
  }

  // i64 index for a getelementptr.
  std::string index64(const Value* index) {
    if (index->def && index->def->op == Op::kConst) return fmt::format("{}", index->def->lit.i);
    if (scalar_bits(index->type.elem()) == 64) return v(index);
    std::string t = tmp();
    emit(fmt::format("{} = {} i32 {} to i64", t, is_signed(index->type.elem()) ? "sext" : "zext", v(index)));
    return t;
  }

  std::string element_ptr(const Value* ptr, const Value* index) {
    std::string i = index64(index), p = tmp();
    emit(fmt::format("{} = getelementptr inbounds {}, {} {}, i64 {}", p, scalar_ty(ptr->type.elem()), ty(ptr->type), v(ptr), i));
    return p;
  }

  // The binary/unary/math op on values of type t (never f16/bf16: those are widened first).
  std::string arith(const Inst& in, Type t, const std::vector<std::string>& a) {
    const std::string T = ty(t);
    const bool flt = t.is_float();
    const bool sgn = is_signed(t.elem());
    std::string r = tmp();
    auto bin = [&](std::string_view op) { emit(fmt::format("{} = {} {} {}, {}", r, op, T, a[0], a[1])); };
    auto intrinsic = [&](std::string_view base, size_t n) {
      std::vector<std::string> args;
      for (size_t i = 0; i < n; ++i) args.push_back(T + " " + a[i]);
      emit(r + " = " + call(T, fmt::format("llvm.{}.{}", base, mangle(t)), args));
    };
    switch (in.op) {
      case Op::kAdd: bin(flt ? "fadd" : "add"); break;
      case Op::kSub: bin(flt ? "fsub" : "sub"); break;
      case Op::kMul: bin(flt ? "fmul" : "mul"); break;
      case Op::kDiv: bin(flt ? "fdiv" : sgn ? "sdiv" : "udiv"); break;
      case Op::kRem: bin(sgn ? "srem" : "urem"); break;
      case Op::kMin: intrinsic(flt ? "minnum" : sgn ? "smin" : "umin", 2); break;
      case Op::kMax: intrinsic(flt ? "maxnum" : sgn ? "smax" : "umax", 2); break;
      case Op::kAnd: bin("and"); break;
      case Op::kOr: bin("or"); break;
      case Op::kXor: bin("xor"); break;
      case Op::kShl: bin("shl"); break;
      case Op::kShr: bin(sgn ? "ashr" : "lshr"); break;
      case Op::kNeg:
        if (flt) emit(fmt::format("{} = fneg {} {}", r, T, a[0]));
        else emit(fmt::format("{} = sub {} {}, {}", r, T, splat_literal("0", t), a[0]));
        break;
      case Op::kNot:
        emit(fmt::format("{} = xor {} {}, {}", r, T, a[0], splat_literal(t.is_bool() ? "true" : "-1", t)));
        break;
      case Op::kAbs:
        if (flt) {
          intrinsic("fabs", 1);
        } else if (!sgn) {
          return a[0];
        } else {
          emit(r + " = " + call(T, "llvm.abs." + mangle(t), {T + " " + a[0], "i1 false"}));
        }
        break;
      case Op::kFma: intrinsic("fma", 3); break;
      case Op::kExp: intrinsic("exp", 1); break;
      case Op::kExp2: intrinsic("exp2", 1); break;
      case Op::kLog: intrinsic("log", 1); break;
      case Op::kSqrt: intrinsic("sqrt", 1); break;
      case Op::kSin: intrinsic("sin", 1); break;
      case Op::kCos: intrinsic("cos", 1); break;
      case Op::kRsqrt: {
        std::string s = tmp();
        emit(s + " = " + call(T, "llvm.sqrt." + mangle(t), {T + " " + a[0]}));
        emit(fmt::format("{} = fdiv {} {}, {}", r, T, splat_literal(scalar_literal(make_literal(t.elem(), 1.0, 1), t.elem()), t), s));
        break;
      }
      case Op::kCmp: {
        static const char* kInt[] = {"eq", "ne", "lt", "le", "gt", "ge"};
        static const char* kFloat[] = {"oeq", "une", "olt", "ole", "ogt", "oge"};
        int m = static_cast<int>(in.mode) - static_cast<int>(Mode::kEq);
        if (flt) {
          emit(fmt::format("{} = fcmp {} {} {}, {}", r, kFloat[m], T, a[0], a[1]));
        } else {
          std::string pred = kInt[m];
          if (m >= 2) pred = (sgn ? "s" : "u") + pred;
          emit(fmt::format("{} = icmp {} {} {}, {}", r, pred, T, a[0], a[1]));
        }
        break;
      }
      default: emit(fmt::format("; unsupported {}", op_name(in.op))); break;
    }
    return r;
  }

  // Conversion of x (type `from`) to type `to` (same lanes).
  std::string convert(const std::string& x, Type from, Type to) {
    Scalar fs = from.elem(), ts = to.elem();
    if (fs == ts || (scalar_ty(fs) == scalar_ty(ts) && !is_float(fs))) return x;  // i32 <-> u32 and the like
    std::string r = tmp();
    if (ts == Scalar::kI1) {
      if (is_float(fs)) emit(fmt::format("{} = fcmp une {} {}, {}", r, ty(from), x, splat_literal(scalar_literal(make_literal(fs, 0, 0), fs), from)));
      else emit(fmt::format("{} = icmp ne {} {}, {}", r, ty(from), x, splat_literal("0", from)));
      return r;
    }
    if (fs == Scalar::kI1) {
      emit(fmt::format("{} = {} {} {} to {}", r, is_float(ts) ? "uitofp" : "zext", ty(from), x, ty(to)));
      return r;
    }
    const int fb = scalar_bits(fs), tb = scalar_bits(ts);
    std::string op;
    if (!is_float(fs) && !is_float(ts)) op = tb > fb ? (is_signed(fs) ? "sext" : "zext") : "trunc";
    else if (!is_float(fs)) op = is_signed(fs) ? "sitofp" : "uitofp";
    else if (!is_float(ts)) op = is_signed(ts) ? "fptosi" : "fptoui";
    else if ((fs == Scalar::kF16 && ts == Scalar::kBF16) || (fs == Scalar::kBF16 && ts == Scalar::kF16)) {
      Type mid = Type::of(Scalar::kF32, to.lanes());
      return convert(convert(x, from, mid), mid, to);
    } else op = tb > fb ? "fpext" : "fptrunc";
    emit(fmt::format("{} = {} {} {} to {}", r, op, ty(from), x, ty(to)));
    return r;
  }

  Status elementwise(const Inst& in) {
    const Value* res = in.result();
    if (in.op == Op::kSelect) {
      emit(fmt::format("{} = select {}, {}, {}", define(res), tv(in.operands[0]), tv(in.operands[1]), tv(in.operands[2])));
      return Status();
    }
    if (in.op == Op::kConvert) {
      std::string r = convert(v(in.operands[0]), in.operands[0]->type, res->type);
      alias(res, r);
      return Status();
    }
    Type t = in.operands[0]->type;
    std::vector<std::string> a;
    for (const Value* o : in.operands) a.push_back(v(o));
    if (is_half(t.elem())) {  // compute in f32, round once
      Type wide = Type::of(Scalar::kF32, t.lanes());
      for (auto& x : a) x = convert(x, t, wide);
      std::string r = arith(in, wide, a);
      alias(res, in.op == Op::kCmp ? r : convert(r, wide, res->type));
      return Status();
    }
    alias(res, arith(in, t, a));
    return Status();
  }

  // Gives the result its own name with a no-op, or reuses a temporary.
  void alias(const Value* r, const std::string& text) { val_[r->id] = text; }

  Status inst(const Inst& in) {
    const Value* r = in.result();
    switch (in.op) {
      case Op::kConst: {
        std::string lit = scalar_literal(in.lit, r->type.elem());
        val_[r->id] = splat_literal(lit, r->type);
        return Status();
      }
      case Op::kBitcast:
        if (r->type.is_pointer()) alias(r, v(in.operands[0]));
        else emit(fmt::format("{} = bitcast {} to {}", define(r), tv(in.operands[0]), ty(r->type)));
        return Status();
      case Op::kSplat: {
        std::string t = tmp();
        emit(fmt::format("{} = insertelement {} poison, {}, i64 0", t, ty(r->type), tv(in.operands[0])));
        emit(fmt::format("{} = shufflevector {} {}, {} poison, <{} x i32> zeroinitializer", define(r), ty(r->type), t,
                         ty(r->type), r->type.lanes()));
        return Status();
      }
      case Op::kBuild: {
        std::string cur = "poison";
        for (size_t l = 0; l < in.operands.size(); ++l) {
          std::string next = l + 1 == in.operands.size() ? define(r) : tmp();
          emit(fmt::format("{} = insertelement {} {}, {}, i64 {}", next, ty(r->type), cur, tv(in.operands[l]), l));
          cur = next;
        }
        return Status();
      }
      case Op::kExtract:
        emit(fmt::format("{} = extractelement {}, i64 {}", define(r), tv(in.operands[0]), in.imm));
        return Status();
      case Op::kLoad: {
        std::string p = element_ptr(in.operands[0], in.operands[1]);
        int64_t align = in.imm ? in.imm : r->type.elem_bytes();
        emit(fmt::format("{} = load {}, {} {}, align {}", define(r), ty(r->type), ty(in.operands[0]->type), p, align));
        return Status();
      }
      case Op::kPrefetch: return Status();  // dropped (ops.h)
      case Op::kStore: {
        std::string p = element_ptr(in.operands[0], in.operands[1]);
        int64_t align = in.imm ? in.imm : in.operands[2]->type.elem_bytes();
        emit(fmt::format("store {}, {} {}, align {}", tv(in.operands[2]), ty(in.operands[0]->type), p, align));
        return Status();
      }
      case Op::kOffset: {
        std::string i = index64(in.operands[1]);
        emit(fmt::format("{} = getelementptr inbounds {}, {}, i64 {}", define(r), scalar_ty(r->type.elem()),
                         tv(in.operands[0]), i));
        return Status();
      }
      case Op::kAtomic: {
        std::string p = element_ptr(in.operands[0], in.operands[1]);
        Scalar s = r->type.elem();
        std::string op = in.mode == Mode::kAdd ? (is_float(s) ? "fadd" : "add") : (is_signed(s) ? "max" : "umax");
        const char* scope = in.operands[0]->type.addr_space() == AddrSpace::kShared ? "workgroup" : "agent";
        emit(fmt::format("{} = atomicrmw {} {} {}, {} syncscope(\"{}\") monotonic, align {}", define(r), op,
                         ty(in.operands[0]->type), p, tv(in.operands[2]), scope, r->type.elem_bytes()));
        return Status();
      }
      case Op::kAllocShared: {
        std::string g = fmt::format("@{}.smem{}", k_.name, allocs_++);
        globals_ += fmt::format("{} = internal addrspace(3) global [{} x {}] undef, align 16\n", g, in.imm,
                                scalar_ty(r->type.elem()));
        val_[r->id] = g;
        return Status();
      }
      case Op::kAllocLocal:
        allocas_.push_back(fmt::format("{} = alloca [{} x {}], align 16, addrspace(5)", define(r), in.imm,
                                       scalar_ty(r->type.elem())));
        return Status();
      case Op::kBarrier:
        emit("fence syncscope(\"workgroup\") release");
        emit(call("void", "llvm.amdgcn.s.barrier", {}));
        emit("fence syncscope(\"workgroup\") acquire");
        return Status();
      case Op::kThreadId:
      case Op::kBlockId: {
        const char* dims[] = {"x", "y", "z"};
        int d = static_cast<int>(in.mode) - static_cast<int>(Mode::kX);
        std::string name = fmt::format("llvm.amdgcn.{}.id.{}", in.op == Op::kThreadId ? "workitem" : "workgroup", dims[d]);
        emit(fmt::format("{} = {}", define(r), call("i32", name, {})));
        return Status();
      }
      case Op::kBlockDim:
      case Op::kGridDim:
        alias(r, dispatch_dim(in.op == Op::kGridDim, static_cast<int>(in.mode) - static_cast<int>(Mode::kX)));
        return Status();
      case Op::kLaneId: alias(r, lane_id()); return Status();
      case Op::kShuffle: {
        const Value* mv = in.operands[1];
        if (in.mode == Mode::kXor && mv->def && mv->def->op == Op::kConst && mv->def->lit.i >= 0 && mv->def->lit.i < 32) {
          const int mask = static_cast<int>(mv->def->lit.i);
          alias(r, mask == 0 ? v(in.operands[0]) : xor_lanes(v(in.operands[0]), r->type, mask));
          return Status();
        }
        std::string lane = lane_id(), src = tmp();
        const std::string& m = v(in.operands[1]);
        switch (in.mode) {
          case Mode::kXor: emit(fmt::format("{} = xor i32 {}, {}", src, lane, m)); break;
          case Mode::kIdx: emit(fmt::format("{} = and i32 {}, 31", src, m)); break;
          case Mode::kDown:
          case Mode::kUp: {  // out of range: the lane keeps its own value
            std::string moved = tmp(), ok = tmp();
            emit(fmt::format("{} = {} i32 {}, {}", moved, in.mode == Mode::kDown ? "add" : "sub", lane, m));
            emit(fmt::format("{} = icmp ult i32 {}, 32", ok, moved));
            emit(fmt::format("{} = select i1 {}, i32 {}, i32 {}", src, ok, moved, lane));
            break;
          }
          default: break;
        }
        alias(r, permute(v(in.operands[0]), r->type, src));
        return Status();
      }
      case Op::kWarpReduce: {
        // The xor butterfly (offsets 16, 8, 4, 2, 1, the order the ptx target uses, so every
        // lane combines the same partial results in the same order and ends with the same
        // value): one permlanex16 across the rows, then four DPP steps inside each row.
        std::string cur = v(in.operands[0]);
        Inst step;
        step.op = in.mode == Mode::kAdd ? Op::kAdd : in.mode == Mode::kMax ? Op::kMax : Op::kMin;
        for (int off = 16; off >= 1; off /= 2) cur = arith(step, r->type, {cur, xor_lanes(cur, r->type, off)});
        alias(r, cur);
        return Status();
      }
      case Op::kDot4: {
        if (!r->type.is_vector()) {
          emit(fmt::format("{} = {}", define(r), sdot4(v(in.operands[0]), v(in.operands[1]), v(in.operands[2]))));
          return Status();
        }
        // One v_dot4_i32_iu8 per lane, reassembled.
        const int n = r->type.lanes();
        std::string cur = "poison";
        for (int l = 0; l < n; ++l) {
          std::string x[3];
          for (int i = 0; i < 3; ++i) {
            x[i] = tmp();
            emit(fmt::format("{} = extractelement {}, i64 {}", x[i], tv(in.operands[static_cast<size_t>(i)]), l));
          }
          std::string s = tmp();
          emit(fmt::format("{} = {}", s, sdot4(x[0], x[1], x[2])));
          std::string next = l + 1 == n ? define(r) : tmp();
          emit(fmt::format("{} = insertelement {} {}, i32 {}, i64 {}", next, ty(r->type), cur, s, l));
          cur = next;
        }
        return Status();
      }
      case Op::kConcat: {
        std::string idx;
        for (int l = 0; l < r->type.lanes(); ++l) idx += fmt::format("{}i32 {}", l ? ", " : "", l);
        emit(fmt::format("{} = shufflevector {}, {}, <{} x i32> <{}>", define(r), tv(in.operands[0]), tv(in.operands[1]),
                         r->type.lanes(), idx));
        return Status();
      }
      case Op::kMma:
      case Op::kLdmatrix:
      case Op::kLdmatrixT:
      case Op::kWgmma:
      case Op::kWgmmaRs:
      case Op::kWgmmaFence:
      case Op::kWgmmaCommit:
      case Op::kWgmmaWait:
      case Op::kFenceAsyncShared:
      case Op::kAmxZero:
      case Op::kAmxLoad:
      case Op::kAmxStore:
      case Op::kAmxDpI8:
      case Op::kAmxDpBf16:
        return unimplemented("'{}' has no amdgpu form (verify with the amdgpu target first)", op_name(in.op));
      case Op::kFor: return for_loop(in);
      case Op::kIf: return if_else(in);
      case Op::kYield: return Status();
      default: return elementwise(in);
    }
  }

  Status block(const Block& b) {
    for (const Inst* i : b.insts) LOOM_RETURN_IF_ERROR(inst(*i));
    return Status();
  }

  const Inst* yield_of(const Block& b) {
    return !b.insts.empty() && b.insts.back()->op == Op::kYield ? b.insts.back() : nullptr;
  }

  Status for_loop(const Inst& in) {
    const Block& body = in.regions[0];
    const std::string pre = blocks_[cur_].label;
    const std::string head = label("loop"), body_label = head + ".body", exit = head + ".exit";
    emit("br label %" + head);
    new_block(head);
    const size_t head_index = cur_;
    const Value* iv = body.args[0];
    define(iv);
    for (size_t a = 1; a < body.args.size(); ++a) {
      define(body.args[a]);
      val_[in.results[a - 1]->id] = v(body.args[a]);  // the header phis are the results on exit
    }
    std::string c = tmp();
    emit(fmt::format("{} = icmp {} {}, {}", c, is_signed(iv->type.elem()) ? "slt" : "ult", tv(iv), v(in.operands[1])));
    emit(fmt::format("br i1 {}, label %{}, label %{}", c, body_label, exit));
    new_block(body_label);
    LOOM_RETURN_IF_ERROR(block(body));
    std::string next = tmp();
    emit(fmt::format("{} = add {}, {}", next, tv(iv), v(in.operands[2])));
    emit("br label %" + head);
    const std::string latch = blocks_[cur_].label;
    auto& phis = blocks_[head_index].phis;
    phis.push_back(fmt::format("{} = phi {} [ {}, %{} ], [ {}, %{} ]", v(iv), ty(iv->type), v(in.operands[0]), pre, next, latch));
    const Inst* y = yield_of(body);
    for (size_t a = 1; a < body.args.size(); ++a) {
      const Value* arg = body.args[a];
      phis.push_back(fmt::format("{} = phi {} [ {}, %{} ], [ {}, %{} ]", v(arg), ty(arg->type), v(in.operands[a + 2]), pre,
                                 v(y->operands[a - 1]), latch));
    }
    new_block(exit);
    return Status();
  }

  Status if_else(const Inst& in) {
    const std::string base = label("if"), then_label = base + ".then", else_label = base + ".else", end = base + ".end";
    emit(fmt::format("br {}, label %{}, label %{}", tv(in.operands[0]), then_label, else_label));
    std::string ends[2];
    for (int branch = 0; branch < 2; ++branch) {
      new_block(branch == 0 ? then_label : else_label);
      LOOM_RETURN_IF_ERROR(block(in.regions[branch]));
      emit("br label %" + end);
      ends[branch] = blocks_[cur_].label;
    }
    new_block(end);
    const Inst* yt = yield_of(in.regions[0]);
    const Inst* ye = yield_of(in.regions[1]);
    for (size_t i = 0; i < in.results.size(); ++i) {
      const Value* r = in.results[i];
      blocks_[cur_].phis.push_back(fmt::format("{} = phi {} [ {}, %{} ], [ {}, %{} ]", define(r), ty(r->type),
                                               v(yt->operands[i]), ends[0], v(ye->operands[i]), ends[1]));
    }
    return Status();
  }

  const Kernel& k_;
  Namer namer_;
  std::vector<std::string> val_;
  std::map<std::string, std::string>& decls_;
  std::string& globals_;
  std::vector<BasicBlock> blocks_;
  size_t cur_ = 0;
  std::vector<std::string> allocas_;
  int tmps_ = 0, labels_ = 0, allocs_ = 0;
};

}  // namespace

AmdgpuLaneXor amdgpu_lane_xor(int mask) {
  AmdgpuLaneXor out;
  if (mask >= 16) {
    out.permlanex16 = true;
    for (uint32_t i = 0; i < 8; ++i) {
      out.sel_lo |= (i ^ static_cast<uint32_t>(mask - 16)) << (4 * i);
      out.sel_hi |= ((i + 8) ^ static_cast<uint32_t>(mask - 16)) << (4 * i);
    }
  } else if (mask < 4) {
    for (uint32_t j = 0; j < 4; ++j) out.dpp_ctrl |= (j ^ static_cast<uint32_t>(mask)) << (2 * j);  // quad_perm
  } else {
    out.dpp_ctrl = 0x160 + static_cast<uint32_t>(mask);  // row_xmask
  }
  return out;
}

Result<std::string> emit_amdgpu_llvm(const Module& module, const AmdgpuEmitOptions& options) {
  Module lowered = clone_module(module);
  for (auto& k : lowered.kernels) {
    lower_tanh_erf(*k);
    lower_async_copies(*k);  // no asynchronous copy on these GPUs: a load and a store
  }
  std::map<std::string, std::string> decls;
  std::string globals, functions;
  // Attribute group 0: any block size up to 1024; one more group per distinct launch bound.
  std::map<int, int> groups;  // max block threads -> attribute group
  for (const auto& k : lowered.kernels) {
    // The local data share of a workgroup holds 64 KiB on these GPUs.
    if (const int64_t lds = shared_bytes(*k); lds > 64 * 1024)
      return unimplemented("kernel {}: {} bytes of shared memory is not supported by the amdgpu target (its limit is 65536)",
                           k->name, lds);
    int group = 0;
    if (auto it = options.max_block_threads.find(k->name); it != options.max_block_threads.end()) {
      if (it->second < 1 || it->second > 1024)
        return invalid_argument("kernel {}: a block of {} threads (amdgpu takes 1..1024)", k->name, it->second);
      group = groups.emplace(it->second, static_cast<int>(groups.size()) + 1).first->second;
    }
    FunctionEmitter f(*k, decls, globals);
    LOOM_ASSIGN_OR_RETURN(std::string text, f.run(group));
    functions += text;
  }
  std::string out = "; Generated by Loom from Loom IR (target amdgpu, gfx11 wave32)\n";
  out += "target triple = \"amdgcn-amd-amdhsa\"\n\n";
  out += globals;
  out += functions;
  out += "\n";
  for (const auto& [name, d] : decls) out += d + "\n";
  const char* attrs = "attributes #{} = {{ \"amdgpu-flat-work-group-size\"=\"1,{}\" \"target-features\"=\"+wavefrontsize32\" }}\n";
  out += "\n" + fmt::format(fmt::runtime(attrs), 0, 1024);
  for (const auto& [threads, group] : groups) out += fmt::format(fmt::runtime(attrs), group, threads);
  return out;
}

}  // namespace loom::codegen
