// The HSA runtime (ROCr), loaded at run time with dlopen: no link-time dependency on ROCm, so one
// `loom` binary runs on machines with and without an AMD GPU. The function types come from the
// HSA headers (Debian's libhsa-runtime-dev), so the table is checked against the real
// declarations; a build without those headers still links and reports why it has no AMD driver.
// Thread-safe: the table is loaded (and hsa_init called) once, and immutable afterwards.
#pragma once

#include "loom/base/status.h"

#if __has_include(<hsa/hsa.h>)
#define LOOM_HRX_HAVE_HSA 1
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#else
#define LOOM_HRX_HAVE_HSA 0
#endif

namespace loom::hrx::hsa {

// Why there is no usable AMD GPU stack, or OK: "no AMD GPU: ..." naming the cause: this build
// has no HSA headers, the runtime library is missing (LOOM_HSA_RUNTIME, else
// libhsa-runtime64.so.1), it lacks entry points, /dev/kfd is absent or closed to this process,
// or hsa_init failed. (A runtime without GPU agents is OK here; the driver reports 0 devices.)
Status runtime_status();

#if LOOM_HRX_HAVE_HSA
#define LOOM_HSA_FUNCTIONS(X)                                                                          \
  X(hsa_init) X(hsa_status_string) X(hsa_system_get_info) X(hsa_iterate_agents) X(hsa_agent_get_info) \
  X(hsa_amd_agent_iterate_memory_pools) X(hsa_amd_memory_pool_get_info) X(hsa_amd_memory_pool_allocate) \
  X(hsa_amd_memory_pool_free) X(hsa_amd_agents_allow_access) X(hsa_amd_memory_async_copy)              \
  X(hsa_signal_create) X(hsa_signal_destroy) X(hsa_signal_load_scacquire) X(hsa_signal_store_relaxed)  \
  X(hsa_signal_store_screlease) X(hsa_signal_wait_scacquire) X(hsa_queue_create) X(hsa_queue_destroy)  \
  X(hsa_queue_add_write_index_scacq_screl) X(hsa_queue_load_read_index_scacquire)                       \
  X(hsa_amd_profiling_set_profiler_enabled) X(hsa_amd_profiling_get_dispatch_time)                      \
  X(hsa_code_object_reader_create_from_memory) X(hsa_code_object_reader_destroy)                        \
  X(hsa_executable_create_alt) X(hsa_executable_load_agent_code_object) X(hsa_executable_freeze)        \
  X(hsa_executable_destroy) X(hsa_executable_get_symbol_by_name) X(hsa_executable_symbol_get_info)

struct Api {
#define LOOM_HSA_FIELD(f) decltype(&::f) f = nullptr;
  LOOM_HSA_FUNCTIONS(LOOM_HSA_FIELD)
#undef LOOM_HSA_FIELD
};

// The loaded table after a successful hsa_init, or runtime_status()'s error.
Result<const Api*> api();

// Status for an HSA result: OK, or an error naming the call and the runtime's own text. The code
// follows the cause: out of resources -> kResourceExhausted, invalid argument / code object /
// ISA -> kInvalidArgument, invalid symbol name -> kNotFound, anything else -> kInternal.
Status check(hsa_status_t r, const char* what);
#endif

}  // namespace loom::hrx::hsa
