"""tools/check_layers.py: the tree's includes follow the CMake part graph, and the check catches
a forbidden include, an include of a part that does not exist, and a cycle in the graph."""
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECK = ROOT / "tools" / "check_layers.py"


def run_check(root):
    return subprocess.run([sys.executable, str(CHECK), "--root", str(root)],
                          capture_output=True, text=True, timeout=120)


def test_tree_follows_the_declared_layers():
    r = run_check(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "layer order" in r.stdout
    assert "0: base" in r.stdout


@pytest.fixture
def tree_copy(tmp_path):
    """The part of the tree the check reads: CMake files and sources (no build/, no models)."""
    copy = tmp_path / "loom"
    copy.mkdir()
    shutil.copy(ROOT / "CMakeLists.txt", copy / "CMakeLists.txt")
    ignore = shutil.ignore_patterns("py", "corpus", "__pycache__")
    for top in ("src", "apps", "tests", "fuzz"):
        if (ROOT / top).is_dir():
            shutil.copytree(ROOT / top, copy / top, ignore=ignore)
    assert run_check(copy).returncode == 0, "the unmodified copy must pass"
    return copy


def plant(path, line):
    """Adds an #include after the file's first #include and returns that line's number."""
    lines = path.read_text().splitlines()
    at = next(i for i, text in enumerate(lines) if text.startswith("#include")) + 1
    lines.insert(at, line)
    path.write_text("\n".join(lines) + "\n")
    return at + 1


def test_forbidden_include_fails_and_is_named(tree_copy):
    # base is layer 0: it may include nothing but itself.
    victim = tree_copy / "src" / "loom" / "base" / "log.cpp"
    lineno = plant(victim, '#include "loom/serve/server.h"')
    r = run_check(tree_copy)
    assert r.returncode == 1
    offending = [line for line in r.stderr.splitlines() if line.startswith("src/loom/base/log.cpp")]
    assert offending == [f"src/loom/base/log.cpp:{lineno}: base -> serve: not a declared dependency "
                         "(base may include: base)"], r.stderr
    assert "1 forbidden include(s)" in r.stderr


def test_relative_include_into_another_part_is_checked(tree_copy):
    victim = tree_copy / "src" / "loom" / "ir" / "ir.cpp"
    lineno = plant(victim, '#include "../kernels/op_spec.h"')
    r = run_check(tree_copy)
    assert r.returncode == 1
    assert f"src/loom/ir/ir.cpp:{lineno}: ir -> kernels: not a declared dependency" in r.stderr


def test_tests_may_include_any_part_but_not_a_missing_one(tree_copy):
    test_file = next((tree_copy / "tests" / "base").glob("*.cpp"))
    plant(test_file, '#include "loom/serve/server.h"')
    assert run_check(tree_copy).returncode == 0
    lineno = plant(test_file, '#include "loom/llm/engine.h"')
    r = run_check(tree_copy)
    assert r.returncode == 1
    assert f"{test_file.relative_to(tree_copy)}:{lineno}: tests -> llm: no part 'llm'" in r.stderr


def test_cmake_cycle_fails(tree_copy):
    cmake = tree_copy / "CMakeLists.txt"
    text = cmake.read_text()
    assert "loom_part(gguf DEPS loom_base)" in text
    cmake.write_text(text.replace("loom_part(gguf DEPS loom_base)", "loom_part(gguf DEPS loom_base loom_ref)"))
    r = run_check(tree_copy)
    assert r.returncode == 1
    assert "CMake dependency cycle: gguf -> ref -> gguf" in r.stderr


def test_undeclared_source_directory_fails(tree_copy):
    (tree_copy / "src" / "loom" / "orphan").mkdir()
    (tree_copy / "src" / "loom" / "orphan" / "x.cpp").write_text('#include "loom/base/status.h"\n')
    r = run_check(tree_copy)
    assert r.returncode == 1
    assert "src/loom/orphan/: a directory of sources that no loom_part() declares" in r.stderr


def test_architecture_diagram_matches_the_cmake_graph(tmp_path):
    """docs/architecture.svg is drawn from docs/architecture.dot, which must be what the CMake
    graph gives today (redraw with tools/draw_architecture.sh)."""
    out = tmp_path / "architecture.dot"
    subprocess.run([sys.executable, str(CHECK), "--root", str(ROOT), "--dot", str(out)],
                   capture_output=True, text=True, timeout=120)
    committed = ROOT / "docs" / "architecture.dot"
    assert committed.exists(), "docs/architecture.dot is missing: run tools/draw_architecture.sh"
    assert out.read_text() == committed.read_text(), \
        "the part graph in CMakeLists.txt changed: run tools/draw_architecture.sh and commit docs/architecture.*"
