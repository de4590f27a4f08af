// Entry point of the `loom` CLI: builds subcommands from the registry and runs the chosen one.
#include <cstdio>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "loom/base/options.h"
#include "loom/base/version.h"

namespace loom::cli {
namespace {
std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace

bool register_command(Command command) {
  registry().push_back(std::move(command));
  return true;
}

static std::string g_command_line;
const std::string& command_line() { return g_command_line; }

int report(const Status& status) {
  std::fprintf(stderr, "loom: error: %s\n", status.to_string().c_str());
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace loom::cli

int main(int argc, char** argv) {
  CLI::App app{"loom: run large language models fast on this machine's GPU or CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", fmt::format("loom {} ({})", loom::loom_version(), loom::git_commit()));
  loom::cli::g_command_line = "loom";
  for (int i = 1; i < argc; ++i) loom::cli::g_command_line += std::string(" ") + argv[i];
  // Before the commands' setup, which reads defaults (threads) from the registry.
  const loom::Status environment = loom::opt::check_environment();
  std::vector<std::pair<CLI::App*, loom::cli::Action>> actions;
  for (auto& cmd : loom::cli::registry()) {
    CLI::App* sub = app.add_subcommand(cmd.name, cmd.help);
    actions.emplace_back(sub, cmd.setup(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "loom: error: %s\n", e.what());
    std::fprintf(stderr, "run 'loom --help' (or 'loom COMMAND --help') for usage\n");
    return 2;
  }
  for (auto& [sub, action] : actions) {
    if (!sub->parsed()) continue;
    // A refused environment value stops the command before it runs (rather than a default the
    // user did not ask for); `loom info` runs anyway, so that `loom info --flags` can show it.
    if (sub->get_name() != "info" && !environment.ok()) return loom::cli::report(environment);
    return action();
  }
  return 2;
}
