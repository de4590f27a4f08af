// The cpp backend end to end: every golden kernel it can run is compiled (before and after the
// passes), loaded with dlopen and run on fresh random inputs against its reference.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>

#include "ir_test_util.h"
#include "loom/base/file.h"
#include "loom/base/options.h"
#include "loom/base/thread_pool.h"
#include "loom/codegen/cpp/byte_range.h"
#include "loom/codegen/cpp/cpp_emitter.h"
#include "loom/codegen/cpp/host_compiler.h"
#include "loom/codegen/target.h"
#include "loom/codegen/tool_run.h"
#include "loom/ir/parser.h"
#include "loom/ir/passes/passes.h"
#include "loom/ir/verifier.h"

namespace loom::test {
namespace {

// The host compiler the cpp target uses, or why it is missing (e.g. on the GPU machine's image).
std::string missing_compiler() {
  const char* cxx = std::getenv("LOOM_CXX");
  auto found = codegen::find_tool({cxx && *cxx ? cxx : "c++"});
  return found.ok() ? "" : found.status().to_string();
}

#define REQUIRE_HOST_COMPILER()                                                         \
  if (std::string why = missing_compiler(); !why.empty())                               \
  GTEST_SKIP() << "no host C++ compiler, the cpp target cannot compile here: " << why

class CppGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(CppGolden, MatchesReferenceOnFreshInputs) {
  REQUIRE_HOST_COMPILER();
  const GoldenCase& c = GetParam();
  auto module = load_golden(c.name);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  if (!c.runs_on_cpu) {
    Status s = ir::verify(*module, ir::TargetKind::kCpp);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.to_string();
    EXPECT_NE(s.message().find("is not supported by the cpp target"), std::string::npos) << s.to_string();
    return;
  }
  if (c.needs_amx && !codegen::cpu_amx_usable())
    GTEST_SKIP() << c.name << " uses Intel AMX tiles, which this CPU (or OS, or LOOM_CPU_ARCH/LOOM_CPU_AMX) cannot run";
  for (bool optimized : {false, true}) {
    SCOPED_TRACE(optimized ? "after passes" : "without passes");
    auto m = load_golden(c.name);
    ASSERT_TRUE(m.ok());
    if (optimized) {
      ir::optimize(*m);
      ASSERT_TRUE(ir::verify(*m, ir::TargetKind::kCpp).ok()) << ir::verify(*m).to_string();
    }
    auto cpu = codegen::compile_cpu_module(*m);
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    for (unsigned threads : {1u, 3u}) {
      uint32_t seed = test_seed();
      SCOPED_TRACE(fmt::format("seed {} (LOOM_TEST_SEED to replay), {} threads", seed, threads));
      std::mt19937 rng(seed);
      GoldenRun run = c.make(rng);
      EXPECT_EQ(run_on_cpu(*cpu, c.name, run, threads), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, CppGolden, ::testing::ValuesIn(golden_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(CppBackend, EveryGoldenFileHasACase) {
  std::vector<std::string> with_case;
  for (const auto& c : golden_cases()) with_case.push_back(c.name);
  for (const auto& name : golden_names())
    EXPECT_NE(std::find(with_case.begin(), with_case.end(), name), with_case.end()) << name << " has no test case";
}

TEST(CppBackend, SharedObjectIsCachedByContentHash) {
  REQUIRE_HOST_COMPILER();
  auto dir = std::filesystem::temp_directory_path() / fmt::format("loom_cache_test_{}", test_seed());
  opt::ScopedFlag cache(opt::Opt::kCacheDir, dir.string());
  auto m = load_golden("vector_add");
  ASSERT_TRUE(m.ok());
  auto first = codegen::cpp_target().compile(*m, "native");
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->path.rfind(dir.string() + "/kernels/cpp/", 0), 0u) << first->path;
  auto mtime = std::filesystem::last_write_time(first->path);
  auto second = codegen::cpp_target().compile(*m, "native");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->path, second->path);
  EXPECT_EQ(mtime, std::filesystem::last_write_time(second->path)) << "recompiled instead of reusing the cache";
  // Different code, different file.
  auto other = load_golden("reduce_rows");
  ASSERT_TRUE(other.ok());
  auto third = codegen::cpp_target().compile(*other, "native");
  ASSERT_TRUE(third.ok());
  EXPECT_NE(third->path, first->path);
  std::filesystem::remove_all(dir);
}

// GCC reads the emitted units' system headers from one precompiled header in the cache; the
// shared object is byte for byte the one a compile without it gives (where the precompiled
// header cannot be built, here because a file stands where its directory would go).
TEST(CppBackend, PrecompiledHeadersLeaveTheCodeAsItWas) {
  REQUIRE_HOST_COMPILER();
  auto base = std::filesystem::temp_directory_path() / fmt::format("loom_pch_test_{}", test_seed());
  std::filesystem::remove_all(base);
  auto m = load_golden("matvec_i8");
  ASSERT_TRUE(m.ok());
  std::string with, without;
  {
    opt::ScopedFlag cache(opt::Opt::kCacheDir, (base / "with").string());
    auto k = codegen::cpp_target().compile(*m, "native");
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    with = k->path;
  }
  bool gcc = false;
  if (auto tool = codegen::find_tool({"c++"}); tool.ok())
    if (auto v = codegen::run_tool({*tool, "--version"}); v.ok()) gcc = v->output.find("clang") == std::string::npos;
  size_t headers = 0;
  if (std::filesystem::exists(base / "with/kernels/cpp/pch"))
    for (const auto& e : std::filesystem::recursive_directory_iterator(base / "with/kernels/cpp/pch"))
      headers += e.path().extension() == ".gch";
  if (gcc && !std::getenv("LOOM_CXX")) EXPECT_EQ(headers, 1u) << "GCC compiled without a precompiled header";
  {
    std::filesystem::create_directories(base / "without/kernels/cpp");
    ASSERT_TRUE(write_file((base / "without/kernels/cpp/pch").string(), "not a directory").ok());
    opt::ScopedFlag cache(opt::Opt::kCacheDir, (base / "without").string());
    auto k = codegen::cpp_target().compile(*m, "native");
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    without = k->path;
  }
  auto a = read_file(with), b = read_file(without);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b) << with << " and " << without << " differ";
  std::filesystem::remove_all(base);
}

TEST(CppBackend, RunsOnAThreadPool) {
  REQUIRE_HOST_COMPILER();
  ThreadPool pool(3);
  for (const char* name : {"histogram", "transpose_shared"}) {
    SCOPED_TRACE(name);
    auto m = load_golden(name);
    ASSERT_TRUE(m.ok());
    auto cpu = codegen::compile_cpu_module(*m);
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    for (const auto& c : golden_cases()) {
      if (c.name != name) continue;
      uint32_t seed = test_seed();
      SCOPED_TRACE(fmt::format("seed {}", seed));
      std::mt19937 rng(seed);
      EXPECT_EQ(run_on_cpu(*cpu, name, c.make(rng), pool), "");
    }
  }
}

TEST(CppBackend, LaunchRejectsOversizedBlocks) {
  REQUIRE_HOST_COMPILER();
  auto m = load_golden("vector_add");
  ASSERT_TRUE(m.ok());
  auto cpu = codegen::compile_cpu_module(*m);
  ASSERT_TRUE(cpu.ok());
  auto fn = cpu->kernel("vector_add");
  ASSERT_TRUE(fn.ok());
  Status s = codegen::launch_cpu(*fn, nullptr, {1, 1, 1}, {2048, 1, 1});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu->kernel("no_such_kernel").status().code(), StatusCode::kNotFound);
}

// The byte bounds that let vector dot4 use vpmaddubsw (see byte_range.h): nibbles and small
// fields built from loaded data have known bounds; the loaded data itself does not.
TEST(CppBackend, ByteRangeBoundsWhatDot4Needs) {
  auto m = ir::parse_module(R"(kernel @k(%p: ptr<global, u32>) {
  %z = const 0 : i32
  %q = load %p[%z], align 16 : u32x4
  %m = const 0x0F0F0F0F : u32x4
  %lo = and %q, %m
  %c4 = const 4 : u32x4
  %s = shr %q, %c4
  %hi = and %s, %m
  %j = concat %lo, %hi
  %one = const 0x01010101 : u32x8
  %c4x = const 4 : u32x8
  %x = load %p[%z], align 32 : u32x8
  %b = and %x, %one
  %b4 = shl %b, %c4x
  %or = or %j, %b4
  %i = bitcast %or : i32x8
  %c4i = const 4 : i32x8
  %sr = shr %i, %c4i
  %c8x = const 8 : u32x8
  %sb8 = shr %or, %c8x
  %w = shl %or, %c4x
  %sa = add %or, %or
  %sb = add %sa, %sa
  %sc = add %sb, %sb
  %sd = add %sc, %sc
}
)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ir::Kernel& k = *m->kernels[0];
  codegen::ByteRange br(k);
  std::map<std::string, int> got;
  ir::Namer namer(k);
  ir::walk(k.body, [&](const ir::Inst* i) {
    for (const ir::Value* r : i->results) got[namer.name(r)] = br.max_byte(r);
  });
  EXPECT_EQ(got["q"], 255);  // loaded
  EXPECT_EQ(got["s"], 255);  // a shift by 4 brings the next byte's low bits in
  EXPECT_EQ(got["lo"], 15);
  EXPECT_EQ(got["hi"], 15);
  EXPECT_EQ(got["j"], 15);  // concat: the larger bound
  EXPECT_EQ(got["b"], 1);
  EXPECT_EQ(got["b4"], 16);  // no bit leaves its byte
  EXPECT_EQ(got["or"], 31);  // 15 | 16
  EXPECT_EQ(got["i"], 31);   // bitcast keeps the bytes
  EXPECT_EQ(got["sr"], 255);  // as %s (arithmetic, but the bytes are non-negative)
  EXPECT_EQ(got["sb8"], 31);  // whole bytes move down, zeros come in
  EXPECT_EQ(got["w"], 255);   // 31 << 4 leaves the byte
  EXPECT_EQ(got["sa"], 62);   // byte sums below 256: no carries
  EXPECT_EQ(got["sb"], 124);
  EXPECT_EQ(got["sc"], 248);  // no carry, but not a 7-bit operand any more
  EXPECT_EQ(got["sd"], 255);  // may carry
}

// Compares and selects, as whole vectors (f32x8, u32x8, i1 logic) and as scalars, keep the IR's
// semantics bit for bit: NaN compares false (ne: true), u32 compares unsigned, -0.0 and NaN
// payloads pass a select unchanged. (The emitter makes them vector blends and branch-free scalar
// selects; a lane loop or a branch gave the same bits, so this pins what the faster forms must keep.)
TEST(CppBackend, ComparesAndSelectsKeepBitsAsVectorsAndScalars) {
  REQUIRE_HOST_COMPILER();
  auto m = ir::parse_module(R"(kernel @sel(%a: ptr<global, f32>, %b: ptr<global, f32>, %u: ptr<global, u32>, %v: ptr<global, f32>, %s: ptr<global, f32>) {
  %tid = thread_id.x
  %zero = const 0 : i32
  %one = const 1 : i32
  %eight = const 8 : i32
  %half = const 32 : i32
  %base = mul %tid, %eight
  %x = load %a[%base], align 4 : f32x8
  %y = load %b[%base], align 4 : f32x8
  %ua = load %u[%base], align 4 : u32x8
  %top = const 0x80000000 : u32x8
  %gt = cmp.gt %x, %y
  %nan = cmp.ne %x, %x
  %m = or %gt, %nan
  %nm = not %m
  %ul = cmp.lt %ua, %top
  %k = and %nm, %ul
  %r1 = select %m, %x, %y
  %r2 = select %k, %x, %y
  store %v[%base], %r1, align 4
  %base2 = add %base, %half
  store %v[%base2], %r2, align 4
  for %j = %zero to %eight step %one {
    %i = add %base, %j
    %xs = load %a[%i]
    %ys = load %b[%i]
    %us = load %u[%i]
    %tops = const 0x80000000 : u32
    %gts = cmp.gt %xs, %ys
    %nans = cmp.ne %xs, %xs
    %ms = or %gts, %nans
    %nms = not %ms
    %uls = cmp.lt %us, %tops
    %ks = and %nms, %uls
    %r1s = select %ms, %xs, %ys
    %r2s = select %ks, %xs, %ys
    store %s[%i], %r1s
    %i2 = add %i, %half
    store %s[%i2], %r2s
  }
}
)");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_TRUE(ir::verify(*m, ir::TargetKind::kCpp).ok()) << ir::verify(*m, ir::TargetKind::kCpp).to_string();
  auto cpu = codegen::compile_cpu_module(*m);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  auto fn = cpu->kernel("sel");
  ASSERT_TRUE(fn.ok()) << fn.status().to_string();
  auto bits = [](uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; };
  const float specials[] = {bits(0x7fc01234u), -0.0f, 0.0f, INFINITY, -INFINITY, bits(0x00000003u), 1.0f, -2.5f,
                            bits(0xffc00007u), 3.0f};
  std::vector<float> a(32), b(32), v(64, 0.0f), s(64, 0.0f);
  std::vector<uint32_t> u(32);
  uint32_t seed = test_seed();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  std::mt19937 rng(seed);
  for (int i = 0; i < 32; ++i) {
    a[i] = specials[rng() % 10];
    b[i] = i % 5 == 0 ? a[i] : specials[rng() % 10];
    u[i] = i % 2 ? 0x80000000u + static_cast<uint32_t>(rng() % 1000) : static_cast<uint32_t>(rng() % 1000);
  }
  void* pa = a.data(); void* pb = b.data(); void* pu = u.data(); void* pv = v.data(); void* ps = s.data();
  void* args[] = {&pa, &pb, &pu, &pv, &ps};
  ASSERT_TRUE(codegen::launch_cpu(*fn, args, {1, 1, 1}, {4, 1, 1}, 1).ok());
  int selected_a = 0, selected_b = 0;
  for (int i = 0; i < 32; ++i) {
    const bool mm = a[i] > b[i] || a[i] != a[i];
    const bool kk = !mm && u[i] < 0x80000000u;
    const float e1 = mm ? a[i] : b[i], e2 = kk ? a[i] : b[i];
    (kk ? selected_a : selected_b)++;
    for (const auto* out : {&v, &s}) {
      SCOPED_TRACE(fmt::format("{} element {}: a {} b {} u {:#x}", out == &v ? "vector" : "scalar", i, a[i], b[i], u[i]));
      EXPECT_EQ(std::bit_cast<uint32_t>((*out)[i]), std::bit_cast<uint32_t>(e1));
      EXPECT_EQ(std::bit_cast<uint32_t>((*out)[32 + i]), std::bit_cast<uint32_t>(e2));
    }
  }
  EXPECT_GT(selected_a, 0);  // both sides of the second select are taken
  EXPECT_GT(selected_b, 0);
}

// A chain of dot4s (each one's accumulator the previous result) with a small-byte operand sums
// its products in 16 bits on AVX2 only while they provably fit: nine links of nibbles (bytes <=
// 15) against bytes of -128 and 127 (the largest products) make a chain of eight and a new one;
// links of bytes <= 127 never chain. The results are the scalar definition's in every bit, and
// the C++ carries the chain. A convert of eight i32 lanes to bytes keeps each lane's low byte.
TEST(CppBackend, Dot4ChainsAndByteConvertsKeepBits) {
  REQUIRE_HOST_COMPILER();
  std::string src = R"(kernel @chain(%w: ptr<global, i32>, %x: ptr<global, i32>, %y: ptr<global, i32>, %b: ptr<global, i8>) {
  %z = const 0 : i32
  %nib = const 0x0F0F0F0F : i32x8
  %low = const 0x7F7F7F7F : i32x8
  %c = load %y[%z], align 4 : i32x8
)";
  for (int k = 0; k < 9; ++k) {
    const std::string n = k ? fmt::format("%n{}", k) : "%c", s7 = k ? fmt::format("%s{}", k) : "%c";
    src += fmt::format("  %o{0} = const {1} : i32\n  %wr{0} = load %w[%o{0}], align 4 : i32x8\n", k, 8 * k);
    src += fmt::format("  %xr{0} = load %x[%o{0}], align 4 : i32x8\n", k);
    src += fmt::format("  %wn{0} = and %wr{0}, %nib\n  %n{1} = dot4 %wn{0}, %xr{0}, {2}\n", k, k + 1, n);
    src += fmt::format("  %ws{0} = and %wr{0}, %low\n  %s{1} = dot4 %xr{0}, %ws{0}, {2}\n", k, k + 1, s7);
  }
  src += R"(  %o9 = const 8 : i32
  store %y[%o9], %n9, align 4
  %o10 = const 16 : i32
  store %y[%o10], %s9, align 4
  %bb = convert %n9 : i8x8
  store %b[%z], %bb, align 1
}
)";
  auto m = ir::parse_module(src);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_TRUE(ir::verify(*m, ir::TargetKind::kCpp).ok()) << ir::verify(*m, ir::TargetKind::kCpp).to_string();
  auto text = codegen::emit_cpp(*m);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  // Links 2..8 of the nibble chain carry the one before; link 9 starts over; no 7-bit link carries.
  const std::regex carried(R"(loom_dot4_u7_part\(v_\w+_p,)");
  const auto n_carried = std::distance(std::sregex_iterator(text->begin(), text->end(), carried), std::sregex_iterator());
  EXPECT_EQ(n_carried, 7) << *text;
  auto cpu = codegen::compile_cpu_module(*m);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  auto fn = cpu->kernel("chain");
  ASSERT_TRUE(fn.ok()) << fn.status().to_string();
  uint32_t seed = test_seed();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  std::mt19937 rng(seed);
  std::vector<int32_t> w(72), x(72), y(24, 0);
  std::vector<int8_t> bytes(8, 0);
  for (int i = 0; i < 72; ++i) {
    // Half the lanes at the extremes (nibble 15 and 127 against -128), half random bytes.
    w[i] = i % 16 < 8 ? static_cast<int32_t>(0xFFFFFFFFu) : static_cast<int32_t>(rng());
    x[i] = i % 16 < 8 ? static_cast<int32_t>(0x80808080u) : static_cast<int32_t>(rng());
  }
  for (int l = 0; l < 8; ++l) y[l] = static_cast<int32_t>(rng());
  const std::vector<int32_t> c(y.begin(), y.begin() + 8);
  void* pw = w.data(); void* px = x.data(); void* py = y.data(); void* pb = bytes.data();
  void* args[] = {&pw, &px, &py, &pb};
  ASSERT_TRUE(codegen::launch_cpu(*fn, args, {1, 1, 1}, {1, 1, 1}, 1).ok());
  auto byte = [](int32_t v, int k) { return static_cast<int8_t>(static_cast<uint32_t>(v) >> (8 * k)); };
  for (int l = 0; l < 8; ++l) {
    uint32_t n = static_cast<uint32_t>(c[l]), s7 = static_cast<uint32_t>(c[l]);
    for (int k = 0; k < 9; ++k) {
      const int32_t wv = w[8 * k + l], xv = x[8 * k + l];
      for (int j = 0; j < 4; ++j) {
        n += static_cast<uint32_t>((byte(wv, j) & 0x0F) * byte(xv, j));
        s7 += static_cast<uint32_t>((byte(wv, j) & 0x7F) * byte(xv, j));
      }
    }
    EXPECT_EQ(static_cast<uint32_t>(y[8 + l]), n) << "nibble chain, lane " << l;
    EXPECT_EQ(static_cast<uint32_t>(y[16 + l]), s7) << "7-bit chain, lane " << l;
    EXPECT_EQ(bytes[l], static_cast<int8_t>(n & 0xFF)) << "low byte, lane " << l;
  }
}

