// Where a model-running command (run, chat, bench, serve) puts the model: --device, and the
// llama.cpp habit -ngl / --n-gpu-layers / --gpu-layers, read as "on the CPU" (0) or "on the
// GPU" (> 0), since Loom places the whole model on one device.
#pragma once

#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "loom/exec/hrx_backend.h"
#include "loom/hrx/runtime.h"
#include "option_flags.h"

namespace loom::cli {

struct DeviceFlags {
  std::string device;  // "" = exec::default_device(); "cpu-ref": reference ops; cpu/cuda[:N]: HRX kernels
  std::string n_gpu_layers;  // -ngl as given: "" (not given), "auto", "all" or a layer count

  // The device the command uses: --device when given; else -ngl 0: the default device when it
  // is a CPU one, else cpu-ref (Loom's default CPU path); -ngl > 0: the first CUDA GPU, or the
  // CPU default with a note when there is none; no -ngl: "" (exec::default_device()).
  std::string resolve() const {
    if (!device.empty() || n_gpu_layers.empty() || n_gpu_layers == "auto") return device;
    const std::string def = exec::default_device();
    const bool def_is_gpu = def.rfind("cuda", 0) == 0;
    if (n_gpu_layers != "all" && std::stoll(n_gpu_layers) == 0) return def_is_gpu ? "cpu-ref" : def;
    if (def_is_gpu) return def;
    for (const hrx::Device& d : hrx::Device::enumerate())
      if (d.props().spec.rfind("cuda", 0) == 0) return d.props().spec;
    std::fprintf(stderr, "loom: -ngl %s: no GPU found; the model runs on the CPU (%s)\n", n_gpu_layers.c_str(),
                 def.c_str());
    return def;
  }
};

inline void add_device_flags(CLI::App& app, DeviceFlags& f) {
  bind_option(app.add_option("--device", f.device, "cpu-ref (reference ops) | cpu | cuda[:N] | amdgpu[:N] (op-library kernels through HRX; amdgpu never run on hardware yet); default: $LOOM_DEVICE, else cuda:0 when present, else cpu-ref")
                  ->check([](const std::string& d) {
                    return d.empty() || d == "cpu" || d == "cpu-ref" || d == "cuda" || d.rfind("cuda:", 0) == 0 ||
                                   d == "amdgpu" || d.rfind("amdgpu:", 0) == 0
                               ? std::string()
                               : "expected cpu, cpu-ref, cuda, cuda:N, amdgpu or amdgpu:N";
                  }),
              opt::Opt::kDevice);
  // CLI11 takes one letter after a single dash: main() rewrites "-ngl" to "--n-gpu-layers".
  app.add_option("--n-gpu-layers,--gpu-layers", f.n_gpu_layers,
                 "-ngl N as llama.cpp users type it, read as a placement (Loom puts the whole model on one "
                 "device): 0 = the CPU (cpu-ref), N > 0 or 'all' = the first GPU if there is one, 'auto' = the "
                 "default; --device wins when both are given")
      ->check([](const std::string& v) {
        if (v == "auto" || v == "all") return std::string();
        if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
          return std::string("expected a layer count >= 0, 'all' or 'auto' (-ngl N)");
        return std::string();
      });
}

}  // namespace loom::cli
