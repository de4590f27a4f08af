// Loading a text kernel (C++, PTX, CUDA C++) as a module of its own: the one path by which both
// the engine's plan compile (stored kernels) and evolve's evaluator (candidates) turn text into
// launchable HRX kernels, so a kernel the search measured is the kernel the engine runs.
// Loom IR instances are not loaded here: they merge into the caller's module and compile with
// hrx::Module::compile.
#pragma once

#include <string>

#include "loom/base/status.h"
#include "loom/hrx/runtime.h"
#include "loom/store/candidate.h"

namespace loom::store {

// True for the kinds load_text_module takes (cpp, ptx, cuda).
bool is_text_kind(CandKind k);

// cpp: the host compiler (compiled once, cached on disk by a hash of the source) and
// dlopen; ptx: the driver's JIT; cuda: NVRTC, then the driver's JIT. A kind the device cannot run
// (C++ on cuda, PTX on the cpu) is an invalid argument.
Result<hrx::Module> load_text_module(const hrx::Device& dev, const Instance& inst);

// A cpp Instance's source as the host compiler takes it (the launch-dimension struct prepended
// when the text does not define it): feed it to codegen::compile_shared_object.
std::string cpp_source_for_cpu(const Instance& inst);

// CUDA C++ -> PTX through NVRTC (libnvrtc.so loaded with dlopen); unavailable when absent.
Result<std::string> nvrtc_compile(const std::string& source, const std::string& arch);

}  // namespace loom::store
