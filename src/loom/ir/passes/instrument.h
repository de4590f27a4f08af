// Region instrumentation: cycle counters (`clock`) around a kernel's regions, so that a kernel
// shows where its time goes without a profiler (evolve's evaluator reports the shares).
//
// Regions, in the block that holds the kernel's first outermost `for` (the main loop):
//   loads      from the block's start to the loop (setup, first loads, address math)
//   main loop  the loop
//   reduction  from the loop's end to the first store after it (combining partial results)
//   stores     from that store to the block's end
// A kernel without a loop has loads (up to the first store) and stores only. The counters read
// at the boundaries are subtracted (mod 2^32) and thread 0 of each block adds its deltas into a
// new i32 buffer parameter: prof[block_linear * kInstrumentRegions + region], where
// block_linear = block_id.x + grid_dim.x * (block_id.y + grid_dim.y * block_id.z). The buffer
// must be zeroed before the first launch; launches accumulate. The counters are not serializing:
// shares are approximate (the compiler and the core may move work across a boundary).
#pragma once

#include <cstddef>
#include <string_view>

#include "loom/base/status.h"
#include "loom/ir/ir.h"

namespace loom::ir {

inline constexpr int kInstrumentRegions = 4;
std::string_view instrument_region_name(int region);  // "loads", "main loop", "reduction", "stores"

struct InstrumentInfo {
  bool has_loop = false;  // false: only loads and stores are measured
  size_t prof_param = 0;  // index of the added parameter
};

// Instruments `kernel` (verified) in place; the buffer parameter `%loom_prof: ptr<global, i32>`
// is inserted at `param_index` (after the pointer parameters: launches pass scalars last).
// Fails (and leaves the kernel unchanged) when the kernel has no store.
Result<InstrumentInfo> instrument_regions(Kernel& kernel, size_t param_index);

}  // namespace loom::ir
