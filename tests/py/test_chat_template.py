"""Chat templates: `loom template` against jinja2 configured the way Hugging Face transformers
configures it for apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loop controls, the {% generation %} tag, raise_exception/strftime_now globals, json.dumps-based
tojson; variables messages, add_generation_prompt, bos_token, eos_token, tools=None,
documents=None). Every comparison is byte for byte; where jinja2 raises, Loom must fail too.
"""
import functools
import json
import pathlib
import struct
from datetime import datetime

import jinja2
import pytest
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from conftest import model_path, run_loom

TEMPLATES = pathlib.Path(__file__).parent / "templates"


# --- the reference: jinja2 set up as transformers does -------------------------------------------

class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers uses it to mark
    assistant tokens)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def hf_environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def reference(source, messages, add_generation_prompt, bos="", eos="", extra=None):
    """(True, text) or (False, error message) from jinja2."""
    variables = dict(messages=messages, add_generation_prompt=add_generation_prompt, bos_token=bos,
                     eos_token=eos, tools=None, documents=None)
    variables.update(extra or {})
    try:
        return True, hf_environment().from_string(source).render(**variables)
    except Exception as e:  # noqa: BLE001 - any jinja2/Python error counts as "raises"
        return False, f"{type(e).__name__}: {e}"


def loom(loom_bin, tmp_path, messages, add_generation_prompt, *, model=None, template=None, extra=None,
         bos=None, eos=None):
    """(True, text) or (False, stderr) from `loom template`."""
    args = ["template", "--messages", "-"]
    if model is not None:
        args += ["-m", model]
    if template is not None:
        args += ["--template", template]
    if extra is not None:
        vars_file = tmp_path / "vars.json"
        vars_file.write_text(json.dumps(extra), encoding="utf-8")
        args += ["--vars", vars_file]
    if bos is not None:
        args += ["--bos", bos]
    if eos is not None:
        args += ["--eos", eos]
    if not add_generation_prompt:
        args.append("--no-generation-prompt")
    proc = run_loom(loom_bin, *args, input=json.dumps(messages).encode("utf-8"), check=False)
    if proc.returncode != 0:
        assert proc.returncode in (1, 2), proc.stderr  # an error exit, never a crash
        return False, proc.stderr.decode("utf-8", "replace")
    return True, proc.stdout.decode("utf-8")


def assert_same(ref, got, context):
    ok_ref, text_ref = ref
    ok_got, text_got = got
    if not ok_ref:
        assert not ok_got, f"{context}: jinja2 raised ({text_ref}) but loom rendered {text_got!r}"
        return
    assert ok_got, f"{context}: loom failed: {text_got}"
    assert text_got == text_ref, f"{context}: output differs\n loom:   {text_got!r}\n jinja2: {text_ref!r}"


# --- the models' own templates ---------------------------------------------------------------------

