// The `loom` CLI's command registry. Each command lives in its own cmd_*.cpp and registers
// itself with LOOM_COMMAND; main() builds the CLI11 app from the registry.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "loom/base/status.h"

namespace loom::cli {

using Action = std::function<int()>;

struct Command {
  std::string name;
  std::string help;
  // Adds the command's flags (and nested subcommands) to `sub`; returns what runs when the
  // command is chosen. Flag values live in state captured by the returned action.
  std::function<Action(CLI::App& sub)> setup;
};

bool register_command(Command command);

// Prints "loom: error: <status with context>" to stderr; returns the exit code (1, or 2 for
// invalid arguments).
int report(const Status& status);
// The command line as typed ("loom bench -m x.gguf ..."), for results files.
const std::string& command_line();

}  // namespace loom::cli

#define LOOM_COMMAND(var, ...) \
  static const bool var = ::loom::cli::register_command(::loom::cli::Command{__VA_ARGS__})