// dot4 of two signed operands where one has no -128 byte (raised by a max on i8x32 lanes, as
// Q8_0 activations are): the emitter takes the sign trick (loom_dot4_s7), exact for every byte of
// the other operand, -128 included; without the max it keeps the sign-extending form. Integer
// min/max on byte lanes are one instruction (loom_iminmax_v).
TEST(CppBackend, SignTrickDot4IsExactWhereOneOperandHasNoMinByte) {
  REQUIRE_HOST_COMPILER();
  const char* src = R"(kernel @s7(%w: ptr<global, i32>, %x: ptr<global, i32>, %y: ptr<global, i32>) {
  %z = const 0 : i32
  %e = const 8 : i32
  %f = const 16 : i32
  %g = const 24 : i32
  %floor = const -127 : i8x32
  %cap = const 100 : i8x32
  %acc = load %y[%z], align 4 : i32x8
  %wr = load %w[%z], align 4 : i32x8
  %xr = load %x[%z], align 4 : i32x8
  %xb = bitcast %xr : i8x32
  %xm = max %xb, %floor : i8x32
  %xs = bitcast %xm : i32x8
  %d1 = dot4 %wr, %xs, %acc
  %d2 = dot4 %xs, %wr, %d1
  %d3 = dot4 %wr, %xr, %acc
  %xc = min %xb, %cap : i8x32
  %xcs = bitcast %xc : i32x8
  store %y[%e], %d2, align 4
  store %y[%f], %d3, align 4
  store %y[%g], %xcs, align 4
}
)";
  auto m = ir::parse_module(src);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_TRUE(ir::verify(*m, ir::TargetKind::kCpp).ok()) << ir::verify(*m, ir::TargetKind::kCpp).to_string();
  auto text = codegen::emit_cpp(*m);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  const std::regex s7(R"(= loom_dot4_s7\()"), v(R"(= loom_dot4_v\()");
  auto count = [&](const std::regex& re) {
    return std::distance(std::sregex_iterator(text->begin(), text->end(), re), std::sregex_iterator());
  };
  EXPECT_EQ(count(s7), 2) << *text;
  EXPECT_EQ(count(v), 1) << *text;
  EXPECT_NE(text->find("loom_iminmax_v<true>("), std::string::npos);
  EXPECT_NE(text->find("loom_iminmax_v<false>("), std::string::npos);
  auto cpu = codegen::compile_cpu_module(*m);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  auto fn = cpu->kernel("s7");
  ASSERT_TRUE(fn.ok()) << fn.status().to_string();
  uint32_t seed = test_seed();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  std::mt19937 rng(seed);
  // Lanes 0-3 at the extremes (-128 weights against -128 / 127 activations), 4-7 random.
  std::vector<int32_t> w(8), x(8), y(32, 0);
  const uint32_t ext_w[4] = {0x80808080u, 0x80808080u, 0x7F807F80u, 0x01FF80FFu};
  const uint32_t ext_x[4] = {0x80808080u, 0x7F7F7F7Fu, 0x80818081u, 0x80808080u};
  for (int l = 0; l < 8; ++l) {
    w[l] = static_cast<int32_t>(l < 4 ? ext_w[l] : rng());
    x[l] = static_cast<int32_t>(l < 4 ? ext_x[l] : rng());
    y[l] = static_cast<int32_t>(rng());
  }
  const std::vector<int32_t> c(y.begin(), y.begin() + 8);
  void* pw = w.data(); void* px = x.data(); void* py = y.data();
  void* args[] = {&pw, &px, &py};
  ASSERT_TRUE(codegen::launch_cpu(*fn, args, {1, 1, 1}, {1, 1, 1}, 1).ok());
  auto byte = [](int32_t v, int k) { return static_cast<int8_t>(static_cast<uint32_t>(v) >> (8 * k)); };
  for (int l = 0; l < 8; ++l) {
    uint32_t clamped = static_cast<uint32_t>(c[l]), raw = static_cast<uint32_t>(c[l]);
    uint32_t capped = 0;
    for (int j = 0; j < 4; ++j) {
      const int xb = byte(x[l], j), wb = byte(w[l], j);
      clamped += 2u * static_cast<uint32_t>(wb * std::max(xb, -127));
      raw += static_cast<uint32_t>(wb * xb);
      capped |= static_cast<uint32_t>(static_cast<uint8_t>(std::min(xb, 100))) << (8 * j);
    }
    EXPECT_EQ(static_cast<uint32_t>(y[8 + l]), clamped) << "sign trick, lane " << l;
    EXPECT_EQ(static_cast<uint32_t>(y[16 + l]), raw) << "sign-extending form, lane " << l;
    EXPECT_EQ(static_cast<uint32_t>(y[24 + l]), capped) << "byte min, lane " << l;
  }
}

