// `loom model synth`: write a GGUF with random weights in a real model's shapes, for benchmarks
// on machines without model files.
#include <cstdio>

#include "cli.h"
#include "loom/model/synth.h"

namespace loom::cli {
namespace {

LOOM_COMMAND(kModel, "model", "Model utilities (synth: random-weight GGUF in real shapes)", [](CLI::App& sub) -> Action {
  sub.require_subcommand(1);
  CLI::App* synth = sub.add_subcommand("synth", "Write a GGUF with random weights in a known model's shapes");
  auto opts = std::make_shared<llm::SynthOptions>();
  auto out = std::make_shared<std::string>();
  std::string shapes, archs;
  for (const auto& s : llm::synth_shapes())
    shapes += (shapes.empty() ? "" : " | ") + s.name + (s.arch.empty() ? "" : " (" + s.arch + ")");
  for (const auto& a : llm::synth_architectures()) archs += (archs.empty() ? "" : " | ") + a;
  synth->add_option("--arch", opts->arch, archs + " (default: the shape's own; mistral is written as llama, as "
                                         "llama.cpp's converter writes Mistral 7B)");
  synth->add_option("--shape", opts->shape, shapes)->capture_default_str();
  synth->add_option("--quant", opts->quant, "q4_0 | q4_k (Q4_K_M-like mix) | q5_0 | q5_1 | q8_0 | q2_k | q3_k | iq4_nl | iq4_xs (output Q6_K) | f16 | bf16")
      ->capture_default_str();
  synth->add_option("--seed", opts->seed, "random seed")->capture_default_str();
  synth->add_option("-o,--output", *out, "output GGUF file")->required();
  return [=] {
    auto bytes = llm::write_synthetic_model(*opts, *out);
    if (!bytes.ok()) return report(bytes.status());
    std::fprintf(stderr, "wrote %s (%.2f GiB)\n", out->c_str(), static_cast<double>(*bytes) / (1ull << 30));
    return 0;
  };
});

}  // namespace
}  // namespace loom::cli