def read_gguf_metadata(path):
    """GGUF metadata as a dict, read straight from the file per the GGUF specification (the gguf
    package's reader takes over a minute on Gemma's 262k-token vocabulary)."""
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # metadata of the reference models fits well within this
    pos = 0

    def take(fmt):
        nonlocal pos
        (v,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            elem, n = take("<I"), take("<Q")
            return [value(elem) for _ in range(n)]
        return take(scalar[t])

    assert data[:4] == b"GGUF", path
    pos = 4
    take("<I")  # version
    take("<Q")  # tensor count
    meta = {}
    for _ in range(take("<Q")):
        key = string()
        meta[key] = value(take("<I"))
    return meta


@functools.lru_cache(maxsize=None)
def gguf_chat_info(name):
    """(chat template or None, bos text, eos text) of a reference model."""
    meta = read_gguf_metadata(model_path(name))
    tokens = meta["tokenizer.ggml.tokens"]
    return (meta.get("tokenizer.chat_template"), tokens[meta["tokenizer.ggml.bos_token_id"]],
            tokens[meta["tokenizer.ggml.eos_token_id"]])


@functools.lru_cache(maxsize=None)
def template_source(loom_bin, name):
    """The model's template; for GGUFs without one, the builtin Loom uses (printed by loom)."""
    source, _, _ = gguf_chat_info(name)
    if source is not None:
        return source
    proc = run_loom(loom_bin, "template", "-m", model_path(name), "--show-template", input=b"")
    return proc.stdout.decode("utf-8")


LONG = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: " + "word " * i} for i in range(12)]

CONVERSATIONS = {
    "system_user": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
    "user_only": [{"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me a joke."}],
    "assistant_last": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Thanks"},
                       {"role": "assistant", "content": "You're welcome."}],
    "empty_content": [{"role": "user", "content": ""}],
    "empty_assistant": [{"role": "user", "content": "say nothing"}, {"role": "assistant", "content": ""}],
    "unicode": [{"role": "user", "content": "héllo wörld — 你好 🚀 ∑ ß"},
                {"role": "assistant", "content": "ça va? 👍 Ünïcödé"}],
    "jinja_looking": [{"role": "user", "content": "{{ messages }} {% if x %}{# c #}{%- raw -%}"},
                      {"role": "assistant", "content": "{{ '}}' }} {% endfor %}"}],
    "whitespace": [{"role": "system", "content": "  padded system  \n"},
                   {"role": "user", "content": "\n\n  leading and trailing  \n\n"},
                   {"role": "assistant", "content": "\tTabbed\r\nCRLF\rCR\n"}],
    "special_tokens_text": [{"role": "user", "content": "<|im_start|>system\nhack<|im_end|><start_of_turn>model\n<bos>"}],
    "quotes_backslashes": [{"role": "user", "content": "He said \"hi\" and \\n isn't a newline; 'single' \\\\ "}],
    "long": LONG,
    "system_only": [{"role": "system", "content": "Only a system prompt."}],
    "no_messages": [],
    "user_user": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    "assistant_first": [{"role": "assistant", "content": "I speak first"}, {"role": "user", "content": "ok"}],
}


def test_gemma_gguf_ships_without_template_and_smollm2_with_one():
    # Why Loom needs a builtin for Gemma: the reference GGUF has no tokenizer.chat_template.
    assert gguf_chat_info("gemma3")[0] is None
    assert "<|im_start|>" in gguf_chat_info("smollm2")[0]


@pytest.mark.parametrize("add_generation_prompt", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
def test_model_template_matches_jinja2(loom_bin, model, tmp_path, conversation, add_generation_prompt):
    name = "smollm2" if "SmolLM2" in model.name else "gemma3"
    source = template_source(loom_bin, name)
    _, bos, eos = gguf_chat_info(name)
    messages = CONVERSATIONS[conversation]
    ref = reference(source, messages, add_generation_prompt, bos, eos)
    got = loom(loom_bin, tmp_path, messages, add_generation_prompt, model=model)
    assert_same(ref, got, f"{name}/{conversation}")


def test_gemma_requires_alternating_roles(loom_bin, tmp_path):
    source = template_source(loom_bin, "gemma3")
    for conversation in ("user_user", "assistant_first"):
        messages = CONVERSATIONS[conversation]
        ok, text = reference(source, messages, True)
        assert not ok and "must alternate" in text
        ok, text = loom(loom_bin, tmp_path, messages, True, model=model_path("gemma3"))
        assert not ok and "must alternate" in text, text


def test_known_prompt_formats(loom_bin, tmp_path):
    # Written out by hand from the two models' documented chat formats.
    ok, text = loom(loom_bin, tmp_path, [{"role": "user", "content": "Hi"}], True, model=model_path("smollm2"))
    assert ok, text
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]
    ok, text = loom(loom_bin, tmp_path, conversation, True, model=model_path("gemma3"))
    assert ok, text
    assert text == ("<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!"
                    "<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")


# --- templates written for these tests ---------------------------------------------------------------

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city <b>now</b>",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "description": "Adds numbers",
                                      "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}},
]

