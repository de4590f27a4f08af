// The build's identity (the commit comes from a header the build regenerates on every run).
#include "loom/base/version.h"

#include "loom_git_commit.h"

namespace loom {

std::string_view loom_version() { return "0.1.0"; }
std::string_view git_commit() { return LOOM_GIT_COMMIT; }

}  // namespace loom
