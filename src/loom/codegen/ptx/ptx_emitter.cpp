// Loom IR -> PTX. Registers are allocated per value (per lane for vectors) and declared once per
// kernel; structured control flow becomes labels and branches. Lane arithmetic, conversions and
// bit casts are in ptx_lanes.cpp.
#include "loom/codegen/ptx/ptx_emitter.h"

#include <cstdlib>

#include "loom/codegen/emit_util.h"
#include "loom/codegen/ptx/ptx_internal.h"
#include "loom/ir/passes/passes.h"

namespace loom::codegen::ptx {

using namespace ir;

RC rc_of(Scalar s) {
  if (s == Scalar::kI1) return RC::kPred;
  int bits = scalar_bits(s);
  return bits <= 16 ? RC::kB16 : bits == 32 ? RC::kB32 : RC::kB64;
}

RC rc_of(Type t) { return t.is_pointer() ? RC::kB64 : rc_of(t.elem()); }

std::string_view type_suffix(Scalar s) {
  switch (s) {
    case Scalar::kI1: return "pred";
    case Scalar::kI8: return "s8";
    case Scalar::kU8: return "u8";
    case Scalar::kI16: return "s16";
    case Scalar::kU16: return "u16";
    case Scalar::kI32: return "s32";
    case Scalar::kU32: return "u32";
    case Scalar::kI64: return "s64";
    case Scalar::kU64: return "u64";
    case Scalar::kF16: return "f16";
    case Scalar::kBF16: return "bf16";
    case Scalar::kF32: return "f32";
    case Scalar::kF64: return "f64";
  }
  return "b32";
}

std::string_view arith_suffix(Scalar s) {
  if (s == Scalar::kI8) return "s16";
  if (s == Scalar::kU8) return "u16";
  return type_suffix(s);
}

std::string_view bits_suffix(RC rc) {
  switch (rc) {
    case RC::kPred: return "pred";
    case RC::kB16: return "b16";
    case RC::kB32: return "b32";
    case RC::kB64: return "b64";
  }
  return "b32";
}

std::string KernelEmitter::new_reg(RC rc) {
  static const char* kPrefix[] = {"%p", "%h", "%r", "%rd"};
  int i = static_cast<int>(rc);
  return fmt::format("{}{}", kPrefix[i], counts_[i]++);
}

void KernelEmitter::line(const std::string& s) {
  body_ += '\t';
  body_ += s;
  body_ += '\n';
}

std::string KernelEmitter::label(std::string_view what) { return fmt::format("$L__{}_{}", what, labels_++); }

const std::vector<std::string>& KernelEmitter::define(const Value* v) {
  auto& regs = regs_[v->id];
  regs.clear();
  RC rc = rc_of(v->type);
  for (int l = 0; l < v->type.lanes(); ++l) regs.push_back(new_reg(rc));
  return regs;
}

void KernelEmitter::normalize(const std::string& reg, Scalar s) {
  if (s == Scalar::kI8) line(fmt::format("cvt.s16.s8 {0}, {0};", reg));
  if (s == Scalar::kU8) line(fmt::format("and.b16 {0}, {0}, 255;", reg));
}

// The byte address of element `index` of `ptr` as a register plus a constant byte offset
// (constant indices fold into the offset, which PTX addressing takes for free).
std::pair<std::string, int64_t> KernelEmitter::address_parts(const Value* ptr, const Value* index, int64_t extra) {
  const std::string& base = reg(ptr);
  const int64_t size = ptr->type.elem_bytes();
  if (index->def && index->def->op == Op::kConst) return {base, index->def->lit.i * size + extra};
  std::string scaled = new_reg(RC::kB64), sum = new_reg(RC::kB64);
  Scalar is = index->type.elem();
  if (is == Scalar::kI32 || is == Scalar::kU32)
    line(fmt::format("mul.wide.{} {}, {}, {};", is == Scalar::kI32 ? "s32" : "u32", scaled, reg(index), size));
  else
    line(fmt::format("mul.lo.s64 {}, {}, {};", scaled, reg(index), size));
  line(fmt::format("add.s64 {}, {}, {};", sum, base, scaled));
  return {sum, extra};
}

std::string KernelEmitter::address(const Value* ptr, const Value* index, int64_t extra) {
  auto [base, off] = address_parts(ptr, index, extra);
  return off == 0 ? "[" + base + "]" : fmt::format("[{}{:+}]", base, off);
}

std::string_view KernelEmitter::space(const Value* ptr, bool load) {
  switch (ptr->type.addr_space()) {
    case AddrSpace::kGlobal: return "global";
    case AddrSpace::kConstant: return load ? "global.nc" : "global";
    case AddrSpace::kShared: return "shared";
    case AddrSpace::kLocal: return "local";
  }
  return "global";
}

// Lanes per memory instruction: the widest of 4, 2, 1 that the alignment and 16 bytes allow.
int KernelEmitter::chunk_lanes(Type t, int64_t align) {
  int elem = t.elem_bytes();
  if (align == 0) align = elem;
  for (int c : {4, 2}) {
    if (t.lanes() % c == 0 && c * elem <= 16 && c * elem <= align) return c;
  }
  return 1;
}

// Eight halves at a 16-byte aligned address move as one v4.b32 (PTX has no v8.b16), each word
// split into or built from its two lanes.
bool KernelEmitter::half_words(Type t, int64_t align) { return is_half(t.elem()) && t.lanes() % 8 == 0 && align >= 16; }

void KernelEmitter::load(const Inst& in) {
  const Value* r = in.result();
  const auto& d = define(r);
  Scalar s = r->type.elem();
  if (half_words(r->type, in.imm)) {
    for (int l = 0; l < r->type.lanes(); l += 8) {
      std::string addr = address(in.operands[0], in.operands[1], int64_t{l} * 2);
      std::vector<std::string> w;
      for (int i = 0; i < 4; ++i) w.push_back(new_reg(RC::kB32));
      line(fmt::format("ld.{}.v4.b32 {{{}, {}, {}, {}}}, {};", space(in.operands[0], true), w[0], w[1], w[2], w[3], addr));
      for (int i = 0; i < 4; ++i) line(fmt::format("mov.b32 {{{}, {}}}, {};", d[l + 2 * i], d[l + 2 * i + 1], w[i]));
    }
    return;
  }
  std::string_view ts = is_half(s) ? "b16" : type_suffix(s);
  int chunk = chunk_lanes(r->type, in.imm);
  for (int l = 0; l < r->type.lanes(); l += chunk) {
    std::string addr = address(in.operands[0], in.operands[1], int64_t{l} * r->type.elem_bytes());
    if (chunk == 1) {
      line(fmt::format("ld.{}.{} {}, {};", space(in.operands[0], true), ts, d[l], addr));
    } else {
      std::string list;
      for (int c = 0; c < chunk; ++c) list += (c ? ", " : "") + d[l + c];
      line(fmt::format("ld.{}.v{}.{} {{{}}}, {};", space(in.operands[0], true), chunk, ts, list, addr));
    }
  }
}

void KernelEmitter::store(const Inst& in) {
  const Value* v = in.operands[2];
  const auto& src = regs_[v->id];
  Scalar s = v->type.elem();
  if (half_words(v->type, in.imm)) {
    for (int l = 0; l < v->type.lanes(); l += 8) {
      std::string addr = address(in.operands[0], in.operands[1], int64_t{l} * 2);
      std::vector<std::string> w;
      for (int i = 0; i < 4; ++i) {
        w.push_back(new_reg(RC::kB32));
        line(fmt::format("mov.b32 {}, {{{}, {}}};", w.back(), src[l + 2 * i], src[l + 2 * i + 1]));
      }
      line(fmt::format("st.{}.v4.b32 {}, {{{}, {}, {}, {}}};", space(in.operands[0], false), addr, w[0], w[1], w[2], w[3]));
    }
    return;
  }
  std::string_view ts = is_half(s) ? "b16" : type_suffix(s);
  int chunk = chunk_lanes(v->type, in.imm);
  for (int l = 0; l < v->type.lanes(); l += chunk) {
    std::string addr = address(in.operands[0], in.operands[1], int64_t{l} * v->type.elem_bytes());
    if (chunk == 1) {
      line(fmt::format("st.{}.{} {}, {};", space(in.operands[0], false), ts, addr, src[l]));
    } else {
      std::string list;
      for (int c = 0; c < chunk; ++c) list += (c ? ", " : "") + src[l + c];
      line(fmt::format("st.{}.v{}.{} {}, {{{}}};", space(in.operands[0], false), chunk, ts, addr, list));
    }
  }
}

void KernelEmitter::constant(const Inst& in) {
  const Value* r = in.result();
  const auto& d = define(r);
  Scalar s = r->type.elem();
  uint64_t bits = literal_bits(in.lit, s);
  for (const std::string& reg : d) {
    switch (rc_of(s)) {
      case RC::kPred: line(fmt::format("setp.ne.u32 {}, {}, 0;", reg, in.lit.i ? 1 : 0)); break;
      case RC::kB16: {
        // 8-bit values live sign/zero-extended in 16 bits.
        uint16_t v = static_cast<uint16_t>(static_cast<uint64_t>(in.lit.i));
        if (is_half(s)) v = static_cast<uint16_t>(bits);
        line(fmt::format("mov.b16 {}, 0x{:04X};", reg, v));
        break;
      }
      case RC::kB32:
        if (s == Scalar::kF32) line(fmt::format("mov.f32 {}, 0f{:08X};", reg, bits));
        else line(fmt::format("mov.{} {}, {};", type_suffix(s), reg, s == Scalar::kI32 ? in.lit.i : static_cast<int64_t>(bits)));
        break;
      case RC::kB64:
        if (s == Scalar::kF64) line(fmt::format("mov.f64 {}, 0d{:016X};", reg, bits));
        else if (s == Scalar::kU64) line(fmt::format("mov.u64 {}, {};", reg, bits));
        else line(fmt::format("mov.s64 {}, {};", reg, in.lit.i));
        break;
    }
  }
}

void KernelEmitter::copy(const std::string& dst, const std::string& src, RC rc) {
  if (dst == src) return;
  if (rc == RC::kPred) line(fmt::format("mov.pred {}, {};", dst, src));
  else line(fmt::format("mov.{} {}, {};", bits_suffix(rc), dst, src));
}

Status KernelEmitter::for_loop(const Inst& in) {
  const Block& body = in.regions[0];
  const Value* iv = body.args[0];
  Scalar is = iv->type.elem();
  RC irc = rc_of(is);
  copy(define(iv)[0], reg(in.operands[0]), irc);
  for (size_t a = 1; a < body.args.size(); ++a) {
    const auto& dst = define(body.args[a]);
    const auto& src = regs_[in.operands[a + 2]->id];
    for (size_t l = 0; l < dst.size(); ++l) copy(dst[l], src[l], rc_of(body.args[a]->type));
    regs_[in.results[a - 1]->id] = dst;  // the result is the last carried value
  }
  std::string head = label("loop"), end = label("end_loop");
  std::string p = new_reg(RC::kPred);
  body_ += head + ":\n";
  line(fmt::format("setp.ge.{} {}, {}, {};", arith_suffix(is), p, reg(iv), reg(in.operands[1])));
  line(fmt::format("@{} bra {};", p, end));
  LOOM_RETURN_IF_ERROR(block(body));
  if (!body.insts.empty() && body.insts.back()->op == Op::kYield) {
    const Inst& y = *body.insts.back();
    // Parallel copy through temporaries: a yield may permute the carried values.
    std::vector<std::vector<std::string>> tmp;
    for (size_t i = 0; i < y.operands.size(); ++i) {
      RC rc = rc_of(y.operands[i]->type);
      tmp.emplace_back();
      for (const std::string& src : regs_[y.operands[i]->id]) {
        tmp.back().push_back(new_reg(rc));
        copy(tmp.back().back(), src, rc);
      }
    }
    for (size_t i = 0; i < y.operands.size(); ++i)
      for (size_t l = 0; l < tmp[i].size(); ++l)
        copy(regs_[body.args[i + 1]->id][l], tmp[i][l], rc_of(y.operands[i]->type));
  }
  line(fmt::format("add.{0} {1}, {1}, {2};", arith_suffix(is), reg(iv), reg(in.operands[2])));
  normalize(reg(iv), is);
  line(fmt::format("bra {};", head));
  body_ += end + ":\n";
  return Status();
}

Status KernelEmitter::if_else(const Inst& in) {
  std::vector<std::vector<std::string>> results;
  for (const Value* r : in.results) results.push_back(define(r));
  std::string else_label = label("else"), end = label("end_if");
  line(fmt::format("@!{} bra {};", reg(in.operands[0]), else_label));
  for (int branch = 0; branch < 2; ++branch) {
    if (branch == 1) {
      line(fmt::format("bra {};", end));
      body_ += else_label + ":\n";
    }
    const Block& b = in.regions[branch];
    LOOM_RETURN_IF_ERROR(block(b));
    if (!b.insts.empty() && b.insts.back()->op == Op::kYield) {
      const Inst& y = *b.insts.back();
      for (size_t i = 0; i < y.operands.size(); ++i)
        for (size_t l = 0; l < results[i].size(); ++l)
          copy(results[i][l], regs_[y.operands[i]->id][l], rc_of(y.operands[i]->type));
    }
  }
  body_ += end + ":\n";
  return Status();
}

Status KernelEmitter::inst(const Inst& in) {
  if (in.op != Op::kYield) line("// " + print_inst(in, namer_));
  const Value* r = in.result();
  switch (in.op) {
    case Op::kConst: constant(in); return Status();
    case Op::kLoad: load(in); return Status();
    case Op::kStore: store(in); return Status();
    case Op::kPrefetch: return Status();  // dropped (ops.h): the comment line above records it
    case Op::kOffset: {
      auto [base, off] = address_parts(in.operands[0], in.operands[1], 0);
      const std::string& d = define(r)[0];
      if (off == 0) copy(d, base, RC::kB64);
      else line(fmt::format("add.s64 {}, {}, {};", d, base, off));
      return Status();
    }
    case Op::kAtomic: {
      Scalar s = r->type.elem();
      std::string_view ts = in.mode == Mode::kAdd && (s == Scalar::kI32 || s == Scalar::kI64)
                                ? (s == Scalar::kI32 ? "u32" : "u64")
                                : type_suffix(s);
      std::string addr = address(in.operands[0], in.operands[1], 0);
      line(fmt::format("atom.{}.{}.{} {}, {}, {};", space(in.operands[0], false), mode_name(in.mode), ts,
                       define(r)[0], addr, reg(in.operands[2])));
      return Status();
    }
    case Op::kAllocShared:
    case Op::kAllocLocal: {
      bool shared = in.op == Op::kAllocShared;
      if (shared && dynamic_shared_) {
        line(fmt::format("mov.u64 {}, {};", define(r)[0], kDynamicShared));
        if (shared_offset_) line(fmt::format("add.u64 {}, {}, {};", reg(r), reg(r), shared_offset_));
        shared_offset_ += ir::alloc_shared_bytes(in);
        return Status();
      }
      std::string name = fmt::format("{}{}", shared ? "smem" : "lmem", allocs_++);
      decls_ += fmt::format("\t.{} .align 16 .b8 {}[{}];\n", shared ? "shared" : "local", name,
                            in.imm * r->type.elem_bytes());
      line(fmt::format("mov.u64 {}, {};", define(r)[0], name));
      return Status();
    }
    case Op::kBarrier: line("bar.sync 0;"); return Status();
    case Op::kThreadId:
    case Op::kBlockId:
    case Op::kBlockDim:
    case Op::kGridDim: {
      std::string_view sreg = in.op == Op::kThreadId ? "tid" : in.op == Op::kBlockId ? "ctaid"
                            : in.op == Op::kBlockDim ? "ntid" : "nctaid";
      line(fmt::format("mov.u32 {}, %{}.{};", define(r)[0], sreg, mode_name(in.mode)));
      return Status();
    }
    case Op::kLaneId: line(fmt::format("mov.u32 {}, %laneid;", define(r)[0])); return Status();
    case Op::kClock: line(fmt::format("mov.u32 {}, %clock;", define(r)[0])); return Status();
    case Op::kShuffle: {
      std::string_view kind = in.mode == Mode::kXor ? "bfly" : mode_name(in.mode);
      int c = in.mode == Mode::kUp ? 0 : 0x1f;
      line(fmt::format("shfl.sync.{}.b32 {}, {}, {}, {}, -1;", kind, define(r)[0], reg(in.operands[0]),
                       reg(in.operands[1]), c));
      return Status();
    }
    case Op::kWarpReduce: {
      Scalar s = r->type.elem();
      std::string_view op = in.mode == Mode::kAdd ? (s == Scalar::kF32 ? "add.rn" : "add") : mode_name(in.mode);
      std::string cur = reg(in.operands[0]);
      for (int off = 16; off >= 1; off /= 2) {
        std::string t = new_reg(RC::kB32), next = off == 1 ? define(r)[0] : new_reg(RC::kB32);
        line(fmt::format("shfl.sync.bfly.b32 {}, {}, {}, 31, -1;", t, cur, off));
        line(fmt::format("{}.{} {}, {}, {};", op, type_suffix(s), next, cur, t));
        cur = next;
      }
      return Status();
    }
    case Op::kDot4: {  // one dp4a per lane
      const auto& d = define(r);
      for (size_t l = 0; l < d.size(); ++l)
        line(fmt::format("dp4a.s32.s32 {}, {}, {}, {};", d[l], regs_[in.operands[0]->id][l], regs_[in.operands[1]->id][l],
                         regs_[in.operands[2]->id][l]));
      return Status();
    }
    case Op::kConcat: {  // lanes are registers: copies
      const auto& d = define(r);
      const size_t half = d.size() / 2;
      for (size_t l = 0; l < d.size(); ++l)
        copy(d[l], regs_[in.operands[l < half ? 0 : 1]->id][l % half], rc_of(r->type));
      return Status();
    }
    case Op::kMma: {
      const auto& a = regs_[in.operands[0]->id];
      const auto& b = regs_[in.operands[1]->id];
      const auto& c = regs_[in.operands[2]->id];
      if (in.operands[2]->type.elem() == Scalar::kI32) {  // packed s8: the lanes are the b32 words
        const auto& d = define(r);
        line(fmt::format("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {{{}, {}, {}, {}}}, {{{}, {}, {}, {}}}, "
                         "{{{}, {}}}, {{{}, {}, {}, {}}};",
                         d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], c[2], c[3]));
        return Status();
      }
      std::vector<std::string> pa, pb;
      for (size_t i = 0; i < a.size(); i += 2) {
        pa.push_back(new_reg(RC::kB32));
        line(fmt::format("mov.b32 {}, {{{}, {}}};", pa.back(), a[i], a[i + 1]));
      }
      for (size_t i = 0; i < b.size(); i += 2) {
        pb.push_back(new_reg(RC::kB32));
        line(fmt::format("mov.b32 {}, {{{}, {}}};", pb.back(), b[i], b[i + 1]));
      }
      const auto& d = define(r);
      line(fmt::format("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{}, {}, {}, {}}}, {{{}, {}, {}, {}}}, "
                       "{{{}, {}}}, {{{}, {}, {}, {}}};",
                       d[0], d[1], d[2], d[3], pa[0], pa[1], pa[2], pa[3], pb[0], pb[1], c[0], c[1], c[2], c[3]));
      return Status();
    }
    case Op::kLdmatrix:
    case Op::kLdmatrixT: {  // four b32 words (f16 pairs), each split into its two lanes
      std::string addr = address(in.operands[0], in.operands[1], 0);
      const auto& d = define(r);
      std::vector<std::string> w;
      for (int i = 0; i < 4; ++i) w.push_back(new_reg(RC::kB32));
      line(fmt::format("ldmatrix.sync.aligned.m8n8.x4{}.shared.b16 {{{}, {}, {}, {}}}, {};",
                       in.op == Op::kLdmatrixT ? ".trans" : "", w[0], w[1], w[2], w[3], addr));
      for (size_t i = 0; i < 4; ++i) line(fmt::format("mov.b32 {{{}, {}}}, {};", d[2 * i], d[2 * i + 1], w[i]));
      return Status();
    }
    case Op::kCpAsync: {  // 16 bytes bypass L1 (.cg); 4 and 8 bytes go through it (.ca, the only form they have)
      std::string dst = address(in.operands[0], in.operands[1], 0);
      std::string src = address(in.operands[2], in.operands[3], 0);
      line(fmt::format("cp.async.{}.shared.global {}, {}, {};", in.imm == 16 ? "cg" : "ca", dst, src, in.imm));
      return Status();
    }
    case Op::kCpAsyncCommit: line("cp.async.commit_group;"); return Status();
    case Op::kWgmma:
    case Op::kWgmmaRs: {
      // Descriptors (PTX matrix-descriptor format, no swizzle): bits 0-13 the start address >> 4
      // (shared window), 16-29 lbo >> 4 (next core matrix along k), 32-45 sbo >> 4 (along rows).
      // wgmma_rs: A is four b32 words of f16 pairs (operand 0), B's descriptor only.
      const bool rs = in.op == Op::kWgmmaRs;
      const int64_t lbo = in.imm & 0xFFFFFFFF, sbo = in.imm >> 32;
      const uint64_t strides = (static_cast<uint64_t>(lbo >> 4) << 16) | (static_cast<uint64_t>(sbo >> 4) << 32);
      std::string desc[2];
      for (int m = rs ? 1 : 0; m < 2; ++m) {
        const size_t p = rs ? 1 : 2 * static_cast<size_t>(m);
        auto [base, off] = address_parts(in.operands[p], in.operands[p + 1], 0);
        std::string a = new_reg(RC::kB64);
        desc[m] = new_reg(RC::kB64);
        line(fmt::format("add.s64 {}, {}, {};", a, base, off));
        line(fmt::format("shr.u64 {}, {}, 4;", a, a));
        line(fmt::format("and.b64 {}, {}, 16383;", a, a));
        line(fmt::format("or.b64 {}, {}, {};", desc[m], a, strides));
      }
      // The accumulators are read and written in place. Where C dies at this wgmma and lives in
      // this block (a chain of wgmma, or a loop's carried value), the result takes C's registers:
      // a copy would read accumulators that an earlier wgmma of the chain may still be writing.
      if (rs) {  // the four b32 words as they are (packed before the wgmma_fence)
        const auto& a = regs_[in.operands[0]->id];
        desc[0] = fmt::format("{{{}, {}, {}, {}}}", a[0], a[1], a[2], a[3]);
      }
      const Value* cv = in.operands[rs ? 3 : 4];
      if (uses_[cv->id] == 1 && home_[cv->id] == cur_block_) {
        regs_[r->id] = regs_[cv->id];
      } else {
        const auto& c = regs_[cv->id];
        const auto& dd = define(r);
        for (size_t l = 0; l < dd.size(); ++l) line(fmt::format("mov.b32 {}, {};", dd[l], c[l]));
      }
      const auto& d = regs_[r->id];
      std::string dl;
      for (size_t l = 0; l < d.size(); ++l) dl += (l ? ", " : "") + d[l];
      // scale-d = 1 (d += a b), no negation, no transposes (both tiles k-major).
      line("{");
      line(".reg .pred %pw;");
      line("setp.ne.b32 %pw, 1, 0;");
      line(fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.f16.f16 {{{}}}, {}, {}, %pw, 1, 1, {}0;", 2 * d.size(), dl,
                       desc[0], desc[1], rs ? "" : "0, "));
      line("}");
      return Status();
    }
    case Op::kWgmmaFence: line("wgmma.fence.sync.aligned;"); return Status();
    case Op::kWgmmaCommit: line("wgmma.commit_group.sync.aligned;"); return Status();
    case Op::kWgmmaWait: line(fmt::format("wgmma.wait_group.sync.aligned {};", in.imm)); return Status();
    case Op::kFenceAsyncShared: line("fence.proxy.async.shared::cta;"); return Status();
    case Op::kCpAsyncWait: line(fmt::format("cp.async.wait_group {};", in.imm)); return Status();
    case Op::kAmxZero:
    case Op::kAmxLoad:
    case Op::kAmxStore:
    case Op::kAmxDpI8:
    case Op::kAmxDpBf16:
      return unimplemented("'{}' has no ptx form (verify with the ptx target first)", op_name(in.op));
    case Op::kFor: return for_loop(in);
    case Op::kIf: return if_else(in);
    case Op::kYield: return Status();  // handled by the enclosing region
    case Op::kBitcast: bitcast(in); return Status();
    case Op::kSplat:
    case Op::kBuild: {
      const auto& d = define(r);
      for (size_t l = 0; l < d.size(); ++l)
        copy(d[l], reg(in.operands[in.op == Op::kSplat ? 0 : l]), rc_of(r->type));
      return Status();
    }
    case Op::kExtract:
      copy(define(r)[0], regs_[in.operands[0]->id][static_cast<size_t>(in.imm)], rc_of(r->type));
      return Status();
    default: {
      if (packed_half2(in)) return Status();
      const auto& d = define(r);
      for (int l = 0; l < r->type.lanes(); ++l) LOOM_RETURN_IF_ERROR(lane(in, l, d[l]));
      return Status();
    }
  }
}

