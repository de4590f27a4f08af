// `loom template`: renders a chat prompt with a model's own chat template (or a template file),
// exactly as Hugging Face transformers' apply_chat_template would.
//   loom template -m MODEL.gguf [--messages FILE.json|-] [--no-generation-prompt]
//   loom template --template FILE.jinja [--bos TEXT] [--eos TEXT] ...
//   loom template -m MODEL.gguf --show-template     (prints the template source)
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "cli.h"
#include "loom/gguf/gguf.h"
#include "loom/text/chat_template.h"

namespace loom::cli {
namespace {

struct TemplateFlags {
  std::string model;
  std::string template_file;
  std::string messages = "-";
  std::string vars;
  std::string bos, eos;
  bool bos_set = false, eos_set = false;
  bool no_generation_prompt = false;
  bool show_template = false;
};

Result<std::string> read_input(const std::string& path) {
  if (path == "-") {
    std::string data((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return data;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<std::string> run(const TemplateFlags& f) {
  if (f.model.empty() && f.template_file.empty())
    return invalid_argument("give a model (-m MODEL.gguf) or a template file (--template FILE)");
  std::optional<llm::GgufFile> gguf;
  if (!f.model.empty()) {
    LOOM_ASSIGN_OR_RETURN(llm::GgufFile file, llm::GgufFile::open(f.model));
    gguf.emplace(std::move(file));
  }
  llm::ChatTemplate tmpl;
  if (gguf) {
    LOOM_ASSIGN_OR_RETURN(tmpl, llm::ChatTemplate::from_gguf(*gguf));
  }
  if (!f.template_file.empty()) {
    LOOM_ASSIGN_OR_RETURN(std::string source, read_input(f.template_file));
    std::string bos = gguf ? tmpl.bos_token() : "", eos = gguf ? tmpl.eos_token() : "";
    auto t = llm::ChatTemplate::from_source(source, bos, eos);
    if (!t.ok()) return std::move(t).status().with_context(f.template_file);
    tmpl = std::move(t).value();
  }
  if (f.bos_set || f.eos_set) {
    auto t = llm::ChatTemplate::from_source(tmpl.source(), f.bos_set ? f.bos : tmpl.bos_token(),
                                            f.eos_set ? f.eos : tmpl.eos_token());
    if (!t.ok()) return std::move(t).status();
    tmpl = std::move(t).value();
  }
  if (f.show_template) return tmpl.source();
  LOOM_ASSIGN_OR_RETURN(std::string messages, read_input(f.messages));
  std::string vars;
  if (!f.vars.empty()) {
    LOOM_ASSIGN_OR_RETURN(vars, read_input(f.vars));
  }
  return tmpl.render_json(messages, !f.no_generation_prompt, vars);
}

LOOM_COMMAND(kTemplate, "template", "Render a chat prompt with a model's chat template (as transformers does)",
             [](CLI::App& sub) -> Action {
               auto f = std::make_shared<TemplateFlags>();
               sub.add_option("-m,--model", f->model, "GGUF model whose tokenizer.chat_template to use");
               sub.add_option("--template", f->template_file, "render this Jinja template file instead");
               sub.add_option("--messages", f->messages,
                              "JSON array of {role, content} messages: a file, or - for stdin (default)");
               sub.add_option("--vars", f->vars, "JSON object file of extra template variables (e.g. tools)");
               sub.add_option("--bos", f->bos, "bos_token text (default: the model's)")->each([f](const std::string&) {
                 f->bos_set = true;
               });
               sub.add_option("--eos", f->eos, "eos_token text (default: the model's)")->each([f](const std::string&) {
                 f->eos_set = true;
               });
               sub.add_flag("--no-generation-prompt", f->no_generation_prompt,
                            "render with add_generation_prompt=false");
               sub.add_flag("--show-template", f->show_template, "print the template source instead of rendering");
               return [f] {
                 auto out = run(*f);
                 if (!out.ok()) return report(out.status());
                 std::fwrite(out->data(), 1, out->size(), stdout);
                 return 0;
               };
             });

}  // namespace
}  // namespace loom::cli
