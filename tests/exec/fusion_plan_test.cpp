// FusionPlanner's default for the quantizing attention (out_q): on for GPU decode steps of
// models with short attention rows, off with LOOM_FUSE_ATTN=0, and never on the cpu driver
// unless fusions are asked for. Uses a tiny llama model (64-value attention rows).
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "../llm/tiny_model.h"
#include "loom/exec/fusion_plan.h"
#include "loom/llm/model.h"

namespace loom::exec {
namespace {

class EnvVar {
 public:
  EnvVar(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value->c_str(), 1);
    else unsetenv(name);
  }
  ~EnvVar() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

size_t attention_quantized(const llm::Model& m, ir::TargetKind target) {
  const llm::Program p = m.build_program(1, 1);
  FusionPlanner planner(m, target, false);
  auto f = planner.plan(p, 1);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? f->attn_q.size() : 0;
}

TEST(FusionPlan, QuantizingAttentionByDefaultOnShortRowsOnGpus) {
  llm::tiny::TinySpec spec;
  spec.matrix_type = llm::GgmlType::Q4_0;
  const std::string path = llm::tiny::write_tiny(spec, "fusion_plan_tiny_q4_0.gguf");
  auto model = llm::Model::load(path, false);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EnvVar fuse("LOOM_FUSE", std::nullopt);
  {
    EnvVar attn("LOOM_FUSE_ATTN", std::nullopt);
    EXPECT_EQ(attention_quantized(**model, ir::TargetKind::kPtx), static_cast<size_t>(spec.n_layer))
        << "64-value rows: every layer's attention writes the o projection's blocks";
    EXPECT_EQ(attention_quantized(**model, ir::TargetKind::kCpp), 0u) << "no fusions on the cpu driver by default";
  }
  {
    EnvVar attn("LOOM_FUSE_ATTN", "0");
    EXPECT_EQ(attention_quantized(**model, ir::TargetKind::kPtx), 0u);
  }
  {
    EnvVar attn("LOOM_FUSE_ATTN", "1");
    EnvVar on("LOOM_FUSE", "1");
    EXPECT_EQ(attention_quantized(**model, ir::TargetKind::kCpp), static_cast<size_t>(spec.n_layer));
  }
}

}  // namespace
}  // namespace loom::exec