// `prefetch` is a hint: it prints and parses back, becomes __builtin_prefetch on the host, never
// faults (here it asks for bytes far past the buffer) and leaves the results alone; it takes only
// global or constant memory.
TEST(CppBackend, PrefetchIsAHintThatNeverChangesResults) {
  REQUIRE_HOST_COMPILER();
  const char* text = R"(kernel @copy(%a: ptr<global, f32>, %y: ptr<global, f32>) {
  %tid = thread_id.x : i32
  %far = const 1048576 : i32
  %ahead = add %tid, %far : i32
  prefetch %a[%ahead]
  %x = load %a[%tid] : f32
  store %y[%tid], %x
}
)";
  auto m = ir::parse_module(text);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(ir::print(*m), text);
  ASSERT_TRUE(ir::verify(*m, ir::TargetKind::kCpp).ok());
  ASSERT_TRUE(ir::verify(*m, ir::TargetKind::kPtx).ok());
  auto src = codegen::emit_cpp(*m);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_NE(src->find("__builtin_prefetch("), std::string::npos);
  auto cpu = codegen::compile_cpu_module(*m);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  auto fn = cpu->kernel("copy");
  ASSERT_TRUE(fn.ok());
  std::vector<float> a(64), y(64, 0.0f);
  for (int i = 0; i < 64; ++i) a[i] = 0.5f * static_cast<float>(i) - 3.0f;
  void* pa = a.data(); void* py = y.data();
  void* args[] = {&pa, &py};
  ASSERT_TRUE(codegen::launch_cpu(*fn, args, {1, 1, 1}, {64, 1, 1}, 1).ok());
  EXPECT_EQ(y, a);

  auto shared = ir::parse_module(R"(kernel @k(%n: i32) {
  %s = alloc_shared 64 : ptr<shared, f32>
  prefetch %s[%n]
}
)");
  ASSERT_FALSE(shared.ok());
  EXPECT_NE(shared.status().message().find("'prefetch' needs a pointer to global or constant memory"), std::string::npos)
      << shared.status().to_string();
}

