#!/usr/bin/env python3
"""Writes docs.jsonl: the tokenizer test corpus, generated deterministically from fragments
written for Loom (no third-party text).

Each line is {"name": ..., "text": ...} for valid UTF-8, or {"name": ..., "hex": ...} for
documents holding invalid UTF-8 bytes. Run it again to regenerate: the output is byte-identical
(a fixed xorshift generator, not Python's `random`, so that it does not depend on the Python
version).

Invalid byte sequences avoid what llama.cpp itself aborts on (4-byte forms above U+10FFFF).
Letters first assigned in Unicode 15.0 or later are avoided too: llama.cpp's tables know them,
Debian's PCRE2 (Unicode 14) does not (see docs in tests/py/test_tokenizer.py).
"""
import json
import pathlib

HERE = pathlib.Path(__file__).resolve().parent


class Rng:
    """xorshift64*: deterministic across Python versions."""

    def __init__(self, seed):
        self.s = seed or 1

    def next(self):
        s = self.s
        s ^= (s >> 12)
        s ^= (s << 25) & 0xFFFFFFFFFFFFFFFF
        s ^= (s >> 27)
        self.s = s
        return (s * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF

    def below(self, n):
        return self.next() % n

    def pick(self, seq):
        return seq[self.below(len(seq))]

    def chance(self, num, den):
        return self.below(den) < num


# ---- English prose ----------------------------------------------------------------------------

SUBJECTS = ["The engineer", "A quiet fox", "Our build server", "My neighbour's cat", "The committee",
            "Every compiler", "She", "They", "We", "The old lighthouse keeper", "A tired student",
            "The kernel scheduler", "Nobody", "The river", "This small library", "Grandma Rose",
            "The O'Brien twins", "Dr. Ada Quill", "The tokenizer", "An unexpected guest"]
VERBS = ["walked past", "rewrote", "carefully measured", "forgot about", "painted", "argued with",
         "compiled", "quietly replaced", "was thinking about", "ran toward", "documented",
         "couldn't find", "won't touch", "has already tested", "would've cached", "loves",
         "is benchmarking", "refused to merge", "borrowed", "rebuilt"]
OBJECTS = ["the blue bicycle", "a half-finished report", "the attention kernel", "three loaves of bread",
           "the lighthouse", "an old map of the harbour", "the regression suite", "her umbrella",
           "a very long string of spaces", "the weekly schedule", "the quantized weights",
           "a jar of honey", "the missing semicolon", "our shared notebook", "the bridge",
           "a stack of punch cards", "the last train home", "the recipe for pancakes"]
TAILS = ["before sunrise", "without telling anyone", "twice", "in the rain", "for no reason at all",
         "after lunch", "with great care", "again and again", "on Tuesday", "while humming",
         "at 3:45 p.m.", "in under 2.5 seconds", "(mostly)", "-- or so they say", "; nobody noticed"]
ENDINGS = [".", ".", ".", "!", "?", "...", "?!", ".\"", "!'", ":", ";"]
CONTRACTIONS = ["it's", "they're", "we'll", "I'd", "don't", "can't", "You've", "I'm", "she'll",
                "won't", "IT'S", "THEY'RE", "We'Ll", "y'all", "rock 'n' roll", "'tis", "o'clock",
                "the '90s", "James' book", "the dogs' toys", "ma'am", "'quoted'", "it''s"]


def sentence(r):
    s = f"{r.pick(SUBJECTS)} {r.pick(VERBS)} {r.pick(OBJECTS)}"
    if r.chance(2, 3):
        s += " " + r.pick(TAILS)
    if r.chance(1, 3):
        s += f", and {r.pick(CONTRACTIONS)} {r.pick(['fine', 'true', 'odd', 'late', 'over', 'done'])}"
    return s + r.pick(ENDINGS)


def paragraph(r, n):
    parts = []
    for _ in range(n):
        parts.append(sentence(r))
    sep = r.pick([" ", " ", "  ", "\n", " \n"])
    return sep.join(parts)


# ---- Source code ------------------------------------------------------------------------------

CODE = [
    "def fib(n: int) -> int:\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "int main(int argc, char** argv) {\n\tif (argc < 2) return 1;\n\tprintf(\"%s\\n\", argv[1]);\n\treturn 0;\n}\n",
    "const sum = (xs) => xs.reduce((a, b) => a + b, 0);\nconsole.log(sum([1, 2, 3]));   // 6\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE 'A%' ORDER BY id DESC LIMIT 10;\n",
    "#!/bin/sh\nset -eu\nfor f in *.txt; do\n  wc -l \"$f\" | awk '{print $1}'\ndone\n",
    "<div class=\"card\">\n  <p>Hello &amp; welcome</p>\n  <img src=\"a.png\" alt=\"\"/>\n</div>\n",
    "{\"name\": \"loom\", \"version\": \"0.1.0\", \"tags\": [\"llm\", \"gpu\"], \"ok\": true, \"n\": null}\n",
    "template <typename T>\nstruct Box {\n  T value;\n  T& operator*() { return value; }\n};\n",
    "    if x == 0:\n        raise ValueError(f\"bad x: {x!r}\")\n\telse:\n\t\tpass\n",
    "a=1;b=2;c=a+b*3-(4/5)%6;d=c<<2|c>>1&0xff^~0;\n",
    "x += 1\r\ny -= 2\r\nz *= 3\r\n",
    "// TODO(someone): remove this hack\n/* block\n   comment */\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "    \t  mixed_indent = True  \t\n\t    more = False\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "matrix = [[1, 2, 3],\n          [4, 5, 6],\n          [7, 8, 9]]\n",
    "regex = r'^\\s*(\\d+)\\s*$'\npath = 'C:\\\\Users\\\\me\\\\file.txt'\n",
    "@decorator(arg=\"x\")\nclass Foo(Base):\n    __slots__ = ('a', 'b')\n",
]
IDENTS = ["token_id", "n_vocab", "kvCache", "HTTPServer", "parse_json", "x1", "_private", "__init__",
          "maxValue", "snake_case_name", "CamelCaseName", "ALL_CAPS", "i", "j2k", "utf8Len"]


def code_doc(r):
    s = r.pick(CODE)
    if r.chance(1, 2):
        ident = r.pick(IDENTS)
        s += f"{ident} = {r.below(100000)}{r.pick([';', '', ' ', '  # note'])}\n"
    if r.chance(1, 3):
        s = s.replace("    ", "\t") if r.chance(1, 2) else s.replace("\n", "\r\n")
    return s


# ---- Numbers ----------------------------------------------------------------------------------

def number(r):
    k = r.below(12)
    if k == 0:
        return str(r.below(10))
    if k == 1:
        return "".join(str(r.below(10)) for _ in range(1 + r.below(30)))
    if k == 2:
        return f"{r.below(1000)}.{r.below(100000):05d}"
    if k == 3:
        return f"{r.below(999)},{r.below(1000):03d},{r.below(1000):03d}"
    if k == 4:
        return f"-{r.below(10 ** 6)}e{r.pick(['+', '-', ''])}{r.below(40)}"
    if k == 5:
        return f"0x{r.next() & 0xFFFFFFFF:08X}"
    if k == 6:
        return f"{2000 + r.below(30)}-{1 + r.below(12):02d}-{1 + r.below(28):02d}"
    if k == 7:
        return f"+1 ({r.below(1000):03d}) {r.below(1000):03d}-{r.below(10000):04d}"
    if k == 8:
        return f"{r.below(100)}%"
    if k == 9:
        return f"v{r.below(10)}.{r.below(20)}.{r.below(100)}"
    if k == 10:
        return r.pick(["\u0661\u0662\u0663", "\u0967\u0968\u0969", "\u2460\u2461", "\u00bd", "\u2153",
                       "\uff11\uff12\uff13", "\u2167", "\u00b2\u00b3", "\u0e51\u0e52"])
    return f"{r.below(10)} {r.below(10)}  {r.below(100)}   {r.below(1000)}"


def numbers_doc(r):
    return " ".join(number(r) for _ in range(3 + r.below(12))) + r.pick(["", ".", "\n", " "])


# ---- Whitespace -------------------------------------------------------------------------------

WS = [" ", "  ", "   ", "    ", " " * 8, " " * 17, " " * 40, "\t", "\t\t", "\t \t", "\n", "\n\n",
      "\n\n\n", "\n" * 7, "\r\n", "\r\n\r\n", "\r", " \n ", "\n  \n", "\u00a0", "\u2003", "\u2009",
      "\u3000", "\u200b", "\u2028", "\u2029", "\u0085", "\x0b", "\x0c", " \u00a0 ", "\ufeff", "\u180e"]


def whitespace_doc(r):
    parts = []
    for _ in range(4 + r.below(10)):
        parts.append(r.pick(WS))
        if r.chance(2, 3):
            parts.append(r.pick(["word", "x", "42", "!", "é", "猫", "Ω", "--", "'s", "a b"]))
    return "".join(parts)


# ---- Emoji ------------------------------------------------------------------------------------

EMOJI = ["\U0001F600", "\U0001F602", "\U0001F60D", "\U0001F914", "\U0001F680", "\U0001F40D", "\u2764\ufe0f",
         "\u2764", "\U0001F44D\U0001F3FD", "\U0001F44B\U0001F3FF", "\U0001F469\u200d\U0001F4BB",
         "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466", "\U0001F3F3\ufe0f\u200d\U0001F308",
         "\U0001F1EB\U0001F1F7", "\U0001F1EF\U0001F1F5", "1\ufe0f\u20e3", "#\ufe0f\u20e3", "\u263a\ufe0f",
         "\U0001F9D1\U0001F3FC\u200d\U0001F52C", "\U0001F436", "\U0001F355", "\u2728", "\U0001F525",
         "\U0001FAE0", "\U0001F9FF", "\U0001F3F4\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F"]


def emoji_doc(r):
    parts = []
    for _ in range(3 + r.below(10)):
        parts.append(r.pick(EMOJI))
        parts.append(r.pick(["", "", " ", "  ", "!", " ok ", "\n", "x"]))
    return "".join(parts)


# ---- Other scripts (sentences written for this corpus) ----------------------------------------

SCRIPTS = {
    "cjk_zh": ["我们今天去公园散步。", "这个程序运行得很快，但是内存不够。", "天气预报说明天会下雨。",
               "请把文件保存到桌面上。", "他用三分钟写完了代码！"],
    "cjk_ja": ["今日は良い天気ですね。", "東京駅で友達に会いました。", "このプログラムはカタカナとひらがなを使います。",
               "ラーメンを食べたい。", "明日の会議は午後３時からです。"],
    "cjk_ko": ["오늘은 날씨가 정말 좋네요.", "저는 프로그래밍을 좋아합니다.", "내일 다시 만나요!",
               "한국어 문장을 토큰화합니다."],
    "arabic": ["مرحبا بكم في المكتبة.", "القطة تنام على الكرسي الأزرق.", "كَتَبَ الطَّالِبُ الدَّرْسَ بِعِنَايَةٍ.",
               "هل تريد فنجان قهوة؟", "العدد ١٢٣ أكبر من ٩٩."],
    "hindi": ["नमस्ते, आप कैसे हैं?", "यह कार्यक्रम बहुत तेज़ चलता है।", "मुझे चाय पसंद है।",
              "हिन्दी में संयुक्ताक्षर जैसे क्ष, त्र और ज्ञ होते हैं।", "संख्या १२३४ है।"],
    "cyrillic": ["Привет, как дела?", "Компилятор выдал ошибку на строке 42.", "Съешь же ещё этих мягких булок.",
                 "Українська мова має літери ї, є, ґ.", "Ёлка стоит в углу."],
    "greek": ["Καλημέρα σε όλους!", "Η γάτα κοιμάται στον καναπέ.", "Το πρόγραμμα τρέχει γρήγορα;",
              "ΑΒΓΔ αβγδ ΣΣς", "Ψυχή και νους."],
    "latin_acc": ["Café, naïve, façade, jalapeño, Ångström, œuvre, Straße, Łódź, Dvořák, São Paulo.",
                  "Él comió piña y crème brûlée en Zürich.", "Ça va très bien, merci!",
                  "İstanbul'da ılık bir gün; ĞÜŞÖÇ ğüşöç.", "Þorsteinn og Ævar fóru í ferð."],
    "combining": ["e\u0301cole", "n\u0303o", "a\u0308\u0304", "Z\u0351\u0300\u0353a\u0336\u0317l\u0308\u0324g\u0300o\u0335",
                  "cafe\u0301 vs caf\u00e9", "\u0915\u094d\u200d\u0937", "o\u0308\u0301\u0323\u0304",
                  "\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd", "\u0e01\u0e34\u0e19\u0e02\u0e49\u0e32\u0e27"],
    "rare": ["\ue000\ue001\uf8ff", "\U000F0000\U0010FFFD", "\ufffe\uffff", "\U0010FFFF", "\U0001D518\U0001D52B\U0001D526",
             "\U00010000\U00010001", "\U00012000\U00012001", "\U0001D11E\U0001D160", "\u2603\u2620\u262f",
             "\u00ad soft\u00adhyphen", "\u200e\u200f\u202a\u202c", "\u2060\u2061", "\U0001F9FF\U0001FA70",
             "\u0000nul\u0001\u0002\u001b[0m", "\ufffd\ufffd replacement", "\u2126\u212a\u212b", "\ufb01\ufb02",
             "\u1e9e\u00df", "\u0130\u0131", "\u01c5\u01c8\u01cb"],
}


def script_doc(r, name):
    k = 1 + r.below(4)
    sep = r.pick([" ", "", "\n", "  "])
    return sep.join(r.pick(SCRIPTS[name]) for _ in range(k))


# ---- Special-token look-alikes -----------------------------------------------------------------

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>", "<bos>",
            "<eos>", "<pad>", "<unk>", "<mask>", "[multimodal]", "<start_of_image>", "<end_of_image>",
            "<unused0>", "<unused42>", "<unused6241>", "<repo_name>", "<reponame>", "<file_sep>",
            "<filename>", "<gh_stars>", "<jupyter_code>", "<empty_output>", "<|im_start", "|im_end|>",
            "<|im_start|", "< |im_end| >", "<<|im_end|>|>", "<|IM_START|>", "<start_of_turn", "<end_of_turn>>",
            "<s>", "</s>", "<0x41>", "<0xF0>", "\u2581hello", "\u2581\u2581", "<|eot_id|>", "<think>", "</think>"]


def special_doc(r):
    parts = []
    for _ in range(2 + r.below(8)):
        parts.append(r.pick(SPECIALS))
        parts.append(r.pick(["", "", " ", "user\n", "model\n", "\n", "Hello", " world ", "  ", "\n\n", "assistant"]))
    return "".join(parts)


def chat_doc(r):
    turns = []
    for _ in range(1 + r.below(3)):
        role = r.pick(["system", "user", "assistant"])
        if r.chance(1, 2):
            turns.append(f"<|im_start|>{role}\n{sentence(r)}<|im_end|>\n")
        else:
            turns.append(f"<start_of_turn>{r.pick(['user', 'model'])}\n{sentence(r)}<end_of_turn>\n")
    return "".join(turns)


# ---- Invalid UTF-8 ----------------------------------------------------------------------------

INVALID = [b"\x80", b"\xbf\xbf", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf8", b"\xff\xfe", b"\xfe", b"\xc3\x28", b"\xe2\x28\xa1",
           b"\xf0\x28\x8c\xbc", b"\xa0\xa1", b"\xf0\x90\x28\xbc", b"\xc1\xbf", b"\xed\xa0\x80\xed\xb0\x80"]


def invalid_doc(r):
    parts = []
    for _ in range(2 + r.below(6)):
        parts.append(r.pick(INVALID))
        parts.append(r.pick(["abc", " ", "é", "\U0001F600", "日本", "\n", "", "x y", "'s"]).encode())
    return b"".join(parts)


# ---- Literal escapes that look like surrogates ------------------------------------------------

ESCAPES = ["\\ud800", "\\uDFFF", "\\ud83d\\ude00", "&#xD800;", "&#55357;", "%ED%A0%80", "\\xed\\xa0\\x80",
           "U+D800", "\\U0001F600", "\\N{SNOWMAN}", "\\u{1F600}"]


def escape_doc(r):
    return " ".join(r.pick(ESCAPES) + r.pick(["", " text", "\n"]) for _ in range(2 + r.below(5)))


# ---- Mixed ------------------------------------------------------------------------------------

def mixed_doc(r):
    makers = [lambda: sentence(r), lambda: code_doc(r), lambda: numbers_doc(r), lambda: whitespace_doc(r),
              lambda: emoji_doc(r), lambda: special_doc(r), lambda: escape_doc(r),
              lambda: script_doc(r, r.pick(sorted(SCRIPTS)))]
    return r.pick(["", " ", "\n", "\t"]).join(r.pick(makers)() for _ in range(2 + r.below(5)))


def long_runs(r):
    return [
        ("long_spaces", " " * 300 + "x" + " " * 301),
        ("long_newlines", "\n" * 120 + "end"),
        ("long_tabs", "\t" * 90 + "tab"),
        ("long_letters", "a" * 500),
        ("long_digits", "7" * 257),
        ("long_emoji", "\U0001F600" * 60),
        ("long_cjk", "漢字" * 150),
        ("long_punct", "!?" * 200 + "." * 99),
        ("long_mixed_ws", " \t\n\r\n\u00a0" * 40),
        ("long_word", "supercalifragilistic" * 20),
        ("empty_like_space", " "),
        ("single_newline", "\n"),
        ("single_special", "<|im_end|>"),
        ("special_then_space", "<start_of_turn> "),
    ]


def generate():
    r = Rng(0x5EED_1234_ABCD)
    docs = []
    kinds = [("prose", lambda: paragraph(r, 1 + r.below(6))), ("code", lambda: code_doc(r)),
             ("numbers", lambda: numbers_doc(r)), ("ws", lambda: whitespace_doc(r)),
             ("emoji", lambda: emoji_doc(r)), ("special", lambda: special_doc(r)), ("chat", lambda: chat_doc(r)),
             ("escape", lambda: escape_doc(r)), ("mixed", lambda: mixed_doc(r))]
    for name in sorted(SCRIPTS):
        kinds.append((name, (lambda n: lambda: script_doc(r, n))(name)))
    counts = {}
    for i in range(1100):
        kind, maker = kinds[i % len(kinds)]
        counts[kind] = counts.get(kind, 0) + 1
        docs.append((f"{kind}_{counts[kind]:03d}", maker()))
    for i in range(60):
        docs.append((f"invalid_{i + 1:03d}", invalid_doc(r)))
    docs.extend(long_runs(r))
    return docs


def main():
    lines = []
    total = 0
    for name, doc in generate():
        if isinstance(doc, bytes):
            lines.append(json.dumps({"name": name, "hex": doc.hex()}))
            total += len(doc)
        else:
            lines.append(json.dumps({"name": name, "text": doc}, ensure_ascii=True))
            total += len(doc.encode("utf-8"))
    (HERE / "docs.jsonl").write_text("\n".join(lines) + "\n", encoding="ascii")
    print(f"wrote {len(lines)} documents, {total} bytes of text")


if __name__ == "__main__":
    main()
