// The PTX emitter's output depends only on the module, the arch and PtxOptions.
#include <string>

#include <gtest/gtest.h>

#include "ir_test_util.h"
#include "loom/codegen/ptx/ptx_emitter.h"

namespace loom::test {
namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(PtxOptions, LaunchDependentsIsAnEmitterChoice) {
  auto m = load_golden("vector_add");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto with = codegen::emit_ptx(*m, "sm_90");
  codegen::PtxOptions off;
  off.launch_dependents = false;
  auto without = codegen::emit_ptx(*m, "sm_90", off);
  auto sm80 = codegen::emit_ptx(*m, "sm_80");
  ASSERT_TRUE(with.ok() && without.ok() && sm80.ok());
  EXPECT_EQ(count(*with, "griddepcontrol.wait;"), count(*with, "griddepcontrol.launch_dependents;"));
  EXPECT_GT(count(*with, "griddepcontrol.launch_dependents;"), 0);
  EXPECT_EQ(count(*without, "griddepcontrol.wait;"), count(*with, "griddepcontrol.wait;"));
  EXPECT_EQ(count(*without, "griddepcontrol.launch_dependents;"), 0);
  EXPECT_EQ(count(*sm80, "griddepcontrol"), 0);
  EXPECT_EQ(*codegen::emit_ptx(*m, "sm_90"), *with);  // same inputs, same text
}

}  // namespace
}  // namespace loom::test