// The prelude's SIMD f32 lanes of exp, exp2, log, tanh and erf against double libm, in ulps of
// the float result: every 1021st float of the whole line, every 613th in [-10, 10] (where tanh
// and erf bend), and the special values. The bounds are the ones docs/ir.md states.
TEST(CppBackend, VectorMathLanesStayWithinTheirUlpBounds) {
  REQUIRE_HOST_COMPILER();
  for (int width : {16, 8, 4}) {
  SCOPED_TRACE(fmt::format("f32x{} lanes", width));
  const std::string source = R"(kernel @math(%x: ptr<global, f32>, %e: ptr<global, f32>, %e2: ptr<global, f32>, %l: ptr<global, f32>, %t: ptr<global, f32>, %r: ptr<global, f32>) {
  %tid = thread_id.x
  %bid = block_id.x
  %bdim = block_dim.x
  %b0 = mul %bid, %bdim
  %g = add %b0, %tid
  %w = const WIDTH : i32
  %i = mul %g, %w
  %v = load %x[%i], align 4 : f32xWIDTH
  %ve = exp %v
  %ve2 = exp2 %v
  %vl = log %v
  %vt = tanh %v
  %vr = erf %v
  store %e[%i], %ve, align 4
  store %e2[%i], %ve2, align 4
  store %l[%i], %vl, align 4
  store %t[%i], %vt, align 4
  store %r[%i], %vr, align 4
}
)";
  auto m = ir::parse_module(std::regex_replace(source, std::regex("WIDTH"), std::to_string(width)));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_TRUE(ir::verify(*m, ir::TargetKind::kCpp).ok()) << ir::verify(*m, ir::TargetKind::kCpp).to_string();
  auto cpu = codegen::compile_cpu_module(*m);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  auto fn = cpu->kernel("math");
  ASSERT_TRUE(fn.ok()) << fn.status().to_string();
  std::vector<float> x;
  for (uint64_t u = 0; u < 0x7f800000u; u += 1021) {
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
    x.push_back(-std::bit_cast<float>(static_cast<uint32_t>(u)));
  }
  for (uint32_t u = 0; u <= std::bit_cast<uint32_t>(10.0f); u += 613) {
    x.push_back(std::bit_cast<float>(u));
    x.push_back(-std::bit_cast<float>(u));
  }
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f, FLT_MAX, -FLT_MAX, FLT_MIN,
                  std::bit_cast<float>(1u), -std::bit_cast<float>(1u), 88.72f, 88.73f, -103.9f, -104.0f, 127.99f,
                  128.0f, -149.0f, -150.0f, 9.0f, -9.0f, 3.9241f, -3.9241f})
    x.push_back(v);
  while (x.size() % 1024) x.push_back(0.5f);
  const size_t n = x.size();
  std::vector<std::vector<float>> out(5, std::vector<float>(n, 0.0f));
  void* px = x.data();
  void* po[5];
  for (int k = 0; k < 5; ++k) po[k] = out[k].data();
  void* args[] = {&px, &po[0], &po[1], &po[2], &po[3], &po[4]};
  ASSERT_TRUE(codegen::launch_cpu(*fn, args, {static_cast<uint32_t>(n / (64 * width)), 1, 1}, {64, 1, 1}, 2).ok());
  struct Fn {
    const char* name;
    double (*ref)(double);
    double bound;  // ulps
  };
  const Fn fns[] = {{"exp", [](double v) { return std::exp(v); }, 1.0},
                    {"exp2", [](double v) { return std::exp2(v); }, 1.0},
                    {"log", [](double v) { return std::log(v); }, 1.0},
                    {"tanh", [](double v) { return std::tanh(v); }, 3.0},
                    {"erf", [](double v) { return std::erf(v); }, 7.0}};
  for (int k = 0; k < 5; ++k) {
    double worst = 0;
    float worst_at = 0;
    int wrong = 0;
    for (size_t i = 0; i < n && wrong < 5; ++i) {
      const double want = fns[k].ref(static_cast<double>(x[i]));
      const float got = out[k][i], want_f = static_cast<float>(want);
      if (std::isnan(want) || std::isinf(want_f) || want == 0.0) {  // NaN, overflow, signed zeros: exact
        const bool same = std::isnan(want) ? std::isnan(got) : std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want_f);
        if (!same) {
          ADD_FAILURE() << fns[k].name << "(" << x[i] << ") = " << got << ", want " << want_f;
          ++wrong;
        }
        continue;
      }
      int e = 0;
      std::frexp(static_cast<double>(want_f), &e);
      const double ulp = std::ldexp(1.0, std::max(e - 24, -149));
      const double err = std::fabs(static_cast<double>(got) - want) / ulp;
      if (err > worst) worst = err, worst_at = x[i];
    }
    EXPECT_LE(worst, fns[k].bound) << fns[k].name << " is " << worst << " ulp off at " << worst_at;
  }
  }
}

}  // namespace
}  // namespace loom::test
