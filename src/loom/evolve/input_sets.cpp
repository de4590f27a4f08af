// evolve's input sets (see input_sets.h): the pool's file format, and the phase clock.
#include "loom/evolve/input_sets.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "loom/base/hash.h"
#include "loom/kernels/op_util.h"

namespace loom::evolve {
namespace {

using kernels::ArgRole;
using kernels::ArgSpec;
using kernels::HostArg;
using kernels::Shape;


// A pooled set's file: a header naming op, shape and seed (checked on load: the file name is
// only a hash), then every argument's input and reference bytes, each as a u64 size and bytes.
std::string set_header(const kernels::OpSpec& op, const Shape& shape, uint64_t seed, bool specials) {
  return fmt::format("loom-evolve-input-set 2 blocks{}\n{}\n{}\n{}\n", specials ? " specials" : "", op.name(),
                     shape.key(), seed);
}

bool read_set(const std::string& path, const std::string& header, size_t nargs, InputSet& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::string head(header.size(), '\0');
  if (!f.read(head.data(), static_cast<std::streamsize>(head.size())) || head != header) return false;
  out.in.assign(nargs, HostArg{});
  out.ref.assign(nargs, HostArg{});
  for (std::vector<HostArg>* v : {&out.in, &out.ref})
    for (HostArg& a : *v) {
      uint64_t n = 0;
      if (!f.read(reinterpret_cast<char*>(&n), 8) || n > (uint64_t{1} << 36)) return false;
      a.bytes.resize(static_cast<size_t>(n));
      if (n && !f.read(reinterpret_cast<char*>(a.bytes.data()), static_cast<std::streamsize>(n))) return false;
    }
  return true;
}

// Written to a temporary name and renamed: parallel workers never read half a file. A failed
// write only costs the next evaluation the time to make the set again.
void write_set(const std::string& path, const std::string& header, const InputSet& s) {
  const std::string tmp = fmt::format("{}.tmp{}", path, getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return;
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const std::vector<HostArg>* v : {&s.in, &s.ref})
      for (const HostArg& a : *v) {
        const uint64_t n = a.bytes.size();
        f.write(reinterpret_cast<const char*>(&n), 8);
        f.write(reinterpret_cast<const char*>(a.bytes.data()), static_cast<std::streamsize>(n));
      }
    if (!f) {
      f.close();
      unlink(tmp.c_str());
      return;
    }
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) unlink(tmp.c_str());
}

}  // namespace

void Phases::add(const std::string& name, double s) {
  for (auto& [n, v] : v_)
    if (n == name) {
      v += s;
      return;
    }
  v_.emplace_back(name, s);
}

std::string Phases::str() const {
  std::string out;
  for (const auto& [n, v] : v_) out += fmt::format("{}{} {:.2f}s", out.empty() ? "" : ", ", n, v);
  if (made || pooled) out += fmt::format(" (input sets: {} made, {} from the pool)", made, pooled);
  if (timing) out += fmt::format(" (timing: {} input sets)", timing);
  return out;
}

Result<InputSet> input_set(const kernels::OpSpec& op, const Shape& shape, const std::vector<ArgSpec>& specs,
                           uint64_t seed, bool pooled, const EvalOptions& opt, Phases& ph, bool specials,
                           bool reference) {
  std::string path, header;
  if (pooled && !opt.pool_dir.empty()) {
    header = set_header(op, shape, seed, specials);
    path = fmt::format("{}/{:016x}.set", opt.pool_dir, key_hash64(header));
    Lap lap(ph, "inputs");
    InputSet s;
    if (read_set(path, header, specs.size(), s)) {
      ++ph.pooled;
      if (!reference) s.ref.clear();
      return s;
    }
    if (!reference) path.clear();  // inputs only: nothing complete to keep in the pool
  }
  InputSet s;
  s.in.resize(specs.size());
  {
    Lap lap(ph, "inputs");
    std::mt19937_64 rng(seed);
    // Quantized weights as random valid block bytes, not quantized random floats: the K
    // quantizers search scales (~5 s for a 14336 x 4096 Q4_K matrix on the build machine).
    kernels::ScopedFastRandomRows fast;
    op.fill_inputs(shape, rng, s.in);
    if (specials) kernels::mix_special_values(op, shape, specs, rng, s.in);
  }
  if (reference) {
    Lap lap(ph, "reference");
    s.ref = s.in;
    LOOM_RETURN_IF_ERROR(op.reference(shape, s.ref).with_context("reference"));
    for (size_t i = 0; i < specs.size(); ++i)  // compare() never reads a pure input's reference copy
      if (specs[i].role == ArgRole::kInput) s.ref[i].bytes = {};
  }
  ++ph.made;
  if (!path.empty()) {
    Lap lap(ph, "inputs");
    write_set(path, header, s);
  }
  return s;
}

}  // namespace loom::evolve