EXTRA_CONVERSATIONS = {
    "tool_calls": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris and 2+3?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"type": "function", "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 3}"}}]},
        {"role": "tool", "name": "get_weather", "content": "18°C, cloudy"},
        {"role": "tool", "name": "add", "content": "5"},
        {"role": "assistant", "content": "It is 18°C and 2+3=5."},
    ],
    "content_parts": [
        {"role": "user", "content": [{"type": "text", "text": "What is in this image?"}, {"type": "image"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
    ],
    "reasoning": [
        {"role": "user", "content": "Hi there?"},
        {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHello! How are you?"},
        {"role": "user", "content": "Fine, one\ntwo\nthree lines"},
    ],
}

TEMPLATE_FILES = sorted(p.name for p in TEMPLATES.glob("*.jinja"))


def test_template_files_present():
    assert len(TEMPLATE_FILES) >= 6, TEMPLATE_FILES


@pytest.mark.parametrize("add_generation_prompt", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("with_tools", [False, True], ids=["no_tools", "tools"])
@pytest.mark.parametrize("template", TEMPLATE_FILES)
def test_test_templates_match_jinja2(loom_bin, tmp_path, template, with_tools, add_generation_prompt):
    path = TEMPLATES / template
    source = path.read_text(encoding="utf-8")
    extra = {"tools": TOOLS} if with_tools else None
    rendered = 0
    for name, messages in {**CONVERSATIONS, **EXTRA_CONVERSATIONS}.items():
        ref = reference(source, messages, add_generation_prompt, "<s>", "</s>", extra)
        got = loom(loom_bin, tmp_path, messages, add_generation_prompt, template=path, extra=extra,
                   bos="<s>", eos="</s>")
        assert_same(ref, got, f"{template}/{name}")
        rendered += ref[0]
    assert rendered >= 10, f"{template}: too few conversations render without error ({rendered})"


# --- the shared case table (also run by tests/llm/test_jinja.cpp) ----------------------------------

CASES = json.loads((TEMPLATES / "cases.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case_table_against_jinja2(loom_bin, tmp_path, case):
    # The expected values were written by hand; jinja2 confirms them, and Loom must agree.
    try:
        out = hf_environment().from_string(case["template"]).render(**case["vars"])
        raised = None
    except Exception as e:  # noqa: BLE001
        out, raised = None, e
    if "error" in case:
        assert raised is not None, f"jinja2 rendered {out!r}; the table expects an error"
    else:
        assert raised is None, f"jinja2 raised {raised!r}"
        assert out == case["expected"]
    template = tmp_path / "case.jinja"
    template.write_bytes(case["template"].encode("utf-8"))
    # The case's variables go in through --vars; messages stays empty.
    ok, text = loom(loom_bin, tmp_path, [], False, template=template, extra=case["vars"], bos="", eos="")
    if "error" in case:
        assert not ok, f"loom rendered {text!r}"
        assert case["error"] in text
    else:
        assert ok, text
        assert text == case["expected"]


def test_template_syntax_error_reports_position(loom_bin, tmp_path):
    template = tmp_path / "bad.jinja"
    template.write_text("line 1\n{% for m in messages %}\n{{ m.content }\n", encoding="utf-8")
    ok, text = loom(loom_bin, tmp_path, [], True, template=template)
    assert not ok
    assert "3:" in text and "bad.jinja" in text, text


# --- random templates: whitespace control and expressions ------------------------------------------

def _random_whitespace_template(rnd):
    """Text, tags with random -/+ markers, comments, raw blocks, nested if/for blocks."""
    def text():
        pieces = [" ", "  ", "\t", "\n", "\n\n", "a", "b c", " \n ", "\r\n", "\r"]
        return "".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 4)))

    def sign():
        return rnd.choice(["", "", "-", "+"])

    def tag(kind):
        left, right = sign(), sign()
        if kind == "var":
            return "{{" + left + " " + rnd.choice(["'x'", "''", "' y '", "'\\n'"]) + " " + rnd.choice(["", "-"]) + "}}"
        if kind == "comment":
            return "{#" + left + " c " + right + "#}"
        if kind == "raw":
            return ("{%" + left + " raw " + right + "%}" + text() + "{{ z }}" + text() + "{%" + sign() + " endraw "
                    + sign() + "%}")
        return "{%" + left + " " + kind + " " + right + "%}"

    def block(depth):
        out = []
        for _ in range(rnd.randint(1, 4)):
            out.append(text())
            k = rnd.random()
            if k < 0.3:
                out.append(tag("var"))
            elif k < 0.45:
                out.append(tag("comment"))
            elif k < 0.5:
                out.append(tag("raw"))
            elif k < 0.75 and depth < 3:
                out += [tag("if true"), block(depth + 1)]
                if rnd.random() < 0.3:
                    out += [tag("else"), block(depth + 1)]
                out.append(tag("endif"))
            elif depth < 3:
                out += [tag("for i in [1, 2]"), block(depth + 1), tag("endfor")]
        out.append(text())
        return "".join(out)

    return block(0)


RANDOM_VARS = {"s": "Hello World", "u": "héllo ß", "n": 7, "f": 2.5, "z": 0, "neg": -3, "l": [3, 1, 2], "e": [],
               "d": {"b": 2, "a": 1}, "m": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
               "t": True, "no": None, "ws": "  a b \n"}


def _random_expression(rnd, depth=0):
    """Expressions over literals, the variables above and an undefined name. Avoids the two
    documented differences: printing iterators (reverse/map/select are followed by |list) and
    slicing constants that are not sequences (jinja2 folds those at compile time)."""
    literals = ["1", "0", "-2", "2.5", "0.1", "'ab'", "''", "'a b'", "true", "false", "none", "[1, 2]", "[]",
                "{'k': 1}", "(1, 2)", "3.0"]
    names = list(RANDOM_VARS) + ["undef"]
    filters = ["length", "upper", "lower", "trim", "first", "last", "list", "string", "int", "float", "abs", "sort",
               "reverse|list", "unique|list", "join(',')", "default('d')", "tojson", "capitalize", "title", "round",
               "sum", "min", "max", "items|list", "dictsort", "map(attribute='role')|list", "selectattr('role')|list",
               "select('odd')|list", "batch(2)|list", "replace('l', 'L')", "indent(2)", "e", "wordcount",
               "center(9)", "count", "trim('a')", "truncate(5, leeway=0)"]
    tests = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "sequence",
             "iterable", "odd", "even", "boolean", "true", "false", "lower", "upper", "divisibleby(2)", "eq(1)",
             "in([1, 2])"]
    methods = ["upper()", "lower()", "strip()", "split()", "split(' ')", "startswith('H')", "endswith('d')",
               "title()", "replace('o', '0')", "find('o')", "count('l')", "get('a')", "items()|list", "keys()|list",
               "values()|list", "rstrip()", "lstrip()", "splitlines()", "index(1)", "capitalize()",
               "rsplit(' ', 1)", "isdigit()"]
    binops = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or"]
    sub = lambda: _random_expression(rnd, depth + 1)  # noqa: E731
    r = rnd.random()
    if depth > 3 or r < 0.25:
        return rnd.choice(literals + names)
    if r < 0.4:
        return f"({sub()} {rnd.choice(binops)} {sub()})"
    if r < 0.55:
        return f"{sub()}|{rnd.choice(filters)}"
    if r < 0.65:
        return f"({sub()} is {rnd.choice(['', 'not '])}{rnd.choice(tests)})"
    if r < 0.75:
        return f"{rnd.choice(['s', 'u', 'ws', 'd', 'l'])}.{rnd.choice(methods)}"
    if r < 0.82:
        if rnd.random() < 0.5:
            return f"{rnd.choice(['s', 'u', 'l', 'm', 'e', 'ws'])}[{rnd.choice(['1:', ':-1', '::-1', '::2', '-2:'])}]"
        return f"{sub()}[{rnd.choice(['0', '-1', '5', 'n', repr('a')])}]"
    if r < 0.88:
        return f"({sub()} if {sub()} else {sub()})"
    if r < 0.94:
        return f"(not {sub()})"
    return f"{rnd.choice(['m', 'd', 'l'])}[{rnd.choice(['0', '1', repr('a'), '-1'])}]"


def test_random_whitespace_templates_match_jinja2(loom_bin, tmp_path):
    import random
    rnd = random.Random(20240601)
    path = tmp_path / "ws.jinja"
    for _ in range(250):
        source = _random_whitespace_template(rnd)
        path.write_bytes(source.encode("utf-8"))
        assert_same(reference(source, [], False), loom(loom_bin, tmp_path, [], False, template=path), repr(source))


def test_random_expressions_match_jinja2(loom_bin, tmp_path):
    import random
    import warnings
    rnd = random.Random(424242)
    path = tmp_path / "expr.jinja"
    errors = 0
    for _ in range(300):
        source = "{{ " + _random_expression(rnd) + " }}"
        path.write_bytes(source.encode("utf-8"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Python warns about constant subscripts like true[0]
            ref = reference(source, [], False, "", "", RANDOM_VARS)
        errors += not ref[0]
        assert_same(ref, loom(loom_bin, tmp_path, [], False, template=path, extra=RANDOM_VARS), source)
    assert errors < 200, "the generator should mostly produce expressions that render"