Status KernelEmitter::block(const Block& b) {
  const Block* saved = cur_block_;
  cur_block_ = &b;
  for (const Inst* i : b.insts) LOOM_RETURN_IF_ERROR(inst(*i));
  cur_block_ = saved;
  return Status();
}

void KernelEmitter::index(const Block& b) {
  for (const Value* a : b.args) home_[a->id] = &b;
  for (const Inst* i : b.insts) {
    for (const Value* v : i->operands) ++uses_[v->id];
    for (const Value* v : i->results) home_[v->id] = &b;
    for (const Block& r : i->regions) index(r);
  }
}

Result<std::string> KernelEmitter::run() {
  std::string params;
  for (size_t i = 0; i < k_.params.size(); ++i) {
    const Value* p = k_.params[i];
    std::string pname = fmt::format("{}_param_{}", k_.name, i);
    Scalar s = p->type.elem();
    std::string_view ptype = p->type.is_pointer() ? "u64"
                             : s == Scalar::kI1 || scalar_bits(s) == 8 ? (s == Scalar::kI8 ? "s8" : "u8")
                             : is_half(s) ? "b16" : type_suffix(s);
    params += fmt::format("{}\t.param .{} {}", i ? ",\n" : "", ptype, pname);
    if (s == Scalar::kI1 && !p->type.is_pointer()) {
      std::string t = new_reg(RC::kB16);
      line(fmt::format("ld.param.u8 {}, [{}];", t, pname));
      line(fmt::format("setp.ne.u16 {}, {}, 0;", define(p)[0], t));
    } else if (p->type.is_pointer()) {
      std::string t = new_reg(RC::kB64);
      line(fmt::format("ld.param.u64 {}, [{}];", t, pname));
      line(fmt::format("cvta.to.global.u64 {}, {};", define(p)[0], t));
    } else {
      line(fmt::format("ld.param.{} {}, [{}];", ptype, define(p)[0], pname));
    }
  }
  LOOM_RETURN_IF_ERROR(block(k_.body));
  line("ret;");
  std::string bounds;
  if (k_.max_threads > 0) bounds += fmt::format(".maxntid {}, 1, 1\n", k_.max_threads);
  if (k_.max_threads > 0 && k_.min_blocks > 0) bounds += fmt::format(".minnctapersm {}\n", k_.min_blocks);
  std::string out = fmt::format("\n.visible .entry {}(\n{}\n)\n{}{{\n", k_.name, params, bounds);
  static const char* kDecl[] = {".pred \t%p", ".b16 \t%h", ".b32 \t%r", ".b64 \t%rd"};
  for (int i = 0; i < 4; ++i)
    if (counts_[i]) out += fmt::format("\t.reg {}<{}>;\n", kDecl[i], counts_[i]);
  out += decls_;
  out += "\n";
  out += body_;
  out += "}\n";
  return out;
}

}  // namespace loom::codegen::ptx

