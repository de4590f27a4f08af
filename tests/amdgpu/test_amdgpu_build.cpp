// The op library built for AMDGPU (gfx1100, gfx1151): every op shape builds or is refused with a
// reason, the mat-vec and attention kernels do not spill, and the resource report equals the
// checked-in golden (LOOM_UPDATE_GOLDEN=1 rewrites it). Also the code-object metadata reader
// against llvm-readelf, on malformed input, and the occupancy arithmetic.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>

#include "loom/base/file.h"
#include "loom/codegen/amdgpu/amdgpu_emitter.h"
#include "loom/codegen/amdgpu/code_object_info.h"
#include "loom/codegen/target.h"
#include "loom/codegen/tool_run.h"
#include "loom/ir/parser.h"
#include "loom/kernels/amdgpu_build.h"

namespace loom {
namespace {

using codegen::AmdgpuKernelInfo;

bool update_golden() {
  const char* e = std::getenv("LOOM_UPDATE_GOLDEN");
  return e && std::string(e) == "1";
}

bool have_toolchain() { return codegen::compile_amdgpu_code_object("", "gfx1100").ok(); }

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The lines only one side has (at most 20 of each): enough to see which kernels changed.
std::string line_diff(const std::string& want, const std::string& got) {
  const auto w = lines(want), g = lines(got);
  const std::multiset<std::string> ws(w.begin(), w.end()), gs(g.begin(), g.end());
  std::string out;
  int n = 0;
  for (const auto& l : w)
    if (!gs.count(l) && n++ < 20) out += "- " + l + "\n";
  n = 0;
  for (const auto& l : g)
    if (!ws.count(l) && n++ < 20) out += "+ " + l + "\n";
  return out;
}

// Kernels that must not spill: the mat-vecs (every weight format), matmuls and attention.
bool must_not_spill(const std::string& op) {
  return op.starts_with("matvec") || op.starts_with("matmul") || op.starts_with("attention");
}

class OpsBuild : public testing::TestWithParam<std::string> {};

TEST_P(OpsBuild, EveryOpBuildsAndMatchesTheGolden) {
  if (!have_toolchain()) GTEST_SKIP() << "llc-19 / ld.lld-19 not found";
  const std::string arch = GetParam();
  auto r = kernels::build_ops_amdgpu(arch, "", 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // Every op shape is accounted for: built (one or more kernels) or refused with a reason.
  std::set<std::string> built;
  for (const auto& k : r->kernels) built.insert(k.op + " " + k.shape);
  for (const auto& p : r->failed) ADD_FAILURE() << p.op << " " << p.shape << ": " << p.reason;
  for (const auto& p : r->refused) EXPECT_FALSE(p.reason.empty()) << p.op << " " << p.shape;
  EXPECT_EQ(built.size() + r->refused.size(), static_cast<size_t>(r->shapes));
  EXPECT_GT(r->kernels.size(), 200u);
  for (const auto& k : r->kernels) {
    EXPECT_EQ(k.info.wavefront_size, 32) << k.info.name;
    EXPECT_LE(k.info.lds_bytes, 64 * 1024) << k.info.name;
    if (must_not_spill(k.op)) {
      EXPECT_EQ(k.info.vgpr_spill_count + k.info.sgpr_spill_count, 0)
          << k.op << " " << k.shape << " " << k.info.name << " spills";
      EXPECT_EQ(k.info.scratch_bytes, 0) << k.op << " " << k.shape << " " << k.info.name << " uses scratch";
    }
  }
  const std::string text = kernels::format_amdgpu_report(*r);
  const std::string path = std::string(LOOM_SOURCE_DIR) + "/tests/amdgpu/resources_" + arch + ".txt";
  if (update_golden()) {
    ASSERT_TRUE(write_file(path, text).ok());
    return;
  }
  auto want = read_file(path);
  ASSERT_TRUE(want.ok()) << path << " is missing; run with LOOM_UPDATE_GOLDEN=1 to create it";
  EXPECT_TRUE(*want == text) << path << " differs from the build (registers, LDS, spills or the op list changed); "
                             << "if intended, rerun with LOOM_UPDATE_GOLDEN=1 and review the diff:\n"
                             << line_diff(*want, text);
}

INSTANTIATE_TEST_SUITE_P(Archs, OpsBuild, testing::Values("gfx1100", "gfx1151"));

Result<std::vector<uint8_t>> golden_code_object(const std::string& name, const std::string& arch) {
  LOOM_ASSIGN_OR_RETURN(std::string src, read_file(std::string(LOOM_SOURCE_DIR) + "/tests/ir/golden/" + name + ".loom"));
  LOOM_ASSIGN_OR_RETURN(ir::Module m, ir::parse_module(src, name));
  LOOM_ASSIGN_OR_RETURN(codegen::Artifact a, codegen::amdgpu_target().compile(m, arch));
  return a.binary;
}

// llvm-readelf --notes prints the same metadata as YAML ("    .vgpr_count:     34").
int64_t yaml_field(const std::string& yaml, const std::string& key) {
  const size_t at = yaml.find("." + key + ":");
  if (at == std::string::npos) return -1;
  return std::strtoll(yaml.c_str() + at + key.size() + 2, nullptr, 10);
}

// Every value of `key` in llvm-readelf's YAML, in order ("offset" -> the .offset of each argument).
std::vector<std::string> yaml_values(const std::string& yaml, const std::string& key) {
  std::vector<std::string> out;
  const std::string needle = "." + key + ":";
  for (size_t at = yaml.find(needle); at != std::string::npos; at = yaml.find(needle, at + 1)) {
    const size_t begin = yaml.find_first_not_of(' ', at + needle.size());
    out.push_back(yaml.substr(begin, yaml.find('\n', begin) - begin));
  }
  return out;
}

TEST(CodeObjectInfo, AgreesWithLlvmReadelf) {
  auto readelf = codegen::find_tool({"llvm-readelf-19", "llvm-readelf"});
  if (!have_toolchain() || !readelf.ok()) GTEST_SKIP() << "llc-19 / ld.lld-19 / llvm-readelf-19 not found";
  for (const char* name : {"transpose_shared", "matvec_q4_0", "warp_sum", "histogram"}) {
    auto bin = golden_code_object(name, "gfx1151");
    ASSERT_TRUE(bin.ok()) << name << ": " << bin.status().to_string();
    auto info = codegen::read_amdgpu_code_object(*bin);
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    ASSERT_EQ(info->kernels.size(), 1u) << name;
    EXPECT_EQ(info->target, "amdgcn-amd-amdhsa--gfx1151");
    const std::string file = testing::TempDir() + "/co_" + name + ".hsaco";
    ASSERT_TRUE(write_file(file, std::string(bin->begin(), bin->end())).ok());
    auto r = codegen::run_tool({*readelf, "--notes", file});
    ASSERT_TRUE(r.ok() && r->exit_code == 0);
    const AmdgpuKernelInfo& k = info->kernels[0];
    EXPECT_EQ(k.name, name);
    EXPECT_EQ(k.vgpr_count, yaml_field(r->output, "vgpr_count")) << name;
    EXPECT_EQ(k.sgpr_count, yaml_field(r->output, "sgpr_count")) << name;
    EXPECT_EQ(k.lds_bytes, yaml_field(r->output, "group_segment_fixed_size")) << name;
    EXPECT_EQ(k.scratch_bytes, yaml_field(r->output, "private_segment_fixed_size")) << name;
    EXPECT_EQ(k.vgpr_spill_count, yaml_field(r->output, "vgpr_spill_count")) << name;
    EXPECT_EQ(k.sgpr_spill_count, yaml_field(r->output, "sgpr_spill_count")) << name;
    EXPECT_EQ(k.wavefront_size, yaml_field(r->output, "wavefront_size")) << name;
    EXPECT_EQ(k.max_flat_workgroup_size, yaml_field(r->output, "max_flat_workgroup_size")) << name;
    // The kernarg layout the amdgpu driver packs launches by.
    EXPECT_EQ(k.kernarg_segment_size, yaml_field(r->output, "kernarg_segment_size")) << name;
    EXPECT_EQ(k.kernarg_segment_align, yaml_field(r->output, "kernarg_segment_align")) << name;
    std::vector<std::string> offsets, sizes, kinds;
    for (const auto& a : k.args) {
      offsets.push_back(std::to_string(a.offset));
      sizes.push_back(std::to_string(a.size));
      kinds.push_back(a.value_kind);
    }
    EXPECT_GT(k.args.size(), 1u) << name;
    EXPECT_EQ(offsets, yaml_values(r->output, "offset")) << name;
    EXPECT_EQ(sizes, yaml_values(r->output, "size")) << name;
    EXPECT_EQ(kinds, yaml_values(r->output, "value_kind")) << name;
    if (std::string(name) == "transpose_shared") {
      EXPECT_GT(k.lds_bytes, 0);
    }
    std::filesystem::remove(file);
  }
}

TEST(CodeObjectInfo, MalformedInputIsAnErrorNotACrash) {
  if (!have_toolchain()) GTEST_SKIP() << "llc-19 / ld.lld-19 not found";
  auto bin = golden_code_object("vector_add", "gfx1100");
  ASSERT_TRUE(bin.ok()) << bin.status().to_string();
  ASSERT_TRUE(codegen::read_amdgpu_code_object(*bin).ok());
  // Every truncation fails cleanly (the note and section headers sit at both ends of the file).
  for (size_t n = 0; n < bin->size(); n += 7) {
    auto r = codegen::read_amdgpu_code_object(std::span(bin->data(), n));
    EXPECT_FALSE(r.ok()) << n;
  }
  // Random corruption: any result is fine, as long as nothing crashes or reads out of bounds
  // (the ASan build checks the latter).
  std::mt19937_64 rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> b = *bin;
    for (int j = 0; j < 4; ++j) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    (void)codegen::read_amdgpu_code_object(b);
  }
  EXPECT_FALSE(codegen::read_amdgpu_code_object(std::vector<uint8_t>(100, 0)).ok());
}

TEST(AmdgpuOccupancy, RegistersAndLds) {
  auto big = codegen::amdgpu_arch_limits("gfx1151");
  auto small = codegen::amdgpu_arch_limits("gfx1102");
  ASSERT_TRUE(big.ok() && small.ok());
  EXPECT_FALSE(codegen::amdgpu_arch_limits("sm_90").ok());
  AmdgpuKernelInfo k;
  // llc's own "; Occupancy:" comments: a kernel of 131 VGPRs, 10 waves on gfx1100/gfx1151;
  // the same kernel fitted into 128 VGPRs on gfx1102, 8 waves.
  k.vgpr_count = 131;
  EXPECT_EQ(codegen::amdgpu_occupancy(k, *big, 256).waves_per_simd, 10);
  EXPECT_EQ(codegen::amdgpu_occupancy(k, *big, 256).limiter, "vgpr");
  k.vgpr_count = 128;
  EXPECT_EQ(codegen::amdgpu_occupancy(k, *small, 256).waves_per_simd, 8);
  k.vgpr_count = 24;
  EXPECT_EQ(codegen::amdgpu_occupancy(k, *big, 256).waves_per_simd, 16);
  EXPECT_EQ(codegen::amdgpu_occupancy(k, *big, 256).limiter, "-");
  k.lds_bytes = 32 * 1024;  // 4 workgroups of 8 waves per WGP: 32 waves over 4 SIMDs
  EXPECT_EQ(codegen::amdgpu_occupancy(k, *big, 256).waves_per_simd, 8);
  EXPECT_EQ(codegen::amdgpu_occupancy(k, *big, 256).limiter, "lds");
  k.lds_bytes = 64 * 1024;  // 2 workgroups of 2 waves: 1 wave per SIMD
  EXPECT_EQ(codegen::amdgpu_occupancy(k, *big, 64).waves_per_simd, 1);
}

// The CLI: one op, one arch; a wrong target is one clear error.
TEST(OpsBuildCli, OneOpAndErrors) {
  if (!have_toolchain()) GTEST_SKIP() << "llc-19 / ld.lld-19 not found";
  const char* b = std::getenv("LOOM_BIN");
  const std::string bin = b && *b ? b : std::string(LOOM_BINARY_DIR) + "/loom";
  auto r = codegen::run_tool({bin, "ops", "build", "--target", "amdgpu:gfx1100", "--op", "argmax"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0) << r->output;
  EXPECT_NE(r->output.find("argmax n=1,n_rows=1 [threads=256] argmax_rows: block 256 vgpr"), std::string::npos)
      << r->output;
  EXPECT_NE(r->output.find("kernels built (1 ops, 4 op shapes), 0 op shapes refused, 0 failed"), std::string::npos)
      << r->output;
  r = codegen::run_tool({bin, "ops", "build", "--target", "ptx"});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->output.find("amdgpu[:ARCH]"), std::string::npos) << r->output;
  r = codegen::run_tool({bin, "ops", "build", "--target", "amdgpu:gfx90a"});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
  r = codegen::run_tool({bin, "ops", "build", "--target", "amdgpu:gfx1100", "--op", "nope"});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->output.find("unknown op 'nope'"), std::string::npos) << r->output;
}

}  // namespace
}  // namespace loom
