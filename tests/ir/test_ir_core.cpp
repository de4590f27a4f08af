// IR core: text round trip of every golden kernel, builder/parser agreement, literal and type
// text, and the verifier's and parser's errors on malformed input (one error, with location).
#include <gtest/gtest.h>

#include <regex>

#include "ir_test_util.h"
#include "loom/ir/builder.h"
#include "loom/ir/parser.h"
#include "loom/ir/type_rules.h"
#include "loom/ir/verifier.h"

namespace loom::test {
namespace {

using namespace ir;

TEST(IrRoundTrip, EveryGoldenPrintsAndParsesBackIdentically) {
  auto names = golden_names();
  ASSERT_GE(names.size(), 8u);
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    auto m1 = load_golden(name);
    ASSERT_TRUE(m1.ok()) << m1.status().to_string();
    std::string text1 = print(*m1);
    EXPECT_NE(text1.find("kernel @" + name + "("), std::string::npos);
    auto m2 = parse_module(text1, name + ".printed");
    ASSERT_TRUE(m2.ok()) << m2.status().to_string() << "\n" << text1;
    std::string text2 = print(*m2);
    EXPECT_EQ(text1, text2);
    // Same structure, not only the same text: instruction and value counts agree.
    ASSERT_EQ(m1->kernels.size(), m2->kernels.size());
    int n1 = 0, n2 = 0;
    walk(m1->kernels[0]->body, [&](const Inst*) { ++n1; });
    walk(m2->kernels[0]->body, [&](const Inst*) { ++n2; });
    EXPECT_EQ(n1, n2);
    EXPECT_GT(n1, 5);
  }
}

// The builder's vector_add and the golden file's are the same IR.
TEST(IrBuilder, BuildsTheSameIrAsTheParser) {
  Module m;
  Kernel* k = m.add_kernel("vector_add");
  Builder b(*k);
  Type fptr = Type::pointer(AddrSpace::kGlobal, Scalar::kF32);
  Value* a = b.param(fptr, "a");
  Value* bb = b.param(fptr, "b");
  Value* c = b.param(fptr, "c");
  Value* n = b.param(Type::scalar(Scalar::kI32), "n");
  Value* tid = Builder::name(b.thread_id(Mode::kX), "tid");
  Value* bid = Builder::name(b.block_id(Mode::kX), "bid");
  Value* bdim = Builder::name(b.block_dim(Mode::kX), "bdim");
  Value* base = Builder::name(b.mul(bid, bdim), "base");
  Value* i = Builder::name(b.add(base, tid), "i");
  Value* in = Builder::name(b.cmp(Mode::kLt, i, n), "in");
  b.if_then_else(in, {}, [&] {
    Value* x = Builder::name(b.load(a, i), "x");
    Value* y = Builder::name(b.load(bb, i), "y");
    Value* s = Builder::name(b.add(x, y), "s");
    b.store(c, i, s);
    return std::vector<Value*>{};
  });
  ASSERT_TRUE(verify(m).ok()) << verify(m).to_string();
  auto golden = load_golden("vector_add");
  ASSERT_TRUE(golden.ok());
  EXPECT_EQ(print(m), print(*golden));
}

TEST(IrBuilder, LoopsCarryValuesAndMisuseIsReportedByTheVerifier) {
  Module m;
  Kernel* k = m.add_kernel("sum_to");
  Builder b(*k);
  Value* out = b.param(Type::pointer(AddrSpace::kGlobal, Scalar::kI32), "out");
  Value* n = b.param(Type::scalar(Scalar::kI32), "n");
  auto r = b.for_loop(b.i32(0), n, b.i32(1), {b.i32(0)}, [&](Value* iv, std::span<Value* const> it) {
    return std::vector<Value*>{b.add(it[0], iv)};
  });
  b.store(out, b.i32(0), r[0]);
  ASSERT_TRUE(verify(m).ok()) << verify(m).to_string();
  EXPECT_NE(print(m).find("iter("), std::string::npos);
  // Adding f32 to i32: the builder accepts it, the verifier names the instruction.
  b.store(out, b.i32(1), b.add(r[0], b.f32(1.0)));
  Status s = verify(m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("operands must have one type"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("= add %"), std::string::npos) << "no instruction text: " << s.to_string();
}

TEST(IrTypes, TextRoundTrips) {
  for (const char* t : {"i1", "u8", "i64", "bf16", "f16x8", "f32x4", "u8x16", "i1x4", "i8x32", "u8x32", "f32x32", "f32x64"}) {
    auto parsed = parse_value_type(t);
    ASSERT_TRUE(parsed.has_value()) << t;
    EXPECT_EQ(parsed->str(), t);
  }
  for (const char* bad : {"f32x3", "f32x", "x4", "f33", "i1x1", "f16x32", "i16x32", "i1x32", "f32x128", "i32x64"}) EXPECT_FALSE(parse_value_type(bad)) << bad;
  EXPECT_EQ(Type::pointer(AddrSpace::kShared, Scalar::kF16).str(), "ptr<shared, f16>");
  EXPECT_EQ(Type::vector(Scalar::kF16, 8).bits(), 128);
}

TEST(IrLiterals, FloatsRoundToTheirTypeAndPrintExactly) {
  EXPECT_EQ(round_float(Scalar::kF16, 1.0 + 1.0 / 4096), 1.0);  // below half an f16 ulp
  EXPECT_EQ(round_float(Scalar::kF16, 65520.0), INFINITY);      // rounds past the largest f16
  EXPECT_EQ(round_float(Scalar::kBF16, 1.0 + 1.0 / 256), 1.0);  // ties to even
  EXPECT_EQ(wrap_int(Scalar::kU8, 300), 44);
  EXPECT_EQ(wrap_int(Scalar::kI8, 200), -56);
  const char* text = R"(kernel @lits(%p: ptr<global, f32>) {
  %a = const 0.1 : f32
  %b = const -inf : f32
  %c = const 0xFFFFFFFF : i32
  %d = const 18446744073709551615 : u64
  %e = const 1e-40 : f32
  %f = const nan : f16
})";
  auto m = parse_module(text, "lits.loom");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  std::string printed = print(*m);
  EXPECT_NE(printed.find("const 0.10000000149011612 : f32"), std::string::npos) << printed;  // f32 nearest to 0.1
  EXPECT_NE(printed.find("const -inf : f32"), std::string::npos);
  EXPECT_NE(printed.find("const -1 : i32"), std::string::npos);
  EXPECT_NE(printed.find("const 18446744073709551615 : u64"), std::string::npos);
  EXPECT_NE(printed.find("const nan : f16"), std::string::npos);
  auto again = parse_module(printed);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(print(*again), printed);
}

