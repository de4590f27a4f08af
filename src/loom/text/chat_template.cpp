// Chat template loading (GGUF metadata or builtin) and rendering through the Jinja interpreter.
#include "loom/text/chat_template.h"

#include "loom/gguf/gguf.h"
#include "loom/text/jinja/json.h"
#include "loom/text/jinja/template.h"

namespace loom::llm {
namespace {

// Gemma's turn format, written for Loom: <start_of_turn>{user|model}\n{text}<end_of_turn>\n,
// a leading system message folded into the first user turn, user/model turns alternating
// (starting with user) or the template raises, text trimmed, and image parts as
// <start_of_image>.
constexpr std::string_view kGemmaTemplate = R"JINJA({{- bos_token -}}
{%- set state = namespace(prefix='', first=0) -%}
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set system = messages[0]['content'] -%}
  {%- if system is not string -%}{%- set system = system[0]['text'] -%}{%- endif -%}
  {%- set state.prefix = system ~ '\n\n' -%}
  {%- set state.first = 1 -%}
{%- endif -%}
{%- for message in messages[state.first:] -%}
  {%- if (message['role'] == 'user') != (loop.index0 is even) -%}
    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
  {%- endif -%}
  {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
  {{- '<start_of_turn>' ~ role ~ '\n' ~ (state.prefix if loop.first else '') -}}
  {%- if message['content'] is string -%}
    {{- message['content'] | trim -}}
  {%- elif message['content'] is iterable -%}
    {%- for part in message['content'] -%}
      {%- if part['type'] == 'image' -%}{{- '<start_of_image>' -}}
      {%- elif part['type'] == 'text' -%}{{- part['text'] | trim -}}{%- endif -%}
    {%- endfor -%}
  {%- else -%}
    {{- raise_exception('Invalid content type') -}}
  {%- endif -%}
  {{- '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}
)JINJA";

Result<std::string> token_text(const GgufFile& gguf, const GgufArray& tokens, std::string_view key) {
  if (!gguf.has(key)) return std::string();
  LOOM_ASSIGN_OR_RETURN(uint64_t id, gguf.get_u64(key));
  if (id >= tokens.size()) return data_loss("{} = {} is outside the vocabulary ({} tokens)", key, id, tokens.size());
  LOOM_ASSIGN_OR_RETURN(std::string_view text, tokens.at(id).as_string());
  return std::string(text);
}

jinja::ValueDict base_vars(const std::string& bos, const std::string& eos, bool add_generation_prompt) {
  // The variables transformers' apply_chat_template passes (tools/documents are None when
  // not given; special tokens come from the tokenizer).
  jinja::ValueDict vars;
  vars.set(jinja::Value("add_generation_prompt"), jinja::Value(add_generation_prompt));
  vars.set(jinja::Value("bos_token"), jinja::Value(bos));
  vars.set(jinja::Value("eos_token"), jinja::Value(eos));
  vars.set(jinja::Value("tools"), jinja::Value::none());
  vars.set(jinja::Value("documents"), jinja::Value::none());
  return vars;
}

}  // namespace

std::string_view builtin_chat_template(std::string_view architecture) {
  if (architecture == "gemma" || architecture == "gemma2" || architecture == "gemma3") return kGemmaTemplate;
  return {};
}

Result<ChatTemplate> ChatTemplate::from_source(std::string_view source, std::string bos_token, std::string eos_token) {
  auto parsed = jinja::Template::parse(source);
  if (!parsed.ok()) return std::move(parsed).status().with_context("parsing chat template");
  ChatTemplate t;
  t.template_ = std::make_shared<const jinja::Template>(std::move(parsed).value());
  t.source_ = std::string(source);
  t.bos_ = std::move(bos_token);
  t.eos_ = std::move(eos_token);
  return t;
}

Result<ChatTemplate> ChatTemplate::from_gguf(const GgufFile& gguf) {
  std::string bos, eos;
  if (gguf.has("tokenizer.ggml.tokens")) {
    LOOM_ASSIGN_OR_RETURN(const GgufArray* tokens, gguf.get_array("tokenizer.ggml.tokens"));
    LOOM_ASSIGN_OR_RETURN(bos, token_text(gguf, *tokens, "tokenizer.ggml.bos_token_id"));
    LOOM_ASSIGN_OR_RETURN(eos, token_text(gguf, *tokens, "tokenizer.ggml.eos_token_id"));
  }
  bool builtin = false;
  std::string source;
  if (gguf.has("tokenizer.chat_template")) {
    LOOM_ASSIGN_OR_RETURN(std::string_view text, gguf.get_string("tokenizer.chat_template"));
    source = std::string(text);
  } else {
    std::string_view fallback = builtin_chat_template(gguf.architecture());
    if (fallback.empty())
      return not_found("{} has no tokenizer.chat_template and Loom has no builtin template for architecture '{}'",
                       gguf.path(), gguf.architecture());
    source = std::string(fallback);
    builtin = true;
  }
  auto t = from_source(source, std::move(bos), std::move(eos));
  if (!t.ok()) return std::move(t).status().with_context(gguf.path());
  t->builtin_ = builtin;
  return t;
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  jinja::ValueList list;
  list.reserve(messages.size());
  for (const auto& m : messages) {
    jinja::ValueDict d;
    d.append_new(jinja::Value("role"), jinja::Value(m.role));
    d.append_new(jinja::Value("content"), jinja::Value(m.content));
    list.push_back(jinja::Value::dict(std::move(d)));
  }
  jinja::ValueDict vars = base_vars(bos_, eos_, add_generation_prompt);
  vars.set(jinja::Value("messages"), jinja::Value::list(std::move(list)));
  auto out = template_->render(vars);
  if (!out.ok()) return std::move(out).status().with_context("rendering chat template");
  return out;
}

Result<std::string> ChatTemplate::render_json(std::string_view messages_json, bool add_generation_prompt,
                                              std::string_view extra_vars_json) const {
  auto messages = jinja::parse_json(messages_json);
  if (!messages.ok()) return std::move(messages).status().with_context("reading messages");
  if (!messages->is_list()) return invalid_argument("messages must be a JSON array of objects");
  jinja::ValueDict vars = base_vars(bos_, eos_, add_generation_prompt);
  vars.set(jinja::Value("messages"), std::move(messages).value());
  if (!extra_vars_json.empty()) {
    auto extra = jinja::parse_json(extra_vars_json);
    if (!extra.ok()) return std::move(extra).status().with_context("reading template variables");
    if (!extra->is_dict()) return invalid_argument("template variables must be a JSON object");
    for (const auto& [k, v] : extra->dict().items()) vars.set(k, v);
  }
  auto out = template_->render(vars);
  if (!out.ok()) return std::move(out).status().with_context("rendering chat template");
  return out;
}

Result<std::string> render_template(std::string_view template_text, const std::vector<ChatMessage>& messages,
                                    std::string_view bos_token, std::string_view eos_token,
                                    bool add_generation_prompt) {
  LOOM_ASSIGN_OR_RETURN(ChatTemplate t,
                        ChatTemplate::from_source(template_text, std::string(bos_token), std::string(eos_token)));
  return t.render(messages, add_generation_prompt);
}

Result<std::string> render_chat(const GgufFile& gguf, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) {
  LOOM_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::from_gguf(gguf));
  return t.render(messages, add_generation_prompt);
}

}  // namespace loom::llm
