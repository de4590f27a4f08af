// The kernels that ship with Loom: evolve's winners for common device architectures, committed as
// data (data/kernels/*.json, one file per architecture key) and compiled into the binary, so the
// engine uses them with no search on the user's machine. A user's own store (store.h) wins over
// them; LOOM_NO_SHIPPED_KERNELS=1 (or LOOM_NO_KERNEL_STORE=1) turns them off.
//
// Architecture keys are coarser than the store's, since the searching machine is not the user's:
// "cpu:x86-64-v3" (the highest x86-64 level the CPU has, or the one LOOM_CPU_ARCH selects; the
// kernels are recompiled from their schedule or text on the user's machine), "cuda:sm_90",
// "amdgpu:gfx1100". A file's kernels apply only under its own key.
//
// File format (what `loom evolve ship` writes):
//   {"format": 1, "device_arch": "cpu:x86-64-v3", "searched_on": "cpu:AMD EPYC ...",
//    "commit": "...", "date": "...", "command": "loom evolve ship ...",
//    "kernels": [ {op, shape, shape_class, kind, body, speedup, median_us, baseline_us, job,
//                  candidate, seq, ...}, ... ]}
// (a kernel entry is what `loom kernels export` writes).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/store/store.h"

namespace loom::store {

struct ShippedFile {
  std::string name;         // "cpu-x86-64-v3.json"
  std::string device_arch;  // its key
  std::string searched_on;  // the store key of the machine the searches ran on
  std::string commit, date, command;
  std::vector<StoredKernel> kernels;  // device_arch = the file's key
};

// Parses one shipped file's text (`name` for messages). Errors: data_loss naming the entry.
Result<ShippedFile> parse_shipped(std::string_view name, std::string_view text);
// The text of one shipped file, the inverse of parse_shipped (kernels sorted by op and shape).
std::string shipped_json(const ShippedFile& f);

// The files compiled into this binary, parsed on first use (a file that does not parse is an
// error on every call; the build's test catches it before it ships).
Result<const std::vector<ShippedFile>*> shipped_files();

// The key shipped kernels are filed under for a device (see above).
std::string shipped_arch_of(const hrx::DeviceProps& p);

// The shipped kernel for op/shape under `arch`: exact shapes only. (The user's store also
// applies a winner to other shapes of its class; a shipped search that found nothing better than
// the default at a shape must not get another shape's winner there.) Its `origin` says which
// file. nullopt when none, or when LOOM_NO_SHIPPED_KERNELS /
// LOOM_NO_KERNEL_STORE is set.
Result<std::optional<StoredKernel>> shipped_kernel(std::string_view op, const kernels::Shape& shape,
                                                   std::string_view arch);
// The same lookup in given files (tests).
std::optional<StoredKernel> find_shipped(const std::vector<ShippedFile>& files, std::string_view op,
                                         const kernels::Shape& shape, std::string_view arch);

}  // namespace loom::store