// Malformed IR: each case must fail with exactly the expected location and a clear reason.
struct BadCase {
  const char* what;
  const char* text;
  const char* where;   // "line:col"
  const char* reason;  // substring of the message
};

#define KERNEL_HEAD "kernel @k(%a: ptr<global, f32>, %n: i32) {\n"

const BadCase kBadCases[] = {
    {"undefined value", KERNEL_HEAD "  %y = add %x, %x\n}\n", "2:12", "use of undefined value %x"},
    {"type mismatch", KERNEL_HEAD "  %f = const 1.0 : f32\n  %y = add %f, %n\n}\n", "3:3", "operands must have one type"},
    {"unknown address space", "kernel @k(%a: ptr<texture, f32>) {\n}\n", "1:19", "unknown address space 'texture'"},
    {"store to constant memory", "kernel @k(%a: ptr<constant, f32>, %n: i32) {\n  %f = const 1.0 : f32\n  store %a[%n], %f\n}\n",
     "3:3", "cannot store through a pointer to constant memory"},
    {"unterminated region", KERNEL_HEAD "  %c = cmp.lt %n, %n\n  if %c {\n    %z = const 1 : i32\n", "5:1",
     "unterminated region: expected '}' to close the '{' at 3:9"},
    {"unterminated kernel", KERNEL_HEAD "  %z = const 1 : i32\n", "3:1", "unterminated region"},
    {"unknown operation", KERNEL_HEAD "  %y = frobnicate %n\n}\n", "2:8", "unknown operation 'frobnicate'"},
    {"const without type", KERNEL_HEAD "  %c = const 1\n}\n", "2:8", "'const' needs one type"},
    {"literal out of range", KERNEL_HEAD "  %c = const 300 : i8\n}\n", "2:14", "300 does not fit in i8"},
    {"float literal for an integer", KERNEL_HEAD "  %c = const 1.5 : i32\n}\n", "2:14", "not an integer literal"},
    {"cmp without predicate", KERNEL_HEAD "  %c = cmp %n, %n\n}\n", "2:8", "'cmp' needs a modifier"},
    {"bad modifier", KERNEL_HEAD "  %t = thread_id.w\n}\n", "2:8", "does not take the modifier '.w'"},
    {"use outside its region", KERNEL_HEAD "  %c = cmp.lt %n, %n\n  if %c {\n    %z = const 1 : i32\n  }\n  %w = add %z, %z\n}\n",
     "6:12", "%z is not visible here"},
    {"redefinition", KERNEL_HEAD "  %n = const 1 : i32\n}\n", "2:3", "%n is already defined at 1:33"},
    {"yield count", KERNEL_HEAD "  %z = const 0 : i32\n  %s = for %i = %z to %n step %n iter(%acc = %z) {\n    yield %acc, %acc\n  }\n}\n",
     "4:5", "'yield' returns 2 value(s) but the enclosing 'for' has 1"},
    {"missing yield", KERNEL_HEAD "  %c = cmp.lt %n, %n\n  %v = if %c : i32 {\n  } else {\n  }\n}\n", "3:3",
     "must end with 'yield' of 1 value(s)"},
    {"if with results needs else", KERNEL_HEAD "  %c = cmp.lt %n, %n\n  %v = if %c : i32 {\n    yield %n\n  }\n}\n", "3:3",
     "needs an 'else'"},
    {"shared pointer parameter", "kernel @k(%s: ptr<shared, f32>) {\n}\n", "1:11", "parameters are scalars or pointers to global"},
    {"bitcast size", KERNEL_HEAD "  %f = const 1.0 : f32\n  %d = bitcast %f : f64\n}\n", "3:3", "'bitcast' keeps the size"},
    {"odd vector width", KERNEL_HEAD "  %v = load %a[%n] : f32x3\n}\n", "2:22", "unknown type 'f32x3'"},
    {"lane out of range", KERNEL_HEAD "  %v = load %a[%n], align 16 : f32x4\n  %e = extract %v[4]\n}\n", "3:3", "lane 4 out of range"},
    {"load through a scalar", KERNEL_HEAD "  %v = load %n[%n] : f32\n}\n", "2:3", "'load' needs a pointer, got i32"},
    {"type not inferable", KERNEL_HEAD "  %v = convert %n\n}\n", "2:8", "cannot infer the result type of 'convert' from (i32)"},
    {"alignment", KERNEL_HEAD "  %v = load %a[%n], align 3 : f32\n}\n", "2:3", "alignment 3 is not a power of two"},
    {"atomic on local memory",
     KERNEL_HEAD "  %l = alloc_local 4 : ptr<local, i32>\n  %o = atomic.add %l[%n], %n\n}\n", "3:3",
     "atomics need global or shared memory, not local"},
    {"stray character", KERNEL_HEAD "  %y = add %n, %n $\n}\n", "2:19", "unexpected '$'"},
    {"alloc_shared in a region",
     KERNEL_HEAD "  %c = cmp.lt %n, %n\n  if %c {\n    %s = alloc_shared 4 : ptr<shared, f32>\n  }\n}\n", "4:5",
     "'alloc_shared' must be at the top level"},
    {"shared memory beyond Hopper's 227 KiB",
     KERNEL_HEAD "  %s = alloc_shared 40000 : ptr<shared, f32>\n  %t = alloc_shared 20000 : ptr<shared, f32>\n}\n", "3:3",
     "kernel uses 240000 bytes of shared memory; the limit is 232448"},
    {"shuffle of f64", KERNEL_HEAD "  %d = const 1.0 : f64\n  %s = shfl.xor %d, %n\n}\n", "3:3", "'shfl' moves i32, u32 or f32"},
    {"math on f64", KERNEL_HEAD "  %d = const 1.0 : f64\n  %e = exp %d\n}\n", "3:3", "'exp' needs f16, bf16 or f32"},
    {"select condition", KERNEL_HEAD "  %s = select %n, %n, %n\n}\n", "2:3", "'select' condition must be i1"},
    {"float loop bounds", KERNEL_HEAD "  %f = const 1.0 : f32\n  for %i = %f to %f step %f {\n  }\n}\n", "3:3",
     "'for' bounds must be integer scalars"},
    {"binary garbage", "\x01\xff\xfe kernel", "1:1", "unexpected"},
    {"missing kernel name", "kernel (%a: i32) {\n}\n", "1:8", "expected a kernel name"},
    {"duplicate kernel", "kernel @k() {\n}\nkernel @k() {\n}\n", "3:1", "kernel @k is defined twice"},
    {"missing comma", KERNEL_HEAD "  %y = add %n %n\n}\n", "2:8", "'add' takes 2 operand(s), got 1"},
    {"junk after an instruction", KERNEL_HEAD "  %y = neg %n : i32 i32\n}\n", "2:21", "expected end of line, got 'i32'"},
    {"result on store", KERNEL_HEAD "  %f = const 1.0 : f32\n  %x = store %a[%n], %f\n}\n", "3:3", "'store' has no result"},
    {"too many operands", KERNEL_HEAD "  %y = neg %n, %n\n}\n", "2:8", "'neg' takes 1 operand(s), got 2"},
    {"i1 pointer", "kernel @k(%a: ptr<global, i1>) {\n}\n", "1:27", "pointers to i1 are not allowed"},
    {"yield at top level", KERNEL_HEAD "  yield %n\n}\n", "2:3", "'yield' outside a region"},
    {"dot4 operand types", KERNEL_HEAD "  %f = const 1.0 : f32\n  %d = dot4 %f, %n, %n\n}\n", "3:3", "'dot4' takes i32 operands"},
    {"dot4 mixed lanes", KERNEL_HEAD "  %v = const 0 : i32x8\n  %d = dot4 %v, %v, %n\n}\n", "3:3",
     "'dot4' operands must have one type, got i32x8 and i32"},
    {"dot4 on i16 lanes", KERNEL_HEAD "  %v = const 0 : i16x8\n  %d = dot4 %v, %v, %v\n}\n", "3:3", "'dot4' takes i32 operands"},
    {"concat of scalars", KERNEL_HEAD "  %d = concat %n, %n\n}\n", "2:3", "'concat' joins two vectors, got i32"},
    {"concat of two types", KERNEL_HEAD "  %v = const 0 : i32x4\n  %w = const 0 : u32x4\n  %d = concat %v, %w\n}\n", "4:3",
     "'concat' operands must have one type, got i32x4 and u32x4"},
    {"concat past 16 lanes", KERNEL_HEAD "  %v = const 0 : i8x16\n  %d = concat %v, %v\n}\n", "3:3",
     "'concat' of i8x16 would make 32 lanes"},
    {"ldmatrix from global memory", KERNEL_HEAD "  %d = ldmatrix %a, %n\n}\n", "2:3",
     "'ldmatrix' reads a ptr<shared, f16>, got ptr<global, f32>"},
    {"ldmatrix of f32", KERNEL_HEAD "  %s = alloc_shared 64 : ptr<shared, f32>\n  %d = ldmatrix %s, %n\n}\n", "3:3",
     "'ldmatrix' reads a ptr<shared, f16>"},
    {"ldmatrix index type",
     KERNEL_HEAD "  %s = alloc_shared 64 : ptr<shared, f16>\n  %i = const 0 : i64\n  %d = ldmatrix %s, %i\n}\n", "4:3",
     "'ldmatrix' index must be i32, got i64"},
    {"ldmatrix_t from global memory", KERNEL_HEAD "  %d = ldmatrix_t %a, %n\n}\n", "2:3",
     "'ldmatrix_t' reads a ptr<shared, f16>, got ptr<global, f32>"},
    {"mma s8 with an f32 accumulator",
     KERNEL_HEAD "  %x = const 0 : i32x4\n  %y = const 0 : i32x2\n  %z = const 0.0 : f32x4\n  %d = mma %x, %y, %z\n}\n", "5:3",
     "'mma' takes (f16x8, f16x4, f32x4) or packed s8 (i32x4, i32x2, i32x4), got (i32x4, i32x2, f32x4)"},
    {"cp_async into global memory", KERNEL_HEAD "  cp_async %a[%n], %a[%n], 16\n}\n", "2:3",
     "'cp_async' copies into a ptr<shared, T>, got ptr<global, f32>"},
    {"cp_async from shared memory",
     KERNEL_HEAD "  %s = alloc_shared 64 : ptr<shared, f32>\n  cp_async %s[%n], %s[%n], 16\n}\n", "3:3",
     "'cp_async' copies from a ptr<global, T> or ptr<constant, T>, got ptr<shared, f32>"},
    {"cp_async of 12 bytes", KERNEL_HEAD "  %s = alloc_shared 64 : ptr<shared, f32>\n  cp_async %s[%n], %a[%n], 12\n}\n",
     "3:3", "'cp_async' copies 4, 8 or 16 bytes, not 12"},
    {"cp_async between two types", KERNEL_HEAD "  %s = alloc_shared 64 : ptr<shared, f16>\n  cp_async %s[%n], %a[%n], 16\n}\n",
     "3:3", "'cp_async' copies between one element type, got ptr<shared, f16> and ptr<global, f32>"},
    {"cp_async without a byte count", KERNEL_HEAD "  %s = alloc_shared 64 : ptr<shared, f32>\n  cp_async %s[%n], %a[%n]\n}\n",
     "3:26", "expected ',' and the byte count (4, 8 or 16), got end of line"},
    {"cp_async_wait of 9 groups", KERNEL_HEAD "  cp_async_wait 9\n}\n", "2:3", "'cp_async_wait' leaves 0 to 8 groups pending, not 9"},
    {"wgmma_wait of 9 groups", KERNEL_HEAD "  wgmma_wait 9\n}\n", "2:3", "'wgmma_wait' leaves 0 to 8 groups pending, not 9"},
#define WG_HEAD KERNEL_HEAD "  %s = alloc_shared 4096 : ptr<shared, f16>\n  %i = const 0 : i32\n"
    {"wgmma with an f32x12-less accumulator", WG_HEAD "  %z = const 0.0 : f32x2\n  %d = wgmma %s[%i], %s[%i], %z, lbo 128, sbo 512\n}\n",
     "5:3", "'wgmma' accumulates f32x4, x8, x16, x32 or x64 (n = 8 .. 128), got f32x2"},
    {"wgmma from global memory", WG_HEAD "  %z = const 0.0 : f32x4\n  %d = wgmma %a[%i], %s[%i], %z, lbo 128, sbo 512\n}\n",
     "5:3", "'wgmma' reads its A and B tiles from ptr<shared, f16>, got ptr<global, f32>"},
    {"wgmma with a misaligned stride", WG_HEAD "  %z = const 0.0 : f32x4\n  %d = wgmma %s[%i], %s[%i], %z, lbo 8, sbo 512\n}\n",
     "5:3", "'wgmma' core-matrix strides must be positive multiples of 16 bytes below 2^18, got 8 and 512"},
    {"wgmma without sbo", WG_HEAD "  %z = const 0.0 : f32x4\n  %d = wgmma %s[%i], %s[%i], %z, lbo 128\n}\n",
     "5:41", "expected ',' and 'sbo BYTES', got end of line"},
    {"wgmma_rs with an f32x4 A fragment", WG_HEAD "  %z = const 0.0 : f32x4\n  %d = wgmma_rs %z, %s[%i], %z, lbo 128, sbo 512\n}\n",
     "5:3", "'wgmma_rs' takes its A fragment as u32x4 (four f16 pairs), got f32x4"},
    {"wgmma_rs with B in global memory", WG_HEAD "  %z = const 0.0 : f32x4\n  %h = const 0 : u32x4\n"
     "  %d = wgmma_rs %h, %a[%i], %z, lbo 128, sbo 512\n}\n",
     "6:3", "'wgmma_rs' reads its B tile from ptr<shared, f16>, got ptr<global, f32>"},
#undef WG_HEAD
    {"amx_dp_i8 on one tile twice", KERNEL_HEAD "  amx_dp_i8 0, 1, 1\n}\n", "2:3",
     "'amx_dp_i8' needs three different tiles, got 0, 1, 1"},
    {"amx_zero of tile 8", KERNEL_HEAD "  amx_zero 8, rows 16, bytes 64\n}\n", "2:3", "'amx_zero' names tiles 0 to 7, got 8"},
    {"amx_load of 17 rows", KERNEL_HEAD "  amx_load 0, rows 17, bytes 64, %a[%n], %n\n}\n", "2:3",
     "'amx_load' tiles have 1 to 16 rows of 4 to 64 bytes (a multiple of 4), got 17 x 64"},
    {"amx_store with an f32 stride", KERNEL_HEAD "  %f = const 1.0 : f32\n  amx_store 0, rows 16, bytes 64, %a[%n], %f\n}\n",
     "3:3", "'amx_store' index and stride must be 32- or 64-bit integers, got i32 and f32"},
    {"amx_load without bytes", KERNEL_HEAD "  amx_load 0, rows 16, %a[%n], %n\n}\n", "2:24", "expected 'bytes', got '%a'"},
    {"result of cp_async_commit", KERNEL_HEAD "  %x = cp_async_commit\n}\n", "2:3", "'cp_async_commit' has no result to name"},
    {"bounds past 1024 threads", "kernel @k(%n: i32) bounds(2048, 1) {\n}\n", "1:1",
     "bounds(2048, 1): threads must be 1..1024 and blocks 0..32"},
    {"bounds without blocks", "kernel @k(%n: i32) bounds(256) {\n}\n", "1:30", "expected ','"},
};

