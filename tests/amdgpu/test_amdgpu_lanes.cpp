// Lane movement on AMDGPU (gfx11, wave32): which DPP and v_permlanex16 controls the emitter
// writes for warp reductions and shfl.xor by a constant, decoded by the ISA's rules into the lane
// each lane reads (nothing here runs on an AMD GPU: these are the paper checks), and the
// instructions llc-19 makes of them for gfx1100 and gfx1151, dot4's v_dot4_i32_iu8 included.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <regex>

#include "loom/base/file.h"
#include "loom/codegen/amdgpu/amdgpu_emitter.h"
#include "loom/codegen/target.h"
#include "loom/codegen/tool_run.h"
#include "loom/ir/parser.h"

namespace loom {
namespace {

using codegen::AmdgpuLaneXor;

// One lane-moving call in the emitted LLVM IR.
struct LaneMove {
  bool permlanex16 = false;
  uint32_t ctrl = 0, sel_lo = 0, sel_hi = 0;
};

// The lane (0..31) that `lane` reads, by the gfx11 ISA's definitions (RDNA3 ISA guide, DPP16
// and V_PERMLANEX16_B32); -1 for a control the emitter must not use.
int source_lane(const LaneMove& m, int lane) {
  if (m.permlanex16) {  // lane i of a row reads lane sel[i] of the other row
    const uint64_t sel = (uint64_t{m.sel_hi} << 32) | m.sel_lo;
    return ((lane & 16) ^ 16) | static_cast<int>((sel >> (4 * (lane & 15))) & 15);
  }
  if (m.ctrl <= 0xFF) return (lane & ~3) | static_cast<int>((m.ctrl >> (2 * (lane & 3))) & 3);  // quad_perm
  if (m.ctrl >= 0x160 && m.ctrl <= 0x16F) return (lane & ~15) | ((lane & 15) ^ static_cast<int>(m.ctrl & 15));  // row_xmask
  return -1;
}

LaneMove from(const AmdgpuLaneXor& x) { return {x.permlanex16, x.dpp_ctrl, x.sel_lo, x.sel_hi}; }

std::string describe(const LaneMove& m) {
  return m.permlanex16 ? fmt::format("permlanex16 sel {:#010x} {:#010x}", m.sel_lo, m.sel_hi)
                       : fmt::format("dpp_ctrl {:#x}", m.ctrl);
}

// Every lane l reads lane l ^ mask.
::testing::AssertionResult reads_xor(const LaneMove& m, int mask) {
  for (int lane = 0; lane < 32; ++lane)
    if (source_lane(m, lane) != (lane ^ mask))
      return ::testing::AssertionFailure() << describe(m) << ": lane " << lane << " reads " << source_lane(m, lane)
                                           << ", want " << (lane ^ mask);
  return ::testing::AssertionSuccess();
}

TEST(AmdgpuLanes, EveryConstantXorMaskReadsLaneXorMask) {
  for (int mask = 1; mask < 32; ++mask) {
    SCOPED_TRACE(mask);
    const LaneMove m = from(codegen::amdgpu_lane_xor(mask));
    EXPECT_EQ(m.permlanex16, mask >= 16);
    EXPECT_TRUE(reads_xor(m, mask));
  }
  // The words a reviewer reads in the .ll goldens: quad_perm [1,0,3,2] and [2,3,0,1],
  // row_xmask:4 and :8, and v_permlanex16 with the identity selects (lane i reads lane i ^ 16).
  EXPECT_EQ(codegen::amdgpu_lane_xor(1).dpp_ctrl, 0xB1u);
  EXPECT_EQ(codegen::amdgpu_lane_xor(2).dpp_ctrl, 0x4Eu);
  EXPECT_EQ(codegen::amdgpu_lane_xor(3).dpp_ctrl, 0x1Bu);
  EXPECT_EQ(codegen::amdgpu_lane_xor(4).dpp_ctrl, 0x164u);
  EXPECT_EQ(codegen::amdgpu_lane_xor(8).dpp_ctrl, 0x168u);
  EXPECT_EQ(codegen::amdgpu_lane_xor(16).sel_lo, 0x76543210u);
  EXPECT_EQ(codegen::amdgpu_lane_xor(16).sel_hi, 0xFEDCBA98u);
  // The decoder itself rejects a wrong pattern (row_shr:1, a rotation, is not an xor).
  EXPECT_FALSE(reads_xor(LaneMove{false, 0x111, 0, 0}, 1));
  EXPECT_FALSE(reads_xor(LaneMove{false, 0xB1, 0, 0}, 2));
}

Result<ir::Module> golden(const std::string& name) {
  LOOM_ASSIGN_OR_RETURN(std::string src, read_file(std::string(LOOM_SOURCE_DIR) + "/tests/ir/golden/" + name + ".loom"));
  return ir::parse_module(src, name);
}

// The lane-moving calls of the emitted LLVM IR, in order; ds_bpermute calls are counted.
std::vector<LaneMove> lane_moves(const std::string& ll, int* bpermutes) {
  static const std::regex call(
      R"(call i32 @llvm\.amdgcn\.(update\.dpp\.i32|permlanex16|ds\.bpermute)\(([^)]*)\))");
  static const std::regex dpp(R"(i32 poison, i32 [%\w]+, i32 (-?\d+), i32 15, i32 15, i1 true)");
  static const std::regex perm(R"(i32 poison, i32 [%\w]+, i32 (-?\d+), i32 (-?\d+), i1 false, i1 false)");
  std::vector<LaneMove> out;
  *bpermutes = 0;
  for (auto it = std::sregex_iterator(ll.begin(), ll.end(), call); it != std::sregex_iterator(); ++it) {
    const std::string kind = (*it)[1], args = (*it)[2];
    std::smatch a;
    if (kind == "ds.bpermute") {
      ++*bpermutes;
    } else if (kind == "permlanex16") {
      EXPECT_TRUE(std::regex_match(args, a, perm)) << args;
      if (!a.empty())
        out.push_back({true, 0, static_cast<uint32_t>(std::stoll(a[1])), static_cast<uint32_t>(std::stoll(a[2]))});
    } else {
      EXPECT_TRUE(std::regex_match(args, a, dpp)) << "a DPP move must write every row and bank: " << args;
      if (!a.empty()) out.push_back({false, static_cast<uint32_t>(std::stoll(a[1])), 0, 0});
    }
  }
  return out;
}

TEST(AmdgpuLanes, WarpReduceIsTheButterflyInDppAndPermlane) {
  auto m = golden("warp_ops");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto ll = codegen::emit_amdgpu_llvm(*m);
  ASSERT_TRUE(ll.ok()) << ll.status().to_string();
  int bpermutes = 0;
  const auto moves = lane_moves(*ll, &bpermutes);
  // Six reductions of five steps (lane ^ 16, 8, 4, 2, 1, the order of the ptx target's
  // butterfly), then shfl.xor by 3, 21, 12 and 16 (the IR's order); the two shuffles by the
  // run-time mask stay ds_bpermute.
  std::vector<int> want;
  for (int r = 0; r < 6; ++r)
    for (int off = 16; off >= 1; off /= 2) want.push_back(off);
  for (int mask : {3, 21, 12, 16}) want.push_back(mask);
  ASSERT_EQ(moves.size(), want.size()) << *ll;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(fmt::format("lane move {} (xor {})", i, want[i]));
    EXPECT_EQ(moves[i].permlanex16, want[i] >= 16);
    EXPECT_TRUE(reads_xor(moves[i], want[i]));
  }
  EXPECT_EQ(bpermutes, 2);
}

bool have_toolchain() { return codegen::compile_amdgpu_code_object("", "gfx1100").ok(); }

Result<std::string> disassemble(const std::string& name, const std::string& arch) {
  LOOM_ASSIGN_OR_RETURN(std::string objdump, codegen::find_tool({"llvm-objdump-19", "llvm-objdump"}));
  LOOM_ASSIGN_OR_RETURN(ir::Module m, golden(name));
  LOOM_ASSIGN_OR_RETURN(codegen::Artifact a, codegen::amdgpu_target().compile(m, arch));
  const std::string path = (std::filesystem::temp_directory_path() /
                            fmt::format("loom_lanes_{}_{}_{}.hsaco", name, arch, ::getpid())).string();
  LOOM_RETURN_IF_ERROR(write_file(path, std::string(a.binary.begin(), a.binary.end())));
  auto r = codegen::run_tool({objdump, "-d", "--mcpu=" + arch, path});
  std::filesystem::remove(path);
  LOOM_RETURN_IF_ERROR(r.status());
  if (r->exit_code != 0) return internal_error("{} failed: {}", objdump, r->output);
  return r->output;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(AmdgpuLanes, CodeObjectsUseDppPermlaneAndDot4) {
  if (!have_toolchain() || !codegen::find_tool({"llvm-objdump-19", "llvm-objdump"}).ok())
    GTEST_SKIP() << "llc-19 / ld.lld-19 / llvm-objdump-19 not found (Debian: llvm-19, lld-19)";
  for (const std::string arch : {"gfx1100", "gfx1151"}) {
    SCOPED_TRACE(arch);
    auto ops = disassemble("warp_ops", arch);
    ASSERT_TRUE(ops.ok()) << ops.status().to_string();
    for (const char* want : {"v_permlanex16_b32", "0xfedcba98", "0xab89efcd", "row_xmask:8", "row_xmask:4",
                             "row_xmask:12", "quad_perm:[2,3,0,1]", "quad_perm:[1,0,3,2]", "quad_perm:[3,2,1,0]",
                             "v_add_f32_dpp", "v_add_nc_u32_dpp", "v_max_i32_dpp", "v_min_i32_dpp"})
      EXPECT_NE(ops->find(want), std::string::npos) << want << " missing:\n" << *ops;
    EXPECT_EQ(count(*ops, "ds_bpermute_b32"), 2u) << "only the shuffles by a run-time mask go through LDS:\n" << *ops;
    auto sum = disassemble("warp_sum", arch);
    ASSERT_TRUE(sum.ok()) << sum.status().to_string();
    EXPECT_EQ(count(*sum, "ds_bpermute"), 0u) << *sum;
    EXPECT_EQ(count(*sum, "v_permlanex16_b32"), 2u) << *sum;
    for (const char* name : {"matvec_i8", "dot4_lanes"}) {
      auto dis = disassemble(name, arch);
      ASSERT_TRUE(dis.ok()) << dis.status().to_string();
      // Signed x signed: the iu8 form with both sign bits (neg_lo) set.
      EXPECT_NE(dis->find("v_dot4_i32_iu8"), std::string::npos) << name << ":\n" << *dis;
      EXPECT_EQ(count(*dis, "v_dot4_i32_iu8"), count(*dis, "neg_lo:[1,1,0]")) << name << ":\n" << *dis;
    }
  }
}

}  // namespace
}  // namespace loom
