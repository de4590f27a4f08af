"""Oracle test: Loom's tokenizer against llama.cpp (llama-cpp-python, vocab_only=True).

For both reference models and every corpus document (tests/py/corpus/docs.jsonl):
  * `loom tokenize` ids == Llama.tokenize(bytes, add_bos=True, special=True), and the same with
    --no-special (special=False) and --no-bos (add_bos=False);
  * `loom detokenize` bytes == llama_detokenize(remove_special=True, unparse_special=True), so
    detokenize(tokenize(x)) == x wherever llama.cpp round-trips too;
  * every token's piece == llama_token_to_piece(special=True/False);
  * special ids and the end-of-generation set agree.
The SmolLM2 vocabulary is also re-labelled with other `tokenizer.ggml.pre` values (files written
to a temp dir with the gguf package) to check the other pre-tokenizer regexes.

Known divergence, kept out of the corpus on purpose: llama.cpp's Unicode tables are 15.1, PCRE2
in Debian 12 is Unicode 14, so letters first assigned in 15.0/15.1 (e.g. Kawi, CJK Ext. H/I)
can split differently in BPE pre-tokenization.
"""
import ctypes
import functools
import json
import pathlib
import random
import subprocess

import gguf
import llama_cpp
import pytest

from conftest import model_path

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus" / "docs.jsonl"
MAX_REPORT = 8


def load_corpus():
    docs = []
    for line in CORPUS.read_text(encoding="ascii").splitlines():
        d = json.loads(line)
        data = bytes.fromhex(d["hex"]) if "hex" in d else d["text"].encode("utf-8")
        docs.append((d["name"], data))
    return docs


DOCS = load_corpus()


def test_corpus_is_big_and_varied():
    total = sum(len(b) for _, b in DOCS)
    assert total >= 100_000, f"corpus has only {total} bytes"
    assert len(DOCS) >= 500
    kinds = {name.rsplit("_", 1)[0] for name, _ in DOCS}
    for kind in ["prose", "code", "numbers", "ws", "emoji", "special", "cjk_zh", "arabic", "hindi",
                 "cyrillic", "greek", "latin_acc", "combining", "rare", "invalid", "escape"]:
        assert kind in kinds, f"corpus lacks {kind} documents"


# ---- helpers ------------------------------------------------------------------------------------

_LLAMAS = {}


def llama_for(path):
    path = str(path)
    if path not in _LLAMAS:
        _LLAMAS[path] = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    return _LLAMAS[path]


def vocab_of(llm):
    return llm._model.vocab


def jsonl_input(docs):
    lines = []
    for _, data in docs:
        try:
            lines.append(json.dumps(data.decode("utf-8")))
        except UnicodeDecodeError:
            lines.append(json.dumps(list(data)))
    return ("\n".join(lines) + "\n").encode()


def loom(loom_bin, args, stdin: bytes) -> bytes:
    proc = subprocess.run([str(loom_bin), *map(str, args)], input=stdin, capture_output=True, timeout=600)
    assert proc.returncode == 0, f"loom {' '.join(map(str, args))} failed: {proc.stderr.decode(errors='replace')}"
    return proc.stdout


def loom_tokenize(loom_bin, model, docs, *flags):
    out = loom(loom_bin, ["tokenize", "-m", model, "--jsonl", *flags], jsonl_input(docs)).decode()
    result = [json.loads(line) for line in out.splitlines()]
    assert len(result) == len(docs), f"loom printed {len(result)} lines for {len(docs)} documents"
    return result


def loom_detokenize(loom_bin, model, id_lists, *flags):
    stdin = ("\n".join(json.dumps(ids) for ids in id_lists) + "\n").encode()
    out = loom(loom_bin, ["detokenize", "-m", model, "--jsonl", *flags], stdin).decode()
    result = [bytes(json.loads(line)) for line in out.splitlines()]
    assert len(result) == len(id_lists)
    return result


def llama_detokenize(llm, ids, remove_special, unparse_special):
    vocab = vocab_of(llm)
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    size = 4 * sum(1 for _ in ids) * 64 + 64
    buf = ctypes.create_string_buffer(size)
    n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, size, remove_special, unparse_special)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, -n, remove_special, unparse_special)
    assert n >= 0
    return buf.raw[:n]