TEST(IrErrors, MalformedTextGivesOneErrorWithLocation) {
  EXPECT_GE(std::size(kBadCases), 20u);
  for (const BadCase& c : kBadCases) {
    SCOPED_TRACE(c.what);
    auto m = parse_module(c.text, "bad.loom");
    ASSERT_FALSE(m.ok()) << "accepted:\n" << c.text;
    const std::string msg = m.status().message();
    EXPECT_EQ(msg.rfind(std::string("bad.loom:") + c.where + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(c.reason), std::string::npos) << msg;
    // One error: a location appears once (the instruction text may follow on its own line).
    EXPECT_EQ(std::count(msg.begin(), msg.end(), '\n'), msg.find("\n    ") == std::string::npos ? 0 : 1) << msg;
  }
}

TEST(IrErrors, VerifierPrintsTheOffendingInstruction) {
  auto m = parse_module(KERNEL_HEAD "  %f = const 1.0 : f32\n  %y = add %f, %n\n}\n", "bad.loom");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("\n    %y = add %f, %n : f32"), std::string::npos) << m.status().message();
}

struct TargetCase {
  const char* what;
  const char* body;
  TargetKind target;
  const char* reason;
};

const TargetCase kTargetCases[] = {
    {"warp reduce on cpp", "  %f = const 1.0 : f32\n  %s = warp_reduce.add %f\n", TargetKind::kCpp,
     "'warp_reduce' is not supported by the cpp target"},
    {"shuffle on cpp", "  %s = shfl.xor %n, %n\n", TargetKind::kCpp, "'shfl' is not supported by the cpp target"},
    {"lane id on cpp", "  %l = lane_id\n", TargetKind::kCpp, "'lane_id' is not supported by the cpp target"},
    {"barrier in a loop on cpp", "  %z = const 0 : i32\n  for %i = %z to %n step %n {\n    barrier\n  }\n",
     TargetKind::kCpp, "'barrier' must be at the top level"},
    {"mma on amdgpu",
     "  %h = const 1.0 : f16x8\n  %g = const 1.0 : f16x4\n  %c = const 0.0 : f32x4\n  %d = mma %h, %g, %c\n",
     TargetKind::kAmdgpu, "'mma' is not supported by the amdgpu target"},
    {"mma on cpp",
     "  %h = const 1.0 : f16x8\n  %g = const 1.0 : f16x4\n  %c = const 0.0 : f32x4\n  %d = mma %h, %g, %c\n",
     TargetKind::kCpp, "'mma' is not supported by the cpp target"},
    {"ldmatrix on cpp", "  %s = alloc_shared 64 : ptr<shared, f16>\n  %d = ldmatrix %s, %n\n", TargetKind::kCpp,
     "'ldmatrix' is not supported by the cpp target"},
    {"ldmatrix on amdgpu", "  %s = alloc_shared 64 : ptr<shared, f16>\n  %d = ldmatrix %s, %n\n", TargetKind::kAmdgpu,
     "'ldmatrix' is not supported by the amdgpu target"},
    {"ldmatrix_t on cpp", "  %s = alloc_shared 64 : ptr<shared, f16>\n  %d = ldmatrix_t %s, %n\n", TargetKind::kCpp,
     "'ldmatrix_t' is not supported by the cpp target"},
    {"wgmma on cpp",
     "  %s = alloc_shared 4096 : ptr<shared, f16>\n  %z = const 0.0 : f32x32\n  wgmma_fence\n"
     "  %d = wgmma %s[%n], %s[%n], %z, lbo 128, sbo 512\n  wgmma_commit\n  wgmma_wait 0\n",
     TargetKind::kCpp, "'wgmma_fence' is not supported by the cpp target"},
    {"fence_async_shared on amdgpu", "  fence_async_shared\n", TargetKind::kAmdgpu,
     "'fence_async_shared' is not supported by the amdgpu target"},
};

