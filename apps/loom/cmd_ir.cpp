// `loom ir`: check Loom IR files and compile them for a target (ptx, cpp, amdgpu).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli.h"
#include "loom/base/file.h"
#include "loom/codegen/target.h"
#include "loom/ir/parser.h"
#include "loom/ir/passes/passes.h"
#include "loom/ir/verifier.h"

namespace loom::cli {
namespace {

struct IrFlags {
  std::string file;
  std::string target;
  std::string arch;
  std::string out;
  bool text = false;
  bool no_opt = false;
  bool print = false;
};

Status write_output(const std::string& path, std::string_view bytes) {
  if (path.empty() || path == "-") {
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    return Status();
  }
  return write_file(path, bytes).with_context("writing output");
}

int run_check(const IrFlags& f) {
  auto module = ir::parse_file(f.file);
  if (!module.ok()) return report(module.status());
  if (!f.target.empty()) {
    const codegen::Target* t = codegen::find_target(f.target);
    if (!t) return report(invalid_argument("unknown target '{}' (ptx, cpp, amdgpu)", f.target));
    Status s = ir::verify(*module, t->kind());
    if (!s.ok()) return report(s);
  }
  if (!f.no_opt && f.print) ir::optimize(*module);
  if (f.print) {
    std::string text = ir::print(*module);
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    std::fprintf(stderr, "%s: ok (%zu kernel%s)\n", f.file.c_str(), module->kernels.size(),
                 module->kernels.size() == 1 ? "" : "s");
  }
  return 0;
}

int run_compile(const IrFlags& f) {
  const codegen::Target* t = codegen::find_target(f.target);
  if (!t) return report(invalid_argument("unknown target '{}' (ptx, cpp, amdgpu)", f.target));
  std::string arch = f.arch.empty() ? t->archs().front() : f.arch;
  auto module = ir::parse_file(f.file);
  if (!module.ok()) return report(module.status());
  if (!f.no_opt) ir::optimize(*module);
  std::string what = fmt::format("compiling {} for {} ({})", f.file, t->name(), arch);
  // PTX is text by nature; the others are binaries unless --text asks for C++ / LLVM IR.
  if (f.text || t->kind() == ir::TargetKind::kPtx) {
    auto text = t->emit(*module, arch);
    if (!text.ok()) return report(std::move(text).status().with_context(what));
    Status s = write_output(f.out, *text);
    return s.ok() ? 0 : report(s);
  }
  auto artifact = t->compile(*module, arch);
  if (!artifact.ok()) return report(std::move(artifact).status().with_context(what));
  std::string out = f.out;
  if (out.empty()) {
    out = std::filesystem::path(f.file).stem().string() + (t->kind() == ir::TargetKind::kCpp ? ".so" : ".hsaco");
  }
  std::string_view bytes(reinterpret_cast<const char*>(artifact->binary.data()), artifact->binary.size());
  Status s = write_output(out, bytes);
  if (!s.ok()) return report(s);
  if (out != "-") std::fprintf(stderr, "wrote %s (%zu bytes)\n", out.c_str(), bytes.size());
  return 0;
}

LOOM_COMMAND(ir_command, "ir", "Check and compile Loom IR kernels (.loom files)", [](CLI::App& app) -> Action {
  auto flags = std::make_shared<IrFlags>();
  app.require_subcommand(1);
  CLI::App* check = app.add_subcommand("check", "Parse and verify a .loom file (errors carry file:line:column)");
  check->add_option("file", flags->file, "Loom IR file")->required();
  check->add_option("--target", flags->target, "Also check legality for this target (ptx, cpp, amdgpu)");
  check->add_flag("--print", flags->print, "Print the canonical IR text (after the standard passes)");
  check->add_flag("--no-opt", flags->no_opt, "With --print: skip the passes");

  CLI::App* compile = app.add_subcommand("compile", "Compile a .loom file for a target");
  compile->add_option("file", flags->file, "Loom IR file")->required();
  compile->add_option("--target", flags->target, "ptx, cpp or amdgpu")->required();
  compile->add_option("--arch", flags->arch, "ptx: sm_80 (default), sm_90; amdgpu: gfx1100 (default), gfx1151; cpp: native");
  compile->add_option("-o,--output", flags->out,
                      "Output file ('-' for stdout). Default: stdout for text, FILE stem + .so/.hsaco for binaries");
  compile->add_flag("-S,--text", flags->text, "Emit the target's text form (C++, LLVM IR) instead of a binary");
  compile->add_flag("--no-opt", flags->no_opt, "Skip the IR passes (constant folding, CSE, DCE, unrolling)");
  return [flags, check, compile]() -> int {
    if (check->parsed()) return run_check(*flags);
    if (compile->parsed()) return run_compile(*flags);
    return 2;
  };
});

}  // namespace
}  // namespace loom::cli