def llama_piece(llm, token, special):
    vocab = vocab_of(llm)
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, 256, 0, special)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, -n, 0, special)
    return buf.raw[:n]


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def assert_all_equal(label, names, expected, actual, docs=None):
    bad = [i for i in range(len(names)) if expected[i] != actual[i]]
    if not bad:
        return
    lines = [f"{label}: {len(bad)} of {len(names)} documents differ from llama.cpp"]
    for i in bad[:MAX_REPORT]:
        e, a = expected[i], actual[i]
        k = first_diff(e, a)
        text = f" text={docs[i][1][:80]!r}" if docs else ""
        lines.append(f"  {names[i]}: first difference at {k}: llama={e[max(0, k - 3):k + 5]} "
                     f"loom={a[max(0, k - 3):k + 5]} (lengths {len(e)} vs {len(a)}){text}")
    pytest.fail("\n".join(lines))


# ---- tokenization -------------------------------------------------------------------------------

MODES = {
    "default": ([], dict(add_bos=True, special=True)),
    "no_special": (["--no-special"], dict(add_bos=True, special=False)),
    "no_bos": (["--no-bos"], dict(add_bos=False, special=True)),
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_tokenize_matches_llama(loom_bin, model, mode):
    flags, kw = MODES[mode]
    llm = llama_for(model)
    expected = [llm.tokenize(data, **kw) for _, data in DOCS]
    actual = loom_tokenize(loom_bin, model, DOCS, *flags)
    assert_all_equal(f"{model.name} tokenize ({mode})", [n for n, _ in DOCS], expected, actual, DOCS)
    print(f"{model.name} {mode}: {len(DOCS)} documents, {sum(map(len, expected))} tokens, all equal")


def test_whole_corpus_in_one_call(loom_bin, model):
    # One long input (raw stdin, not --jsonl): many special tokens and long runs in one text.
    text = b"\n".join(data for _, data in DOCS)
    expected = llama_for(model).tokenize(text, add_bos=True, special=True)
    actual = json.loads(loom(loom_bin, ["tokenize", "-m", model], text))
    assert len(actual) == len(expected) and actual == expected, (
        f"differs at token {first_diff(expected, actual)} of {len(expected)}")


def random_docs(n, seed):
    """Random byte strings mixing special-token texts, ASCII and multi-byte pieces. Four-byte forms
    above U+10FFFF are rewritten: llama.cpp aborts on them (a known divergence, see unicode.h)."""
    rng = random.Random(seed)
    pieces = [b"<|im_start|>", b"<|im_end|>", b"<start_of_turn>", b"<end_of_turn>", b"<bos>", b"<eos>",
              b"<unused7>", b"<reponame>", b"\n", b"\n\n\n", b"\t\t", b"  ", b" ", b"\xe2\x96\x81",
              "é".encode(), "日本".encode(), "\U0001F600".encode(), b"'s", b"123", b"Hello", b"\r\n"]
    docs = []
    for i in range(n):
        parts = []
        for _ in range(rng.randrange(1, 12)):
            k = rng.randrange(3)
            if k == 0:
                parts.append(rng.choice(pieces))
            elif k == 1:
                parts.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8))))
            else:
                parts.append(bytes(rng.randrange(32, 127) for _ in range(rng.randrange(1, 12))))
        data = bytearray(b"".join(parts))
        for j in range(len(data)):
            if 0xF5 <= data[j] <= 0xF7:
                data[j] = 0xF8
            elif data[j] == 0xF4 and j + 1 < len(data) and 0x90 <= data[j + 1] <= 0xBF:
                data[j + 1] = 0x80
        docs.append((f"random_{i:03d}", bytes(data)))
    return docs


def test_random_bytes_match_llama(loom_bin, model):
    docs = random_docs(400, seed=20261129)
    llm = llama_for(model)
    names = [n for n, _ in docs]
    for flags, kw in [MODES["default"], MODES["no_special"]]:
        expected = [llm.tokenize(data, **kw) for _, data in docs]
        assert_all_equal(f"{model.name} random bytes {flags}", names, expected,
                         loom_tokenize(loom_bin, model, docs, *flags), docs)


