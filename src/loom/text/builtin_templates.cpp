// Built-in chat templates (see builtin_templates.h).
#include "loom/text/builtin_templates.h"

namespace loom::llm {
namespace {

// Gemma turn format: "<start_of_turn>ROLE\n...<end_of_turn>\n", the assistant speaking as
// "model"; a system message has no turn of its own and is folded into the first user turn;
// user and assistant must alternate, starting with the user.
constexpr std::string_view kGemma = R"JINJA({{- bos_token -}}
{%- set ns = namespace(system='', first=0) -%}
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set ns.system = messages[0]['content'] | trim ~ '\n\n' -%}
  {%- set ns.first = 1 -%}
{%- endif -%}
{%- for message in messages[ns.first:] -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
  {%- endif -%}
  {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
  {{- '<start_of_turn>' ~ role ~ '\n' -}}
  {%- if loop.first -%}{{- ns.system -}}{%- endif -%}
  {{- message['content'] | trim -}}
  {{- '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}
)JINJA";

}  // namespace

std::optional<std::string_view> builtin_chat_template(std::string_view architecture) {
  if (architecture == "gemma" || architecture == "gemma2" || architecture == "gemma3") return kGemma;
  return std::nullopt;
}

}  // namespace loom::llm