namespace loom::codegen {

Result<std::string> emit_ptx(const ir::Module& module, std::string_view arch, const PtxOptions& options) {
  // tanh and erf have no accurate PTX instruction: expand them on a copy first.
  ir::Module lowered = ir::clone_module(module);
  for (auto& k : lowered.kernels) ir::lower_tanh_erf(*k);
  // wgmma exists on sm_90a only (the architecture-specific features of sm_90): a module that
  // uses it is emitted for sm_90a and refused for other architectures.
  bool wgmma = false;
  for (const auto& k : lowered.kernels)
    ir::walk(k->body, [&](const ir::Inst* i) { wgmma |= i->op == ir::Op::kWgmma || i->op == ir::Op::kWgmmaRs; });
  if (wgmma && arch != "sm_90")
    return unimplemented("'wgmma' is not supported by the ptx target for {} (Hopper's sm_90a only)", arch);
  const std::string target = wgmma ? "sm_90a" : std::string(arch);
  std::string out = fmt::format("//\n// Generated by Loom from Loom IR (target ptx, {})\n//\n\n.version 8.0\n.target {}\n"
                                ".address_size 64\n", target, target);
  // sm_90: every kernel first waits for the grids it depends on (a no-op unless it was launched
  // with programmatic stream serialization; HRX then overlaps its launch with the predecessor's
  // tail), then lets its own dependents launch. The trigger carries no memory semantics: a
  // dependent's griddepcontrol.wait still waits for this grid's completion and memory flush, so
  // triggering early only lets the dependent's blocks be scheduled sooner. After the wait, it
  // reaches at most one kernel ahead. PtxOptions::launch_dependents = false leaves the trigger out.
  const bool grid_dependency = arch == "sm_90";
  const bool trigger = options.launch_dependents;
  // Kernels above the static limit take their shared buffers from dynamic shared memory. A
  // comment line per kernel tells the loader how much each launch must give (hrx_module_load_ptx
  // reads it), so the PTX text alone says what it needs to run.
  std::string dynamic;
  for (const auto& k : lowered.kernels)
    if (const int64_t n = ir::dynamic_shared_bytes(*k); n > 0)
      dynamic += fmt::format("{}{} {}\n", kPtxDynamicSharedTag, k->name, n);
  if (!dynamic.empty()) out += fmt::format("\n{}.extern .shared .align 16 .b8 {}[];\n", dynamic, ptx::kDynamicShared);
  for (const auto& k : lowered.kernels) {
    ptx::KernelEmitter e(*k);
    if (grid_dependency) {
      e.prologue("griddepcontrol.wait;");
      if (trigger) e.prologue("griddepcontrol.launch_dependents;");
    }
    LOOM_ASSIGN_OR_RETURN(std::string text, e.run());
    out += text;
  }
  return out;
}

}  // namespace loom::codegen
