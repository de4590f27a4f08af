// The engine on HRX: a llm::Backend that runs each step Program as op-library kernels (Loom IR,
// compiled for the device) launched through HRX, on the cpu driver or a CUDA GPU.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/exec/lowering_options.h"
#include "loom/model/backend.h"
#include "loom/model/program.h"

namespace loom::exec {

struct HrxBackendOptions {
  std::string device = "cpu";  // an HRX device spec: "cpu", "cuda", "cuda:N"
  int n_threads = 0;           // cpu driver worker threads (0: the driver's default)
  bool use_graphs = true;      // replay each step shape as a captured graph after its first run
  // The fusion settings; unset: LOOM_FUSE and LOOM_DECODE_ATTENTION_MAX (base/options.h).
  std::optional<FuseOptions> fuse;
};

// A backend on an HRX device. The device is opened here; the model's weights are uploaded and
// the KV cache allocated by init(). Kernels are generated, compiled and loaded per step shape
// (one module per shape, compiled once per machine: the cpp target's disk cache and the CUDA
// driver's JIT), with n_tokens padded up to a power of two so that few shapes exist; padding
// tokens write a scratch sequence slot of the KV cache that no real sequence reads.
Result<std::unique_ptr<llm::Backend>> make_hrx_backend(const HrxBackendOptions& options);

// The engine's default device: $LOOM_DEVICE if set, else the first CUDA device when one is
// present, else "cpu-ref" (the reference CPU ops).
std::string default_device();

// The backend for a --device flag: "cpu-ref" (the reference ops), or an HRX device spec;
// "" means default_device(). n_threads sizes the cpu thread pools. kv: the KV cache's row types
// (other than F16 on cpu-ref only: kUnimplemented elsewhere).
Result<std::unique_ptr<llm::Backend>> make_backend(std::string_view device, int n_threads, llm::KvCacheTypes kv = {});

// The Program a device runs for a step of n_tokens tokens with n_outputs rows of logits: the
// model's own for "cpu-ref", fused for an HRX device's target (PTX for cuda, cpp for cpu). Needs
// no device, so `loom run --dump-program --device cuda` works on a machine without one.
Result<llm::Program> device_program(const llm::Model& model, std::string_view device, int64_t n_tokens,
                                    int64_t n_outputs);

// Per-op profile (LOOM_PROFILE=1, or `loom bench --profile`): HRX backends then run every step
// eagerly with device events around each launch and add the time, launch count and the op's
// cost (compulsory bytes and FLOPs, from the op library) to a process-wide table, per step kind.
struct OpProfile {
  std::string step;   // "decode" (1 token) or "prompt"
  std::string op;     // op-library name: "matvec_gpu", "attention_decode" ...
  int64_t launches = 0;
  double seconds = 0, bytes = 0, flops = 0;
};
bool profiling_enabled();    // set_profiling's value, else $LOOM_PROFILE
void set_profiling(bool on);  // for backends made afterwards (a backend reads it once)
std::vector<OpProfile> profile_snapshot();  // sorted by step kind, then time (largest first)
int64_t profile_steps(std::string_view step);  // steps of that kind profiled
void profile_reset();

}  // namespace loom::exec