TEST(IrErrors, IllegalOpsForATargetAreRefusedByItsVerifier) {
  for (const TargetCase& c : kTargetCases) {
    SCOPED_TRACE(c.what);
    std::string text = std::string(KERNEL_HEAD) + c.body + "}\n";
    auto m = parse_module(text, "t.loom");
    ASSERT_TRUE(m.ok()) << m.status().to_string();  // legal IR in general
    Status s = verify(*m, c.target);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
    EXPECT_NE(s.message().find(c.reason), std::string::npos) << s.message();
    EXPECT_EQ(s.message().rfind("t.loom:", 0), 0u) << s.message();
    // The other targets accept what they support.
    if (c.target == TargetKind::kCpp) {
      EXPECT_TRUE(verify(*m, TargetKind::kPtx).ok()) << verify(*m, TargetKind::kPtx).to_string();
    }
  }
  // A top-level barrier is fine on cpp (the thread loop is split there).
  auto m = load_golden("transpose_shared");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(verify(*m, TargetKind::kCpp).ok());
}

// Every op in the table has a name that parses back to it, and the table's target masks agree
// with the documented exclusions.
TEST(IrOpTable, NamesRoundTripAndTargetsAreConsistent) {
  for (int i = 0; i < num_ops(); ++i) {
    Op op = static_cast<Op>(i);
    auto back = parse_op(op_name(op));
    ASSERT_TRUE(back.has_value()) << op_name(op);
    EXPECT_EQ(*back, op);
  }
  EXPECT_FALSE(op_info(Op::kMma).legal_on(TargetKind::kAmdgpu));
  EXPECT_TRUE(op_info(Op::kMma).legal_on(TargetKind::kPtx));
  EXPECT_FALSE(op_info(Op::kShuffle).legal_on(TargetKind::kCpp));
  EXPECT_TRUE(op_info(Op::kDot4).legal_on(TargetKind::kCpp));
  EXPECT_EQ(infer_result_type(Op::kCmp, std::vector<Type>{Type::vector(Scalar::kF32, 4), Type::vector(Scalar::kF32, 4)}),
            Type::vector(Scalar::kI1, 4));
  const Type i32x4 = Type::vector(Scalar::kI32, 4);
  EXPECT_EQ(infer_result_type(Op::kConcat, std::vector<Type>{i32x4, i32x4}), Type::vector(Scalar::kI32, 8));
  EXPECT_EQ(infer_result_type(Op::kDot4, std::vector<Type>{i32x4, i32x4, i32x4}), i32x4);
  EXPECT_EQ(infer_result_type(Op::kDot4, std::vector<Type>{Type::scalar(Scalar::kI32), Type::scalar(Scalar::kI32),
                                                           Type::scalar(Scalar::kI32)}),
            Type::scalar(Scalar::kI32));
}

}  // namespace
}  // namespace loom::test
