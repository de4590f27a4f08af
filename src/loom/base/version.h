// The build's identity: Loom's version and the git commit it was built from, for results files,
// the kernel store and `loom --version`.
#pragma once
#include <string_view>

namespace loom {

std::string_view loom_version();  // "0.1.0"
// Short commit hash of the source tree at build time, "-dirty" appended when tracked files had
// uncommitted changes; "unknown" outside a git checkout.
std::string_view git_commit();

}  // namespace loom
