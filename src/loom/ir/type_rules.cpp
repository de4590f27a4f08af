// Type inference and checking, one case per TypeRule of the op table.
#include "loom/ir/type_rules.h"

#include <fmt/format.h>

namespace loom::ir {
namespace {

bool in_category(Type t, Category c) {
  switch (c) {
    case Category::kAny: return t.is_value();
    case Category::kNum: return t.is_int() || t.is_float();
    case Category::kIntOrBool: return t.is_int() || t.is_bool();
    case Category::kInt: return t.is_int();
    case Category::kFloat: return t.is_float();
    case Category::kFloatNo64: return t.is_float() && t.elem() != Scalar::kF64;
  }
  return false;
}

std::string_view category_text(Category c) {
  switch (c) {
    case Category::kAny: return "a scalar or vector";
    case Category::kNum: return "an integer or float (scalar or vector)";
    case Category::kIntOrBool: return "an integer or i1 (scalar or vector)";
    case Category::kInt: return "an integer (scalar or vector)";
    case Category::kFloat: return "a float (scalar or vector)";
    case Category::kFloatNo64: return "f16, bf16 or f32 (scalar or vector)";
  }
  return "?";
}

bool is_index(Type t) { return t.is_scalar() && t.is_int() && scalar_bits(t.elem()) >= 32; }
bool is_32bit_scalar(Type t) {
  return t.is_scalar() && (t.elem() == Scalar::kI32 || t.elem() == Scalar::kU32 || t.elem() == Scalar::kF32);
}

}  // namespace

bool valid_type(Type t) {
  switch (t.kind()) {
    case Type::Kind::kInvalid: return false;
    case Type::Kind::kScalar: return true;
    case Type::Kind::kVector: return valid_vector(t.elem(), t.lanes());
    case Type::Kind::kPointer: return t.elem() != Scalar::kI1;
  }
  return false;
}

bool valid_param_type(Type t) {
  if (t.is_scalar()) return true;
  return t.is_pointer() && valid_type(t) &&
         (t.addr_space() == AddrSpace::kGlobal || t.addr_space() == AddrSpace::kConstant);
}

Type infer_result_type(Op op, std::span<const Type> ts) {
  const OpInfo& info = op_info(op);
  auto at = [&](size_t i) { return i < ts.size() ? ts[i] : Type(); };
  switch (info.rule) {
    case TypeRule::kSame: return in_category(at(0), info.category) ? at(0) : Type();
    case TypeRule::kCmp: return at(0).is_value() ? Type::of(Scalar::kI1, at(0).lanes()) : Type();
    case TypeRule::kSelect: return at(1).is_value() ? at(1) : Type();
    case TypeRule::kBuild:
      return at(0).is_scalar() && valid_lanes(static_cast<int>(ts.size()))
                 ? Type::vector(at(0).elem(), static_cast<int>(ts.size()))
                 : Type();
    case TypeRule::kExtract: return at(0).is_vector() ? at(0).elem_type() : Type();
    case TypeRule::kLoad:
    case TypeRule::kAtomic: return at(0).is_pointer() ? at(0).elem_type() : Type();
    case TypeRule::kOffset: return at(0).is_pointer() ? at(0) : Type();
    case TypeRule::kSpecial: return Type::scalar(Scalar::kI32);
    case TypeRule::kShuffle:
    case TypeRule::kWarpReduce: return at(0).is_value() ? at(0) : Type();
    case TypeRule::kDot4: return at(0).is_value() ? at(0) : Type();
    case TypeRule::kConcat:
      return at(0).is_vector() && valid_lanes(2 * at(0).lanes()) ? Type::vector(at(0).elem(), 2 * at(0).lanes())
                                                                 : Type();
    case TypeRule::kMma:
      return at(2) == Type::vector(Scalar::kI32, 4) ? Type::vector(Scalar::kI32, 4) : Type::vector(Scalar::kF32, 4);
    case TypeRule::kLdmatrix: return Type::vector(Scalar::kF16, 8);
    case TypeRule::kWgmma: return at(op == Op::kWgmmaRs ? 3 : 4);
    default: return Type();
  }
}

std::string check_inst_types(const Inst& inst, bool check_results) {
  const OpInfo& info = inst.info();
  const auto& ops = inst.operands;
  const size_t n = ops.size();
  if (info.num_operands >= 0 && n != static_cast<size_t>(info.num_operands))
    return fmt::format("'{}' takes {} operand(s), got {}", info.name, info.num_operands, n);
  if (!mode_in_set(inst.mode, info.modes))
    return info.modes == ModeSet::kNone ? fmt::format("'{}' takes no modifier", info.name)
                                        : fmt::format("'{}' needs a valid modifier", info.name);
  for (const Value* v : ops)
    if (!v || !valid_type(v->type)) return "operand with an invalid type";
  if (check_results)
    for (const Value* v : inst.results)
      if (!v || !valid_type(v->type)) return "result with an invalid or missing type";
  auto t = [&](size_t i) { return ops[i]->type; };
  const bool region_op = info.rule == TypeRule::kFor || info.rule == TypeRule::kIf;
  const bool no_result = rule_has_no_result(info.rule);
  if (check_results && no_result && !inst.results.empty()) return fmt::format("'{}' has no result", info.name);
  if (check_results && !no_result && !region_op && inst.results.size() != 1)
    return fmt::format("'{}' has exactly one result", info.name);
  Type r = inst.results.empty() ? Type() : inst.results[0]->type;
  auto want = [&](Type expected) -> std::string {
    if (!check_results || r == expected) return "";
    return fmt::format("'{}' result should be {}, not {}", info.name, expected.str(), r.str());
  };

  switch (info.rule) {
    case TypeRule::kSame:
      if (!in_category(t(0), info.category))
        return fmt::format("'{}' needs {}, got {}", info.name, category_text(info.category), t(0).str());
      for (size_t i = 1; i < n; ++i)
        if (t(i) != t(0))
          return fmt::format("'{}' operands must have one type, got {} and {}", info.name, t(0).str(), t(i).str());
      return want(t(0));
    case TypeRule::kCmp:
      if (!t(0).is_value()) return fmt::format("'cmp' compares values, got {}", t(0).str());
      if (t(1) != t(0)) return fmt::format("'cmp' operands must have one type, got {} and {}", t(0).str(), t(1).str());
      if (t(0).is_bool() && inst.mode != Mode::kEq && inst.mode != Mode::kNe)
        return "i1 values only compare with eq or ne";
      return want(Type::of(Scalar::kI1, t(0).lanes()));
    case TypeRule::kSelect:
      if (!t(0).is_bool()) return fmt::format("'select' condition must be i1, got {}", t(0).str());
      if (!t(1).is_value() || t(2) != t(1))
        return fmt::format("'select' values must have one type, got {} and {}", t(1).str(), t(2).str());
      if (t(0).is_vector() && t(0).lanes() != t(1).lanes())
        return fmt::format("'select' condition {} does not match values {}", t(0).str(), t(1).str());
      return want(t(1));
    case TypeRule::kConvert:
      if (!t(0).is_value()) return "'convert' converts scalars or vectors";
      if (!check_results) return "";
      if (!r.is_value()) return "'convert' converts scalars or vectors";
      if (t(0).lanes() != r.lanes())
        return fmt::format("'convert' keeps the lane count: {} to {}", t(0).str(), r.str());
      return "";
    case TypeRule::kBitcast:
      if (!check_results) return "";
      if (t(0).is_pointer() || r.is_pointer()) {
        if (!t(0).is_pointer() || !r.is_pointer() || t(0).addr_space() != r.addr_space())
          return fmt::format("'bitcast' of pointers keeps the address space: {} to {}", t(0).str(), r.str());
        return "";
      }
      if (t(0).elem() == Scalar::kI1 || r.elem() == Scalar::kI1) return "'bitcast' does not take i1";
      if (t(0).bits() != r.bits())
        return fmt::format("'bitcast' keeps the size: {} ({} bits) to {} ({} bits)", t(0).str(), t(0).bits(),
                           r.str(), r.bits());
      return "";
    case TypeRule::kConst:
      if (!check_results) return "";
      if (!r.is_value()) return "'const' makes a scalar or vector";
      if (inst.lit.is_float != r.is_float())
        return fmt::format("'const' literal kind does not match {}", r.str());
      return "";
    case TypeRule::kSplat:
      if (!t(0).is_scalar()) return fmt::format("'splat' takes a scalar, got {}", t(0).str());
      if (!check_results) return "";
      if (!r.is_vector() || r.elem() != t(0).elem())
        return fmt::format("'splat' of {} makes a vector of {}, not {}", t(0).str(), t(0).str(), r.str());
      return "";
    case TypeRule::kBuild:
      if (!valid_lanes(static_cast<int>(n))) return fmt::format("'build' takes 2, 4, 8 or 16 scalars, got {}", n);
      for (size_t i = 0; i < n; ++i)
        if (!t(i).is_scalar() || t(i) != t(0))
          return fmt::format("'build' operands must be scalars of one type, got {} and {}", t(0).str(), t(i).str());
      return want(Type::vector(t(0).elem(), static_cast<int>(n)));
    case TypeRule::kExtract:
      if (!t(0).is_vector()) return fmt::format("'extract' takes a vector, got {}", t(0).str());
      if (inst.imm < 0 || inst.imm >= t(0).lanes())
        return fmt::format("lane {} out of range for {}", inst.imm, t(0).str());
      return want(t(0).elem_type());
    case TypeRule::kPrefetch:
      if (!t(0).is_pointer() || (t(0).addr_space() != AddrSpace::kGlobal && t(0).addr_space() != AddrSpace::kConstant))
        return fmt::format("'prefetch' needs a pointer to global or constant memory, got {}", t(0).str());
      if (!is_index(t(1))) return fmt::format("'prefetch' index must be a 32- or 64-bit integer, got {}", t(1).str());
      return "";
    case TypeRule::kLoad:
    case TypeRule::kStore:
    case TypeRule::kOffset:
    case TypeRule::kAtomic: {
      if (!t(0).is_pointer()) return fmt::format("'{}' needs a pointer, got {}", info.name, t(0).str());
      if (!is_index(t(1)))
        return fmt::format("'{}' index must be a 32- or 64-bit integer, got {}", info.name, t(1).str());
      Type p = t(0);
      if (info.rule == TypeRule::kOffset) return want(p);
      Type v = info.rule == TypeRule::kLoad ? r : t(2);
      if (info.rule == TypeRule::kLoad && !check_results) v = p.elem_type();
      if (!v.is_value() || v.elem() != p.elem())
        return fmt::format("'{}' through {} moves {} elements, not {}", info.name, p.str(),
                           scalar_name(p.elem()), v.str());
      if (info.rule == TypeRule::kLoad || info.rule == TypeRule::kStore) {
        if (inst.imm != 0) {
          if (inst.imm < 0 || (inst.imm & (inst.imm - 1)) != 0 || inst.imm > 256)
            return fmt::format("alignment {} is not a power of two up to 256", inst.imm);
          if (inst.imm < p.elem_bytes())
            return fmt::format("alignment {} is below the {}-byte element size", inst.imm, p.elem_bytes());
        }
        if (info.rule == TypeRule::kStore && p.addr_space() == AddrSpace::kConstant)
          return "cannot store through a pointer to constant memory";
        return "";
      }
      // atomics
      if (p.addr_space() != AddrSpace::kGlobal && p.addr_space() != AddrSpace::kShared)
        return fmt::format("atomics need global or shared memory, not {}", addr_space_name(p.addr_space()));
      if (!v.is_scalar()) return "atomics take a scalar value";
      Scalar s = v.elem();
      bool int_ok = s == Scalar::kI32 || s == Scalar::kU32 || s == Scalar::kI64 || s == Scalar::kU64;
      if (!(int_ok || (inst.mode == Mode::kAdd && s == Scalar::kF32)))
        return fmt::format("'atomic.{}' does not support {}", mode_name(inst.mode), scalar_name(s));
      return want(v);
    }
    case TypeRule::kAlloc: {
      if (!check_results) return "";
      AddrSpace space = inst.op == Op::kAllocShared ? AddrSpace::kShared : AddrSpace::kLocal;
      if (!r.is_pointer() || r.addr_space() != space)
        return fmt::format("'{}' makes a ptr<{}, T>, not {}", info.name, addr_space_name(space), r.str());
      // One shared buffer may take all of a block's shared memory; a local one 64 KiB.
      const int64_t limit = space == AddrSpace::kShared ? kMaxSharedBytes : 65536;
      if (inst.imm <= 0 || inst.imm * r.elem_bytes() > limit)
        return fmt::format("'{}' of {} elements is outside 1 .. {} KiB", info.name, inst.imm, limit / 1024);
      return "";
    }
    case TypeRule::kSpecial: return want(Type::scalar(Scalar::kI32));
    case TypeRule::kShuffle:
      if (!is_32bit_scalar(t(0))) return fmt::format("'shfl' moves i32, u32 or f32, got {}", t(0).str());
      if (t(1) != Type::scalar(Scalar::kI32)) return fmt::format("'shfl' lane operand must be i32, got {}", t(1).str());
      return want(t(0));
    case TypeRule::kWarpReduce:
      if (!is_32bit_scalar(t(0))) return fmt::format("'warp_reduce' takes i32, u32 or f32, got {}", t(0).str());
      return want(t(0));
    case TypeRule::kDot4:
      for (size_t i = 0; i < 3; ++i)
        if (!t(i).is_value() || t(i).elem() != Scalar::kI32)
          return fmt::format("'dot4' takes i32 operands (4 packed i8 each, scalar or vector), got {}", t(i).str());
      for (size_t i = 1; i < 3; ++i)
        if (t(i) != t(0))
          return fmt::format("'dot4' operands must have one type, got {} and {}", t(0).str(), t(i).str());
      return want(t(0));
    case TypeRule::kConcat:
      if (!t(0).is_vector()) return fmt::format("'concat' joins two vectors, got {}", t(0).str());
      if (t(1) != t(0)) return fmt::format("'concat' operands must have one type, got {} and {}", t(0).str(), t(1).str());
      if (!valid_lanes(2 * t(0).lanes()))
        return fmt::format("'concat' of {} would make {} lanes (at most 16)", t(0).str(), 2 * t(0).lanes());
      return want(Type::vector(t(0).elem(), 2 * t(0).lanes()));
    case TypeRule::kMma:
      // m16n8k16 f16 -> f32, or m16n8k32 s8 -> s32 (each i32 lane four signed bytes, lowest k first).
      if (t(0) == Type::vector(Scalar::kF16, 8) && t(1) == Type::vector(Scalar::kF16, 4) &&
          t(2) == Type::vector(Scalar::kF32, 4))
        return want(Type::vector(Scalar::kF32, 4));
      if (t(0) == Type::vector(Scalar::kI32, 4) && t(1) == Type::vector(Scalar::kI32, 2) &&
          t(2) == Type::vector(Scalar::kI32, 4))
        return want(Type::vector(Scalar::kI32, 4));
      return fmt::format("'mma' takes (f16x8, f16x4, f32x4) or packed s8 (i32x4, i32x2, i32x4), got ({}, {}, {})",
                         t(0).str(), t(1).str(), t(2).str());
    case TypeRule::kLdmatrix:
      if (!t(0).is_pointer() || t(0).addr_space() != AddrSpace::kShared || t(0).elem() != Scalar::kF16)
        return fmt::format("'{}' reads a ptr<shared, f16>, got {}", info.name, t(0).str());
      if (t(1) != Type::scalar(Scalar::kI32)) return fmt::format("'{}' index must be i32, got {}", info.name, t(1).str());
      return want(Type::vector(Scalar::kF16, 8));
    case TypeRule::kFor: {
      if (n < 3) return "'for' needs lower bound, upper bound and step";
      if (!t(0).is_scalar() || !t(0).is_int())
        return fmt::format("'for' bounds must be integer scalars, got {}", t(0).str());
      if (t(1) != t(0) || t(2) != t(0))
        return fmt::format("'for' bounds and step must have one type, got {}, {}, {}", t(0).str(), t(1).str(), t(2).str());
      if (inst.results.size() != n - 3)
        return fmt::format("'for' has {} loop-carried values but {} results", n - 3, inst.results.size());
      for (size_t i = 3; i < n; ++i)
        if (inst.results[i - 3]->type != t(i))
          return fmt::format("'for' result {} is {} but its initial value is {}", i - 3, inst.results[i - 3]->type.str(), t(i).str());
      if (inst.regions.size() != 1 || inst.regions[0].args.size() != n - 2) return "'for' body is malformed";
      for (size_t i = 0; i < inst.regions[0].args.size(); ++i)
        if (inst.regions[0].args[i]->type != (i == 0 ? t(0) : t(i + 2))) return "'for' body argument types are malformed";
      return "";
    }
    case TypeRule::kIf:
      if (t(0) != Type::scalar(Scalar::kI1)) return fmt::format("'if' condition must be i1, got {}", t(0).str());
      if (inst.regions.size() != 2) return "'if' needs then and else regions";
      for (const Value* v : inst.results)
        if (!v->type.is_value() && !v->type.is_pointer()) return "'if' results must be values or pointers";
      return "";
    case TypeRule::kCpAsync: {
      if (!t(0).is_pointer() || t(0).addr_space() != AddrSpace::kShared)
        return fmt::format("'cp_async' copies into a ptr<shared, T>, got {}", t(0).str());
      if (!t(2).is_pointer() || (t(2).addr_space() != AddrSpace::kGlobal && t(2).addr_space() != AddrSpace::kConstant))
        return fmt::format("'cp_async' copies from a ptr<global, T> or ptr<constant, T>, got {}", t(2).str());
      if (t(0).elem() != t(2).elem())
        return fmt::format("'cp_async' copies between one element type, got {} and {}", t(0).str(), t(2).str());
      if (!is_index(t(1)) || !is_index(t(3)))
        return fmt::format("'cp_async' indices must be 32- or 64-bit integers, got {} and {}", t(1).str(), t(3).str());
      if (inst.imm != 4 && inst.imm != 8 && inst.imm != 16)
        return fmt::format("'cp_async' copies 4, 8 or 16 bytes, not {}", inst.imm);
      if (inst.imm % t(0).elem_bytes() != 0)
        return fmt::format("'cp_async' of {} bytes is not a whole number of {} elements", inst.imm, scalar_name(t(0).elem()));
      return "";
    }
    case TypeRule::kCpAsyncWait:
      if (inst.imm < 0 || inst.imm > 8) return fmt::format("'{}' leaves 0 to 8 groups pending, not {}", info.name, inst.imm);
      return "";
    case TypeRule::kWgmma: {
      // wgmma: A [ai], B [bi], C; wgmma_rs: A in registers, B [bi], C.
      const bool rs = inst.op == Op::kWgmmaRs;
      const size_t bp = rs ? 1 : 2, cp = rs ? 3 : 4;
      if (rs && t(0) != Type::vector(Scalar::kU32, 4))
        return fmt::format("'wgmma_rs' takes its A fragment as u32x4 (four f16 pairs), got {}", t(0).str());
      for (size_t i : {size_t{0}, bp}) {
        if (rs && i == 0) continue;
        if (!t(i).is_pointer() || t(i).addr_space() != AddrSpace::kShared || t(i).elem() != Scalar::kF16)
          return fmt::format("'{}' reads its {} from ptr<shared, f16>, got {}", info.name, rs ? "B tile" : "A and B tiles", t(i).str());
      }
      if ((!rs && t(1) != Type::scalar(Scalar::kI32)) || t(bp + 1) != Type::scalar(Scalar::kI32))
        return fmt::format("'{}' indices must be i32, got {}", info.name, t(bp + 1).str());
      const int lanes = t(cp).is_vector() ? t(cp).lanes() : 0;
      if (t(cp).elem() != Scalar::kF32 || (lanes != 4 && lanes != 8 && lanes != 16 && lanes != 32 && lanes != 64))
        return fmt::format("'{}' accumulates f32x4, x8, x16, x32 or x64 (n = 8 .. 128), got {}", info.name, t(cp).str());
      const int64_t lbo = inst.imm & 0xFFFFFFFF, sbo = inst.imm >> 32;
      for (int64_t v : {lbo, sbo})
        if (v <= 0 || v % 16 != 0 || v >= (int64_t{1} << 18))
          return fmt::format("'{}' core-matrix strides must be positive multiples of 16 bytes below 2^18, got {} and {}", info.name, lbo, sbo);
      return want(t(cp));
    }
    case TypeRule::kAmxTile:
    case TypeRule::kAmxMem: {
      if (info.rule == TypeRule::kAmxMem) {
        if (!t(0).is_pointer() || t(0).addr_space() == AddrSpace::kConstant)
          return fmt::format("'{}' needs a ptr<global|shared|local, T>, got {}", info.name, t(0).str());
        if (!is_index(t(1)) || !is_index(t(2)))
          return fmt::format("'{}' index and stride must be 32- or 64-bit integers, got {} and {}", info.name, t(1).str(),
                             t(2).str());
      }
      if (inst.op == Op::kAmxDpI8 || inst.op == Op::kAmxDpBf16) {
        const int64_t c = inst.imm & 0xFF, a = (inst.imm >> 8) & 0xFF, b = (inst.imm >> 16) & 0xFF;
        if (c > 7 || a > 7 || b > 7 || (inst.imm >> 24) != 0)
          return fmt::format("'{}' names tiles 0 to 7, got {}, {}, {}", info.name, c, a, b);
        if (c == a || c == b || a == b) return fmt::format("'{}' needs three different tiles, got {}, {}, {}", info.name, c, a, b);
        return "";
      }
      const int64_t tile = inst.imm & 0xFF, rows = (inst.imm >> 8) & 0xFF, bytes = (inst.imm >> 16) & 0xFF;
      if (tile > 7 || (inst.imm >> 24) != 0) return fmt::format("'{}' names tiles 0 to 7, got {}", info.name, tile);
      if (rows < 1 || rows > 16 || bytes < 4 || bytes > 64 || bytes % 4 != 0)
        return fmt::format("'{}' tiles have 1 to 16 rows of 4 to 64 bytes (a multiple of 4), got {} x {}", info.name, rows,
                           bytes);
      return "";
    }
    case TypeRule::kYield:
    case TypeRule::kNone: return "";
  }
  return "";
}

}  // namespace loom::ir