def test_text_pieces(loom_bin, model):
    docs = DOCS[:200]
    llm = llama_for(model)
    out = loom(loom_bin, ["tokenize", "-m", model, "--jsonl", "--text"], jsonl_input(docs)).decode()
    actual = [json.loads(line) for line in out.splitlines()]
    expected = [[llama_piece(llm, t, True).decode("utf-8", errors="replace") for t in llm.tokenize(d, add_bos=True, special=True)]
                for _, d in docs]
    assert_all_equal(f"{model.name} --text", [n for n, _ in docs], expected, actual)


# ---- detokenization -----------------------------------------------------------------------------

def test_detokenize_matches_llama_and_round_trips(loom_bin, model):
    llm = llama_for(model)
    ids = [llm.tokenize(data, add_bos=True, special=True) for _, data in DOCS]
    names = [n for n, _ in DOCS]
    expected = [llama_detokenize(llm, x, True, True) for x in ids]
    actual = loom_detokenize(loom_bin, model, ids)
    assert_all_equal(f"{model.name} detokenize", names, expected, actual)
    # Round trip wherever llama.cpp round-trips (invalid UTF-8 becomes U+FFFD in BPE, so not all).
    round_trip = [i for i in range(len(DOCS)) if expected[i] == DOCS[i][1]]
    assert len(round_trip) >= len(DOCS) * 0.9, f"llama.cpp itself round-trips only {len(round_trip)} documents"
    broken = [names[i] for i in round_trip if actual[i] != DOCS[i][1]]
    assert not broken, f"{len(broken)} documents do not round-trip: {broken[:MAX_REPORT]}"
    print(f"{model.name}: {len(round_trip)} of {len(DOCS)} documents round-trip in both")

    # Other flag combinations against llama_detokenize's parameters.
    for flags, rs, us in [(["--no-special"], True, False), (["--keep-special"], False, True),
                          (["--keep-special", "--no-special"], False, False)]:
        exp = [llama_detokenize(llm, x, rs, us) for x in ids]
        act = loom_detokenize(loom_bin, model, ids, *flags)
        assert_all_equal(f"{model.name} detokenize {' '.join(flags)}", names, exp, act)


def test_every_token_piece(loom_bin, model):
    llm = llama_for(model)
    n = llama_cpp.llama_vocab_n_tokens(vocab_of(llm))
    ids = [[i] for i in range(n)]
    names = [str(i) for i in range(n)]
    for flags, special in [(["--keep-special"], True), (["--keep-special", "--no-special"], False)]:
        expected = [llama_piece(llm, i, special) for i in range(n)]
        actual = loom_detokenize(loom_bin, model, ids, *flags)
        assert_all_equal(f"{model.name} pieces special={special}", names, expected, actual)


def test_detokenize_rejects_bad_ids(loom_bin, model):
    proc = subprocess.run([str(loom_bin), "detokenize", "-m", str(model)], input=b"[1, 99999999]",
                          capture_output=True, timeout=120)
    assert proc.returncode != 0 and b"outside the vocabulary" in proc.stderr
    proc = subprocess.run([str(loom_bin), "detokenize", "-m", str(model)], input=b"{\"not\": 1}",
                          capture_output=True, timeout=120)
    assert proc.returncode == 2 and b"JSON array" in proc.stderr


