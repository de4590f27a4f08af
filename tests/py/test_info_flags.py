"""`loom info --flags`: the option registry lists every LOOM_* variable that the sources, tools,
tests and docs name, except those docs/options.md lists as not options, C/C++ macros and CMake
settings; refused environment values are reported, and stop every other command."""
import json
import os
import re

from conftest import ROOT, run_loom

NAME = re.compile(r"\bLOOM_[A-Z0-9_]*[A-Z0-9]\b")
SCANNED = ["src", "apps", "tools", "tests", "docs"]
TEXT_SUFFIXES = {".cpp", ".h", ".c", ".cc", ".py", ".sh", ".md", ".txt", ".cmake", ".json", ".loom", ""}


def scanned_files():
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(ROOT / top):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in filenames:
                p = os.path.join(dirpath, f)
                if os.path.splitext(f)[1] in TEXT_SUFFIXES:
                    yield p


def names_in(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return set(NAME.findall(fh.read()))
    except OSError:
        return set()


def macro_and_cmake_names():
    """Preprocessor macros (#define/#if/#ifdef NAME) and names any CMake file mentions."""
    out = set()
    macro = re.compile(r"#\s*(?:define|ifdef|ifndef|undef|if|elif)\s+(?:!?\s*defined\s*\(?\s*)?(LOOM_[A-Z0-9_]+)")
    for top in ["src", "apps", "tests", "fuzz"]:
        for dirpath, _, filenames in os.walk(ROOT / top):
            for f in filenames:
                if os.path.splitext(f)[1] in (".cpp", ".h", ".c", ".cc"):
                    with open(os.path.join(dirpath, f), encoding="utf-8", errors="replace") as fh:
                        out |= set(macro.findall(fh.read()))
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in ("build", "bench")]
        for f in filenames:
            if f == "CMakeLists.txt" or f.endswith(".cmake"):
                out |= names_in(os.path.join(dirpath, f))
    return out


def documented_non_options():
    """Backticked names in docs/options.md's section 'Names that are not options'."""
    text = (ROOT / "docs" / "options.md").read_text()
    m = re.search(r"^## Names that are not options\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, "docs/options.md has no 'Names that are not options' section"
    section = m.group(1)
    removed = re.search(r"^### Removed switches\n(.*?)(?=^##|\Z)", section, re.S | re.M)
    return set(re.findall(r"`(LOOM_[A-Z0-9_]+)", section)), set(re.findall(r"`(LOOM_[A-Z0-9_]+)", removed.group(1) if removed else ""))


def flags_json(loom_bin, env=None):
    r = run_loom(loom_bin, "info", "--flags", "--json", env=env)
    return json.loads(r.stdout)["options"]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_") or k in ("LOOM_BIN", "LOOM_CACHE_DIR")}
    env.update(extra)
    return env


def test_every_named_variable_is_an_option_or_documented_as_not_one(loom_bin):
    listed = {o["env"] for o in flags_json(loom_bin, clean_env()) if o["env"]}
    not_options, removed = documented_non_options()
    excluded = not_options | macro_and_cmake_names()
    named = {}
    for path in scanned_files():
        for n in names_in(path):
            named.setdefault(n, os.path.relpath(path, ROOT))
    unlisted = {n: p for n, p in named.items() if n not in listed and n not in excluded}
    assert not unlisted, ("LOOM_* names that are neither options (loom info --flags) nor listed in docs/options.md "
                          f"as not options: {sorted(unlisted.items())}")
    both = listed & not_options
    assert not both, f"docs/options.md calls these options 'not options': {sorted(both)}"


def test_removed_switches_are_not_read(loom_bin):
    _, removed = documented_non_options()
    assert removed, "docs/options.md lists no removed switches"
    readers = {}
    for top in ("src", "apps"):
        for dirpath, _, filenames in os.walk(ROOT / top):
            for f in filenames:
                p = os.path.join(dirpath, f)
                for n in names_in(p) & removed:
                    readers.setdefault(n, []).append(os.path.relpath(p, ROOT))
    assert not readers, f"switches docs/options.md lists as removed are still named in the code: {readers}"


def test_each_option_listed_once_with_default_value_and_source(loom_bin):
    opts = flags_json(loom_bin, clean_env())
    names = [o["name"] for o in opts]
    assert len(names) == len(set(names))
    envs = [o["env"] for o in opts if o["env"]]
    assert len(envs) == len(set(envs))
    for o in opts:
        assert o["type"] in ("bool", "int", "double", "string", "path"), o
        assert o["source"] in ("default", "env", "flag"), o
        assert o["help"], o
        assert "default" in o and "value" in o, o
    by_env = {o["env"]: o for o in opts}
    for system in ("TMPDIR", "HOME", "XDG_CACHE_HOME", "PATH"):
        assert by_env[system].get("system"), system
    assert by_env["LOOM_THREADS"]["source"] == "default"
    assert by_env["LOOM_FUSE"]["default"] == "gpu" and by_env["LOOM_FUSE"]["choices"] == "gpu|0|1"
    assert by_env["LOOM_DECODE_ATTENTION_MAX"]["default"] == "8"


def test_environment_value_and_source(loom_bin):
    by_env = {o["env"]: o for o in flags_json(loom_bin, clean_env(LOOM_THREADS="3", LOOM_PROFILE="yes"))}
    assert by_env["LOOM_THREADS"]["value"] == "3" and by_env["LOOM_THREADS"]["source"] == "env"
    assert by_env["LOOM_PROFILE"]["value"] == "1" and by_env["LOOM_PROFILE"]["source"] == "env"


def test_secrets_are_not_printed(loom_bin):
    env = clean_env(LOOM_API_KEY="hunter2", LOOM_LLM_KEY="sk-secret")
    r = run_loom(loom_bin, "info", "--flags", "--json", env=env)
    assert "hunter2" not in r.stdout and "sk-secret" not in r.stdout
    r = run_loom(loom_bin, "info", "--flags", env=env)
    assert "hunter2" not in r.stdout and "sk-secret" not in r.stdout


def test_refused_environment_value_is_listed_and_stops_other_commands(loom_bin):
    env = clean_env(LOOM_THREADS="abc")
    by_env = {o["env"]: o for o in flags_json(loom_bin, env)}
    t = by_env["LOOM_THREADS"]
    assert t["source"] == "default" and t["value"] == "2"
    assert "LOOM_THREADS=abc" in t["error"] and "integer" in t["error"], t
    text = run_loom(loom_bin, "info", "--flags", env=env).stdout
    assert "refused: LOOM_THREADS=abc" in text
    r = run_loom(loom_bin, "devices", env=env, check=False)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "LOOM_THREADS=abc: expected an integer in [1, 1024]" in r.stderr, r.stderr
    r = run_loom(loom_bin, "devices", env=clean_env(LOOM_LOG="verbose"), check=False)
    assert r.returncode == 2 and "LOOM_LOG=verbose: expected one of error|warn|info|debug" in r.stderr, r.stderr


def test_text_listing_names_every_option(loom_bin):
    text = run_loom(loom_bin, "info", "--flags", env=clean_env()).stdout
    for o in flags_json(loom_bin, clean_env()):
        assert re.search(rf"^{re.escape(o['name'])}\s", text, re.M), o["name"]
