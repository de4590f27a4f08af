// Internals of the PTX emitter shared by ptx_emitter.cpp (structure, memory, control flow) and
// ptx_lanes.cpp (per-lane arithmetic, conversions, bit casts).
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "loom/base/status.h"
#include "loom/ir/ir.h"

namespace loom::codegen::ptx {

// Register classes: i1 -> .pred; 8/16-bit -> .b16; 32-bit -> .b32; 64-bit and pointers -> .b64.
enum class RC { kPred, kB16, kB32, kB64 };
RC rc_of(ir::Scalar s);
RC rc_of(ir::Type t);
std::string_view type_suffix(ir::Scalar s);   // s8, u8, ..., f16, bf16, f32, f64
std::string_view arith_suffix(ir::Scalar s);  // as type_suffix, but 8-bit values compute as 16-bit
std::string_view bits_suffix(RC rc);          // pred, b16, b32, b64

// The module-scope symbol of a block's dynamic shared memory.
inline constexpr std::string_view kDynamicShared = "loom_dynamic_smem";

class KernelEmitter {
 public:
  explicit KernelEmitter(const ir::Kernel& k)
      : k_(k), namer_(k), regs_(k.num_values()), uses_(k.num_values()), home_(k.num_values()),
        dynamic_shared_(ir::dynamic_shared_bytes(k) > 0) {
    index(k.body);
  }
  // The .entry text of the kernel.
  Result<std::string> run();
  // An instruction placed before the kernel's own code; call before run().
  void prologue(const std::string& instruction) { line(instruction); }

 private:
  // structure (ptx_emitter.cpp)
  std::string new_reg(RC rc);
  void line(const std::string& s);
  std::string label(std::string_view what);
  const std::vector<std::string>& define(const ir::Value* v);
  const std::string& reg(const ir::Value* v) const { return regs_[v->id][0]; }
  void copy(const std::string& dst, const std::string& src, RC rc);
  void normalize(const std::string& reg, ir::Scalar s);
  std::pair<std::string, int64_t> address_parts(const ir::Value* ptr, const ir::Value* index, int64_t extra);
  std::string address(const ir::Value* ptr, const ir::Value* index, int64_t extra);
  static std::string_view space(const ir::Value* ptr, bool load);
  static int chunk_lanes(ir::Type t, int64_t align);
  static bool half_words(ir::Type t, int64_t align);
  void constant(const ir::Inst& in);
  void load(const ir::Inst& in);
  void store(const ir::Inst& in);
  Status for_loop(const ir::Inst& in);
  Status if_else(const ir::Inst& in);
  Status inst(const ir::Inst& in);
  Status block(const ir::Block& b);
  void index(const ir::Block& b);  // fills uses_ and home_

  // lanes (ptx_lanes.cpp)
  Status lane(const ir::Inst& in, int l, const std::string& d);
  bool packed_half2(const ir::Inst& in);
  Status arith(const ir::Inst& in, ir::Scalar s, const std::vector<std::string>& a, const std::string& d);
  void convert(ir::Scalar from, ir::Scalar to, const std::string& a, const std::string& d);
  void select(RC rc, const std::string& c, const std::string& a, const std::string& b, const std::string& d);
  std::string widen_half(const std::string& reg, ir::Scalar s);
  void narrow_half(const std::string& f32, ir::Scalar s, const std::string& d);
  void bitcast(const ir::Inst& in);
  std::vector<std::string> to_words(const ir::Value* v);
  void from_words(const std::vector<std::string>& words, ir::Type t, const std::vector<std::string>& d);

  const ir::Kernel& k_;
  ir::Namer namer_;
  std::vector<std::vector<std::string>> regs_;
  std::array<int, 4> counts_{};
  // Per value: how many operands name it, and the block it is defined in (region arguments: the
  // region). A wgmma whose accumulators die there reuses their registers (see Op::kWgmma).
  std::vector<int> uses_;
  std::vector<const ir::Block*> home_;
  const ir::Block* cur_block_ = nullptr;
  int labels_ = 0;
  int allocs_ = 0;
  // Above ir::kStaticSharedBytes the shared buffers are slices of the block's dynamic shared
  // memory (kDynamicShared, declared once per module); the next slice starts here.
  bool dynamic_shared_ = false;
  int64_t shared_offset_ = 0;
  std::string body_;
  std::string decls_;
};

}  // namespace loom::codegen::ptx
