// Ties a CLI flag to its option in the registry (loom/base/options.h): the flag's value goes
// through set_from_flag, so the registry's value and its source ("flag") agree with what the
// command uses, and a value the option refuses is a CLI11 validation error (exit code 2).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "loom/base/options.h"

namespace loom::cli {

inline CLI::Option* bind_option(CLI::Option* flag, opt::Opt o) {
  return flag->each([o](const std::string& value) {
    Status s = opt::set_from_flag(o, value);
    if (!s.ok()) throw CLI::ValidationError(s.message());
  });
}

}  // namespace loom::cli
