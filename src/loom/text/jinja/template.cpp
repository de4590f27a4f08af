// Template: lexer + parser once, interpreter per render.
#include "loom/text/jinja/template.h"

#include "loom/text/jinja/builtins.h"
#include "loom/text/jinja/interp.h"
#include "loom/text/jinja/lexer.h"
#include "loom/text/jinja/parser.h"

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