def test_special_ids_and_eog(loom_bin, model):
    llm = llama_for(model)
    vocab = vocab_of(llm)
    info = json.loads(loom(loom_bin, ["tokenize", "-m", model, "--info"], b""))
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    assert info["vocab_size"] == n
    assert info["bos"] == llama_cpp.llama_vocab_bos(vocab)
    assert info["eos"] == llama_cpp.llama_vocab_eos(vocab)
    assert info["eot"] == llama_cpp.llama_vocab_eot(vocab)
    assert info["pad"] == llama_cpp.llama_vocab_pad(vocab)
    assert info["add_bos"] == bool(llama_cpp.llama_vocab_get_add_bos(vocab))
    assert info["add_eos"] == bool(llama_cpp.llama_vocab_get_add_eos(vocab))
    eog = [i for i in range(n) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    assert info["eog"] == eog


# ---- other pre-tokenizers on SmolLM2's vocabulary ------------------------------------------------

PRE_VARIANTS = ["default", "gpt-2", "llama-bpe", "qwen2", "qwen35", "deepseek-llm", "deepseek-coder",
                "deepseek-v3", "falcon", "starcoder", "refact", "command-r", "olmo", "dbrx", "poro-chat",
                "chatglm-bpe", "viking", "jais", "jais-2", "tekken", "gpt-4o", "stablelm2", "seed-coder",
                "bailingmoe", "exaone-moe", "minicpm5", "chameleon", "youtu", "spark2_5", "ufakzeka",
                "granite-embed-multi-97m", "superbpe", "laguna", "smaug-bpe", "bloom"]


@functools.lru_cache(maxsize=None)
def metadata_of(src):
    """(name, type, sub_type, value) of every metadata key; reading is the slow part, so once."""
    reader = gguf.GGUFReader(str(src))
    out = []
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        out.append((name, vtype, sub, field.contents()))
    return tuple(out)


def write_variant(src, dst, pre):
    """A tensor-less copy of `src`'s metadata with tokenizer.ggml.pre set to `pre`."""
    meta = metadata_of(src)
    arch = next(value for name, _, _, value in meta if name == "general.architecture")
    writer = gguf.GGUFWriter(str(dst), arch)
    for name, vtype, sub, value in meta:
        if name == "general.architecture":
            continue
        writer.add_key_value(name, pre if name == "tokenizer.ggml.pre" else value, vtype, sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def variant_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("pre_variants")


@pytest.mark.parametrize("pre", PRE_VARIANTS)
def test_pre_tokenizer_variant(loom_bin, variant_dir, pre):
    path = variant_dir / f"smollm2-{pre}.gguf"
    write_variant(model_path("smollm2"), path, pre)
    llm = llama_for(path)
    docs = [d for d in DOCS if not d[0].startswith("long_")]
    expected = [llm.tokenize(data, add_bos=True, special=True) for _, data in docs]
    actual = loom_tokenize(loom_bin, path, docs)
    assert_all_equal(f"pre={pre} tokenize", [n for n, _ in docs], expected, actual, docs)
    # The clean-up pass of llama_detokenize depends on the variant too.
    exp = [llama_detokenize(llm, x, True, True) for x in expected]
    act = loom_detokenize(loom_bin, path, expected, "--clean-spaces")
    assert_all_equal(f"pre={pre} detokenize --clean-spaces", [n for n, _ in docs], exp, act)


def test_unknown_pre_tokenizer_is_refused(loom_bin, variant_dir):
    path = variant_dir / "smollm2-unknown.gguf"
    write_variant(model_path("smollm2"), path, "no-such-pre")
    with pytest.raises(Exception):  # llama.cpp: "unknown pre-tokenizer type: 'no-such-pre'"
        llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    proc = subprocess.run([str(loom_bin), "tokenize", "-m", str(path), "--info"], capture_output=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stdout == b""
    assert b"unknown pre-tokenizer type 'no-such-pre'" in proc.stderr
    assert proc.stderr.count(b"\n") == 1, proc.stderr


def test_empty_pre_tokenizer_falls_back_to_default(loom_bin, variant_dir):
    path = variant_dir / "smollm2-empty-pre.gguf"
    write_variant(model_path("smollm2"), path, "")
    proc = subprocess.run([str(loom_bin), "tokenize", "-m", str(path), "--info"], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["pre"] == "default"
    assert b"missing pre-tokenizer type" in proc.stderr
    # llama.cpp also treats a missing/empty pre as "default"; compare tokenization with it.
    docs = DOCS[:300]
    expected = [llama_for(path).tokenize(d, add_bos=True, special=True) for _, d in docs]
    assert_all_equal("pre=''", [n for n, _ in docs], expected, loom_tokenize(loom_bin, path, docs), docs)
