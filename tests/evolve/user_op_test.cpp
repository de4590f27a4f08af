// User-defined ops from a file: the reference in C++ and in Loom IR computes the op's
// definition, the kernel template generates correct IR for every knob value, the evaluator
// accepts it and rejects a wrong kernel, and bad files fail with a clear message.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include <gtest/gtest.h>

#include "loom/store/candidate.h"
#include "loom/evolve/store_names.h"
#include "loom/evolve/evaluator.h"
#include "loom/evolve/user_op.h"
#include "loom/kernels/op_spec.h"

namespace loom::evolve {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  auto p = std::filesystem::temp_directory_path() / ("loom_user_op_" + std::to_string(getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p.string();
}

// y[i] = a[i] + 3 * b[i]; `ref` is the reference object (C++ or Loom IR).
std::string scaled_add(const std::string& name, const std::string& ref) {
  return R"({
  "name": ")" + name + R"(",
  "dims": {"n": {"min": 1}},
  "args": [
    {"name": "a", "role": "input", "type": "f32", "count": "n"},
    {"name": "b", "role": "input", "type": "f32", "count": "n"},
    {"name": "y", "role": "output", "type": "f32", "count": "n"}
  ],
  "tolerance": {"atol": 1e-6, "rtol": 1e-6},
  "test_shapes": ["n=7"],
  "reference": )" + ref + R"(,
  "kernel": {
    "knobs": {"bs": [64, 32, 128]},
    "source": [
      "// launch scaled_add grid=${(n+bs-1)/bs},1,1 block=${bs},1,1 args=0,1,2",
      "kernel @scaled_add(%a: ptr<global, f32>, %b: ptr<global, f32>, %y: ptr<global, f32>) {",
      "  %tid = thread_id.x",
      "  %bid = block_id.x",
      "  %bdim = block_dim.x",
      "  %base = mul %bid, %bdim",
      "  %i = add %base, %tid",
      "  %n = const ${n} : i32",
      "  %in = cmp.lt %i, %n",
      "  if %in {",
      "    %x = load %a[%i]",
      "    %z = load %b[%i]",
      "    %three = const 3.0 : f32",
      "    %t = mul %z, %three",
      "    %s = add %x, %t",
      "    store %y[%i], %s",
      "  }",
      "}"
    ]
  }
})";
}

const char* kCppRef = R"({"lang": "cpp", "source": [
  "extern \"C\" void reference(void* const* args, const long long* dims) {",
  "  const float* a = static_cast<const float*>(args[0]);",
  "  const float* b = static_cast<const float*>(args[1]);",
  "  float* y = static_cast<float*>(args[2]);",
  "  for (long long i = 0; i < dims[0]; ++i) y[i] = a[i] + 3.0f * b[i];",
  "}"]})";

const char* kIrRef = R"({"lang": "ir", "source": [
  "// launch ref_add grid=1,1,1 block=1,1,1 args=0,1,2",
  "kernel @ref_add(%a: ptr<global, f32>, %b: ptr<global, f32>, %y: ptr<global, f32>) {",
  "  %zero = const 0 : i32",
  "  %one = const 1 : i32",
  "  %n = const ${n} : i32",
  "  for %i = %zero to %n step %one {",
  "    %x = load %a[%i]",
  "    %z = load %b[%i]",
  "    %three = const 3.0 : f32",
  "    %t = mul %z, %three",
  "    %s = add %x, %t",
  "    store %y[%i], %s",
  "  }",
  "}"]})";

float f32_at(const kernels::HostArg& a, size_t i) {
  float f;
  std::memcpy(&f, a.bytes.data() + 4 * i, 4);
  return f;
}

TEST(EvolveUserOp, ReferencesComputeTheDefinition) {
  for (const auto& [name, ref] : {std::pair<std::string, const char*>{"scaled_add_cpp", kCppRef}, {"scaled_add_ir", kIrRef}}) {
    auto op = resolve_op("", write_temp(name + ".json", scaled_add(name, ref)));
    ASSERT_TRUE(op.ok()) << op.status().to_string();
    EXPECT_EQ((*op)->name(), name);
    auto shape = kernels::Shape::parse("n=1000");
    ASSERT_TRUE(shape.ok());
    ASSERT_TRUE((*op)->validate(*shape).ok());
    std::vector<kernels::HostArg> host((*op)->args(*shape).size());
    std::mt19937_64 rng(7);
    (*op)->fill_inputs(*shape, rng, host);
    ASSERT_EQ(host[0].bytes.size(), 4000u);
    ASSERT_TRUE((*op)->reference(*shape, host).ok());
    int nonzero = 0;
    for (size_t i = 0; i < 1000; ++i) {
      const float want = f32_at(host[0], i) + 3.0f * f32_at(host[1], i);
      ASSERT_NEAR(f32_at(host[2], i), want, 1e-6 * (1 + std::fabs(want))) << name << " at " << i;  // fma or not
      nonzero += f32_at(host[0], i) != 0;
    }
    EXPECT_GT(nonzero, 900) << "random inputs, not zeros";
    EXPECT_EQ((*op)->cost(*shape).bytes, 12000) << "default cost: every buffer once";
  }
}

