// Reads the AMDGPU HSA metadata note of a code object: the ELF section headers, the NOTE sections
// in them, the "AMDGPU" note of type NT_AMDGPU_METADATA, and its msgpack map. A small reader of
// our own (see docs/dependencies.md): it knows only what llc writes, and checks every offset.
#include "loom/codegen/amdgpu/code_object_info.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace loom::codegen {
namespace {

constexpr uint32_t kNtAmdgpuMetadata = 32;
constexpr uint32_t kShtNote = 7;
constexpr int kMaxDepth = 16;

// A msgpack value, as far as the metadata uses them: maps, arrays, strings, integers, bools.
struct Msg {
  enum class Kind { kNil, kBool, kInt, kFloat, kStr, kBin, kArray, kMap } kind = Kind::kNil;
  int64_t i = 0;
  double f = 0;
  std::string s;
  // Arrays: items. Maps: keys and items, pairwise (std::vector may hold the incomplete Msg;
  // std::pair may not).
  std::vector<Msg> keys, items;

  const Msg* find(std::string_view key) const {
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i].kind == Kind::kStr && keys[i].s == key) return &items[i];
    return nullptr;
  }
};

class MsgReader {
 public:
  explicit MsgReader(std::span<const uint8_t> d) : d_(d) {}

  Result<Msg> value(int depth = 0) {
    if (depth > kMaxDepth) return data_loss("metadata nests deeper than {} levels", kMaxDepth);
    LOOM_ASSIGN_OR_RETURN(uint64_t tag, uint_be(1));
    Msg m;
    if (tag <= 0x7f) return int_msg(static_cast<int64_t>(tag));
    if (tag >= 0xe0) return int_msg(static_cast<int64_t>(tag) - 256);
    if (tag >= 0x80 && tag <= 0x8f) return map(tag & 0x0f, depth);
    if (tag >= 0x90 && tag <= 0x9f) return array(tag & 0x0f, depth);
    if (tag >= 0xa0 && tag <= 0xbf) return str(tag & 0x1f, Msg::Kind::kStr);
    switch (tag) {
      case 0xc0: return m;
      case 0xc2: case 0xc3: m.kind = Msg::Kind::kBool; m.i = tag == 0xc3; return m;
      case 0xc4: case 0xc5: case 0xc6: {
        LOOM_ASSIGN_OR_RETURN(uint64_t n, uint_be(size_t{1} << (tag - 0xc4)));
        return str(n, Msg::Kind::kBin);
      }
      case 0xca: case 0xcb: return real(tag == 0xca ? 4 : 8);
      case 0xcc: case 0xcd: case 0xce: case 0xcf: {
        LOOM_ASSIGN_OR_RETURN(uint64_t v, uint_be(size_t{1} << (tag - 0xcc)));
        if (v > static_cast<uint64_t>(INT64_MAX)) return data_loss("metadata integer {} out of range", v);
        return int_msg(static_cast<int64_t>(v));
      }
      case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        const size_t n = size_t{1} << (tag - 0xd0);
        LOOM_ASSIGN_OR_RETURN(uint64_t v, uint_be(n));
        if (n < 8 && (v >> (8 * n - 1))) v |= ~uint64_t{0} << (8 * n);  // sign-extend
        return int_msg(static_cast<int64_t>(v));
      }
      case 0xd9: case 0xda: case 0xdb: {
        LOOM_ASSIGN_OR_RETURN(uint64_t n, uint_be(size_t{1} << (tag - 0xd9)));
        return str(n, Msg::Kind::kStr);
      }
      case 0xdc: case 0xdd: {
        LOOM_ASSIGN_OR_RETURN(uint64_t n, uint_be(tag == 0xdc ? 2 : 4));
        return array(n, depth);
      }
      case 0xde: case 0xdf: {
        LOOM_ASSIGN_OR_RETURN(uint64_t n, uint_be(tag == 0xde ? 2 : 4));
        return map(n, depth);
      }
      default: return data_loss("metadata has msgpack type 0x{:02x}, which the reader does not take", tag);
    }
  }

  size_t pos() const { return pos_; }

 private:
  static Msg int_msg(int64_t v) {
    Msg m;
    m.kind = Msg::Kind::kInt;
    m.i = v;
    return m;
  }
  Result<uint64_t> uint_be(size_t n) {
    if (n > d_.size() - pos_) return data_loss("metadata truncated at byte {}", pos_);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v = v << 8 | d_[pos_ + i];
    pos_ += n;
    return v;
  }
  Result<Msg> str(uint64_t n, Msg::Kind kind) {
    if (n > d_.size() - pos_) return data_loss("metadata string of {} bytes runs past the note", n);
    Msg m;
    m.kind = kind;
    m.s.assign(reinterpret_cast<const char*>(d_.data() + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return m;
  }
  Result<Msg> real(size_t n) {
    LOOM_ASSIGN_OR_RETURN(uint64_t bits, uint_be(n));
    Msg m;
    m.kind = Msg::Kind::kFloat;
    if (n == 4) {
      float x;
      const auto b = static_cast<uint32_t>(bits);
      std::memcpy(&x, &b, 4);
      m.f = x;
    } else {
      std::memcpy(&m.f, &bits, 8);
    }
    return m;
  }
  // Every element takes at least one byte, so a count above the bytes left is corrupt (and
  // would otherwise reserve unbounded memory).
  Status check_count(uint64_t n) const {
    if (n > d_.size() - pos_) return data_loss("metadata claims {} elements with {} bytes left", n, d_.size() - pos_);
    return Status();
  }
  Result<Msg> array(uint64_t n, int depth) {
    LOOM_RETURN_IF_ERROR(check_count(n));
    Msg m;
    m.kind = Msg::Kind::kArray;
    m.items.reserve(static_cast<size_t>(n));
    for (uint64_t i = 0; i < n; ++i) {
      LOOM_ASSIGN_OR_RETURN(Msg v, value(depth + 1));
      m.items.push_back(std::move(v));
    }
    return m;
  }
  Result<Msg> map(uint64_t n, int depth) {
    LOOM_RETURN_IF_ERROR(check_count(n));
    Msg m;
    m.kind = Msg::Kind::kMap;
    m.keys.reserve(static_cast<size_t>(n));
    m.items.reserve(static_cast<size_t>(n));
    for (uint64_t i = 0; i < n; ++i) {
      LOOM_ASSIGN_OR_RETURN(Msg k, value(depth + 1));
      LOOM_ASSIGN_OR_RETURN(Msg v, value(depth + 1));
      m.keys.push_back(std::move(k));
      m.items.push_back(std::move(v));
    }
    return m;
  }

  std::span<const uint8_t> d_;
  size_t pos_ = 0;
};

uint64_t le(std::span<const uint8_t> d, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = v << 8 | d[at + i];
  return v;
}

bool fits(std::span<const uint8_t> d, uint64_t at, uint64_t n) { return at <= d.size() && n <= d.size() - at; }

// The descriptor of the NT_AMDGPU_METADATA note, searched in every SHT_NOTE section.
Result<std::span<const uint8_t>> metadata_note(std::span<const uint8_t> elf) {
  if (elf.size() < 64 || std::memcmp(elf.data(), "\x7f" "ELF", 4) != 0)
    return data_loss("not an ELF file ({} bytes)", elf.size());
  if (elf[4] != 2 || elf[5] != 1) return data_loss("not a 64-bit little-endian ELF (class {}, data {})", elf[4], elf[5]);
  const uint64_t shoff = le(elf, 0x28, 8), shentsize = le(elf, 0x3a, 2), shnum = le(elf, 0x3c, 2);
  if (shentsize < 64 || !fits(elf, shoff, shentsize * shnum)) return data_loss("ELF section headers out of bounds");
  for (uint64_t s = 0; s < shnum; ++s) {
    const size_t h = static_cast<size_t>(shoff + s * shentsize);
    if (le(elf, h + 4, 4) != kShtNote) continue;
    const uint64_t off = le(elf, h + 0x18, 8), size = le(elf, h + 0x20, 8);
    if (!fits(elf, off, size)) return data_loss("ELF note section {} out of bounds", s);
    uint64_t p = off;
    const uint64_t end = off + size;
    while (p <= end && end - p >= 12) {  // padding may step past the end
      const uint64_t namesz = le(elf, static_cast<size_t>(p), 4), descsz = le(elf, static_cast<size_t>(p + 4), 4);
      const uint64_t type = le(elf, static_cast<size_t>(p + 8), 4);
      const uint64_t name_at = p + 12, desc_at = name_at + ((namesz + 3) & ~uint64_t{3});
      if (desc_at > end || descsz > end - desc_at) return data_loss("ELF note runs past its section");
      const std::string_view name(reinterpret_cast<const char*>(elf.data() + name_at), static_cast<size_t>(namesz));
      if (type == kNtAmdgpuMetadata && (name == std::string_view("AMDGPU\0", 7) || name == "AMDGPU"))
        return elf.subspan(static_cast<size_t>(desc_at), static_cast<size_t>(descsz));
      p = desc_at + ((descsz + 3) & ~uint64_t{3});
    }
  }
  return data_loss("code object has no AMDGPU metadata note");
}

int64_t int_field(const Msg& kernel, std::string_view key) {
  const Msg* v = kernel.find(key);
  return v && (v->kind == Msg::Kind::kInt || v->kind == Msg::Kind::kBool) ? v->i : 0;
}

Result<AmdgpuKernelInfo> kernel_info(const Msg& k) {
  if (k.kind != Msg::Kind::kMap) return data_loss("an amdhsa.kernels entry is not a map");
  AmdgpuKernelInfo info;
  const Msg* name = k.find(".name");
  if (!name || name->kind != Msg::Kind::kStr) return data_loss("a kernel in the metadata has no .name");
  info.name = name->s;
  for (const char* required : {".vgpr_count", ".sgpr_count", ".group_segment_fixed_size",
                               ".private_segment_fixed_size", ".wavefront_size"})
    if (!k.find(required)) return data_loss("kernel {} has no {} in its metadata", info.name, required);
  info.vgpr_count = int_field(k, ".vgpr_count");
  info.sgpr_count = int_field(k, ".sgpr_count");
  info.lds_bytes = int_field(k, ".group_segment_fixed_size");
  info.scratch_bytes = int_field(k, ".private_segment_fixed_size");
  info.vgpr_spill_count = int_field(k, ".vgpr_spill_count");
  info.sgpr_spill_count = int_field(k, ".sgpr_spill_count");
  info.wavefront_size = int_field(k, ".wavefront_size");
  info.max_flat_workgroup_size = int_field(k, ".max_flat_workgroup_size");
  info.uses_dynamic_stack = int_field(k, ".uses_dynamic_stack") != 0;
  info.kernarg_segment_size = int_field(k, ".kernarg_segment_size");
  info.kernarg_segment_align = int_field(k, ".kernarg_segment_align");
  if (const Msg* args = k.find(".args"); args && args->kind == Msg::Kind::kArray) {
    for (const Msg& a : args->items) {
      const Msg* kind = a.kind == Msg::Kind::kMap ? a.find(".value_kind") : nullptr;
      if (!kind || kind->kind != Msg::Kind::kStr || !a.find(".offset") || !a.find(".size"))
        return data_loss("kernel {}: an .args entry lacks .offset, .size or .value_kind", info.name);
      const int64_t offset = int_field(a, ".offset"), size = int_field(a, ".size");
      if (offset < 0 || size < 0 || offset > info.kernarg_segment_size || size > info.kernarg_segment_size - offset)
        return data_loss("kernel {}: argument at offset {} of {} bytes lies outside the {}-byte kernarg segment",
                         info.name, offset, size, info.kernarg_segment_size);
      info.args.push_back(AmdgpuKernelArg{offset, size, kind->s});
    }
  }
  return info;
}

}  // namespace

