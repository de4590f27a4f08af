// Entry point of the `loom` CLI: builds subcommands from the registry and runs the chosen one.
#include <cstdio>
#include <memory>
#include <string>
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

// llama.cpp spells some flags with one dash and several letters ("-ngl 99", "-np 4"), which
// CLI11 would read as a one-letter flag with a value ("-n gl"). The commands that take them get
// the long names instead; "--" ends the rewriting.
std::vector<std::string> rewrite_llama_flags(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  const std::string cmd = argc > 1 ? args[1] : "";
  const bool places = cmd == "run" || cmd == "chat" || cmd == "bench" || cmd == "serve";
  for (size_t i = 2; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--") break;
    auto swap = [&](const std::string& from, const std::string& to) {
      if (a == from) a = to;
      else if (a.rfind(from + "=", 0) == 0) a = to + a.substr(from.size());
    };
    if (places) swap("-ngl", "--n-gpu-layers");
    if (cmd == "serve") swap("-np", "--parallel");
  }
  return args;
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
    std::vector<std::string> args = loom::cli::rewrite_llama_flags(argc, argv);
    std::vector<char*> ptrs;
    for (std::string& a : args) ptrs.push_back(a.data());
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
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