TEST(EvolveUserOp, KernelTemplateIsSearchedAndJudged) {
  auto op = resolve_op("scaled_add_cpp", write_temp("scaled_add_cpp.json", scaled_add("scaled_add_cpp", kCppRef)));
  ASSERT_TRUE(op.ok()) << op.status().to_string();
  auto shape = kernels::Shape::parse("n=1000");
  const auto space = (*op)->schedule_space(*shape, ir::TargetKind::kCpp);
  ASSERT_EQ(space.size(), 1u);
  EXPECT_EQ(space[0].name, "bs");
  EXPECT_EQ((*op)->default_schedule(*shape, ir::TargetKind::kCpp).at("bs"), 64) << "a knob's first choice is its default";
  EvalOptions o;
  o.holdout = holdout_shapes(**op, *shape, 2);
  ASSERT_FALSE(o.holdout.empty());
  o.time_budget_s = 0.02;
  for (int64_t bs : {32, 128}) {
    Candidate c;
    c.knobs = {{"bs", bs}};
    EvalResult r = evaluate_isolated("cpu", **op, *shape, c, o, 120);
    EXPECT_TRUE(r.ok()) << "bs=" << bs << ": " << r.status << " " << r.reason;
  }
  Candidate outside;
  outside.knobs = {{"bs", 48}};
  EXPECT_EQ(evaluate_isolated("cpu", **op, *shape, outside, o, 120).status, "compile_error");
  // A kernel that forgets the scale is wrong on the first trial.
  Candidate wrong;
  wrong.kind = CandKind::kIr;
  wrong.source = R"(// launch add_k grid=${(n+63)/64},1,1 block=64,1,1 args=0,1,2
kernel @add_k(%a: ptr<global, f32>, %b: ptr<global, f32>, %y: ptr<global, f32>) {
  %tid = thread_id.x
  %bid = block_id.x
  %bdim = block_dim.x
  %base = mul %bid, %bdim
  %i = add %base, %tid
  %n = const ${n} : i32
  %in = cmp.lt %i, %n
  if %in {
    %x = load %a[%i]
    %z = load %b[%i]
    %s = add %x, %z
    store %y[%i], %s
  }
}
)";
  EXPECT_EQ(evaluate_isolated("cpu", **op, *shape, wrong, o, 120).tag(), "wrong");
}

TEST(EvolveUserOp, BadFilesFailClearly) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    static int k = 0;
    auto op = resolve_op("", write_temp("bad" + std::to_string(k++) + ".json", text));
    ASSERT_FALSE(op.ok()) << "accepted: " << text;
    EXPECT_NE(op.status().to_string().find(needle), std::string::npos) << op.status().to_string();
  };
  expect_error("{", "not a JSON object");
  expect_error(R"({"dims": {"n": {}}})", "needs a \"name\"");
  expect_error(scaled_add("matvec", kCppRef), "built-in op");
  expect_error(R"({"name": "x", "dims": {"n": {}}, "args": [{"name": "a", "count": "n"}], "reference": {"source": "x"}})",
               "no output argument");
  std::string no_kernel = scaled_add("nk", kCppRef);
  no_kernel = no_kernel.substr(0, no_kernel.find(",\n  \"kernel\"")) + "}";
  expect_error(no_kernel, "needs a \"kernel\"");
  std::string bad_default = scaled_add("bd", kCppRef);
  bad_default.replace(bad_default.find("\"knobs\": {\"bs\": [64, 32, 128]}"), 30,
                      "\"knobs\": {\"bs\": [64, 32, 128]}, \"default\": {\"bs\": 48}");
  expect_error(bad_default, "not one of its choices");
  EXPECT_FALSE(resolve_op("", "/nonexistent/op.json").ok());
  auto op = resolve_op("", write_temp("v.json", scaled_add("scaled_add_v", kCppRef)));
  ASSERT_TRUE(op.ok());
  auto bad_dim = kernels::Shape::parse("m=4");
  EXPECT_FALSE((*op)->validate(*bad_dim).ok());
  EXPECT_FALSE(resolve_op("other_name", op_file_of(**op)).ok()) << "the file names its op";
}

}  // namespace
}  // namespace loom::evolve