Result<AmdgpuCodeObjectInfo> read_amdgpu_code_object(std::span<const uint8_t> elf) {
  LOOM_ASSIGN_OR_RETURN(std::span<const uint8_t> note, metadata_note(elf));
  MsgReader r(note);
  LOOM_ASSIGN_OR_RETURN(Msg root, r.value());
  if (root.kind != Msg::Kind::kMap) return data_loss("AMDGPU metadata is not a map");
  AmdgpuCodeObjectInfo out;
  if (const Msg* t = root.find("amdhsa.target"); t && t->kind == Msg::Kind::kStr) out.target = t->s;
  const Msg* kernels = root.find("amdhsa.kernels");
  if (!kernels || kernels->kind != Msg::Kind::kArray) return data_loss("AMDGPU metadata has no amdhsa.kernels list");
  for (const Msg& k : kernels->items) {
    LOOM_ASSIGN_OR_RETURN(AmdgpuKernelInfo info, kernel_info(k));
    out.kernels.push_back(std::move(info));
  }
  return out;
}

Result<AmdgpuArchLimits> amdgpu_arch_limits(std::string_view arch) {
  AmdgpuArchLimits l;
  // The large (1.5x) register file of the big RDNA3 dies and of Strix Halo; llc's own occupancy
  // comment agrees (a 131-VGPR kernel: 10 waves on gfx1100/gfx1151, 8 on gfx1102/gfx1150).
  if (arch == "gfx1100" || arch == "gfx1101" || arch == "gfx1151") {
    l.vgprs_per_simd = 1536;
    l.vgpr_granule = 24;
  } else if (arch == "gfx1102" || arch == "gfx1103" || arch == "gfx1150") {
    l.vgprs_per_simd = 1024;
    l.vgpr_granule = 16;
  } else {
    return unimplemented("no occupancy limits for AMDGPU arch '{}' (gfx1100-gfx1103, gfx1150, gfx1151)", arch);
  }
  return l;
}

AmdgpuOccupancy amdgpu_occupancy(const AmdgpuKernelInfo& k, const AmdgpuArchLimits& l, int block_threads) {
  AmdgpuOccupancy o{l.max_waves_per_simd, "-"};
  if (l.vgpr_granule > 0 && k.vgpr_count > 0) {
    const int64_t regs = (k.vgpr_count + l.vgpr_granule - 1) / l.vgpr_granule * l.vgpr_granule;
    const int by_vgpr = static_cast<int>(std::max<int64_t>(1, l.vgprs_per_simd / regs));
    if (by_vgpr < o.waves_per_simd) o = {by_vgpr, "vgpr"};
  }
  if (k.lds_bytes > 0 && block_threads > 0) {
    // Whole workgroups share the WGP's LDS; their waves spread over its SIMDs.
    const int64_t groups = l.lds_per_wgp / k.lds_bytes;
    const int64_t waves_per_group = (block_threads + 31) / 32;
    const int by_lds = static_cast<int>(std::min<int64_t>(l.max_waves_per_simd, groups * waves_per_group / l.simds_per_wgp));
    if (by_lds < o.waves_per_simd) o = {by_lds, "lds"};
  }
  return o;
}

}  // namespace loom::codegen
