// Template: lexer + parser once, interpreter per render.
#include "loom/llm/jinja/template.h"

#include "loom/llm/jinja/builtins.h"
#include "loom/llm/jinja/interp.h"
#include "loom/llm/jinja/lexer.h"
#include "loom/llm/jinja/parser.h"

namespace loom::llm::jinja {

Result<Template> Template::parse(std::string_view source) {
  LOOM_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source));
  LOOM_ASSIGN_OR_RETURN(Body body, jinja::parse(std::move(tokens)));
  Template t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

Result<std::string> Template::render(const ValueDict& vars, const Limits& limits) const {
  ValueDict globals = builtin_globals();
  for (const auto& [k, v] : vars.items()) globals.set(k, v);
  Interpreter interp(limits);
  return interp.render(*body_, globals);
}

}  // namespace loom::llm::jinja
