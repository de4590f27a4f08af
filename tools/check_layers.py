#!/usr/bin/env python3
"""Checks that every #include between Loom's parts follows the dependency graph that CMake builds.

The allowed edges have one source: the `loom_part(NAME DEPS loom_a loom_b ...)` calls (and any
`target_link_libraries(loom_NAME ... loom_x)`) in the top CMakeLists.txt and in
src/loom/*/CMakeLists.txt; the CLI (apps/) may include what the `loom` executable links. The rule
is direct: a part may include only itself and the parts it names in DEPS, not the parts it reaches
through them. A part that uses a header of another part then says so in its CMake line, so the
build graph is the include graph (the diagram in docs/architecture.md is drawn from it), and a
part cannot lose headers it relies on when one of its dependencies drops a dependency of its own.
tests/ and fuzz/ may include any part; there the check only refuses parts that do not exist.
src/ggml_hrx/ (the ggml backend, not a part: it is built only against a fetched llama.cpp) may
include the parts that the `set(LOOM_GGML_HRX_DEPS ...)` line of CMakeLists.txt names.

Fails (exit 1) with one line per offending include, and when the CMake graph has a cycle, a
source directory under src/loom/ that no loom_part() declares, or a DEPS entry naming no part.
Prints the layer order it derived (layer 0 depends on nothing; a part sits one layer above the
highest of its dependencies).

  tools/check_layers.py                  check the tree this script lives in
  tools/check_layers.py --root DIR       check another copy of the tree
  tools/check_layers.py --dot FILE       also write the graph (graphviz) for docs/architecture.svg
  tools/check_layers.py --unused         also name declared dependencies that no include uses
"""
import argparse
import pathlib
import re
import sys

SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".c", ".inc"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
LOOM_INCLUDE_RE = re.compile(r"^loom/([A-Za-z0-9_]+)/")


def strip_cmake_comments(text):
    # CMake comments run from '#' to the end of the line; the files checked here have no '#'
    # inside strings, and bracket comments are not used.
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def cmake_calls(text, command):
    """Yields the argument lists of every `command(...)` call (arguments split on whitespace)."""
    for m in re.finditer(r"\b" + command + r"\s*\(([^)]*)\)", text):
        yield m.group(1).split()


class Graph:
    """The parts and their declared dependencies, read from CMake."""

    def __init__(self, root):
        self.root = root
        self.deps = {}        # part -> set of parts it declares
        self.apps = set()     # parts the `loom` executable links
        self.ggml_hrx = set()  # parts src/ggml_hrx/ may include (LOOM_GGML_HRX_DEPS)
        self.errors = []
        self.declared = []    # (part, dep, CMake file) for each DEPS entry, checked in validate()
        files = [root / "CMakeLists.txt"] + sorted((root / "src" / "loom").glob("*/CMakeLists.txt"))
        texts = {f: strip_cmake_comments(f.read_text()) for f in files if f.exists()}
        variables = {}
        for f, text in texts.items():
            for args in cmake_calls(text, "set"):
                if args:
                    variables[args[0]] = args[1:]
            for args in cmake_calls(text, "loom_part"):
                name, rest = args[0], args[1:]
                deps = rest[rest.index("DEPS") + 1:] if "DEPS" in rest else []
                parts = self._parts(deps)
                self.deps.setdefault(name, set()).update(parts)
                self.declared += [(name, d, f) for d in sorted(parts)]
        for f, text in texts.items():
            for args in cmake_calls(text, "target_link_libraries"):
                if not args:
                    continue
                target, libs = args[0], self._expand(args[1:], variables)
                if target == "loom":
                    self.apps.update(self._parts(libs))
                elif target.startswith("loom_") and target[5:] in self.deps:
                    self.deps[target[5:]].update(self._parts(libs))
        for part, deps in self.deps.items():
            deps.discard(part)
        self.ggml_hrx = self._parts(variables.get("LOOM_GGML_HRX_DEPS", []))

    @staticmethod
    def _expand(args, variables):
        out = []
        for a in args:
            m = re.fullmatch(r"\$\{(\w+)\}", a)
            out.extend(variables.get(m.group(1), []) if m else [a])
        return out

    @staticmethod
    def _parts(libs):
        """The Loom parts among CMake link items (loom_x -> x); other libraries are ignored."""
        return {lib[5:] for lib in libs
                if lib.startswith("loom_") and lib not in ("loom_thirdparty", "loom_git_commit")}

    def validate(self):
        for owner, dep, cmake_file in self.declared:
            if dep not in self.deps:
                self.errors.append(f"{cmake_file.relative_to(self.root)}: loom_part({owner}) "
                                   f"depends on loom_{dep}, which no loom_part() declares")
        for dep in sorted(self.ggml_hrx - set(self.deps)):
            self.errors.append(f"CMakeLists.txt: LOOM_GGML_HRX_DEPS names loom_{dep}, "
                               f"which no loom_part() declares")
        for d in sorted(p.name for p in (self.root / "src" / "loom").iterdir() if p.is_dir()):
            if d not in self.deps:
                self.errors.append(f"src/loom/{d}/: a directory of sources that no loom_part() "
                                   f"declares (add loom_part({d} DEPS ...) to CMakeLists.txt)")
        cycle = self.find_cycle()
        if cycle:
            self.errors.append("CMake dependency cycle: " + " -> ".join(cycle))
        return not self.errors

    def find_cycle(self):
        state = {}  # part -> 1 while on the DFS stack, 2 when done

        def visit(p, stack):
            state[p] = 1
            stack.append(p)
            for d in sorted(self.deps.get(p, ())):
                if state.get(d) == 1:
                    return stack[stack.index(d):] + [d]
                if d in self.deps and d not in state:
                    found = visit(d, stack)
                    if found:
                        return found
            stack.pop()
            state[p] = 2
            return None

        for p in sorted(self.deps):
            if p not in state:
                found = visit(p, [])
                if found:
                    return found
        return None

    def layers(self):
        """part -> layer (longest dependency chain below it); only valid without cycles."""
        memo = {}

        def layer(p):
            if p not in memo:
                memo[p] = 1 + max((layer(d) for d in self.deps[p] if d in self.deps), default=-1)
            return memo[p]

        return {p: layer(p) for p in self.deps}

    def reduced_edges(self):
        """The declared edges not implied by a longer path (what the diagram draws)."""
        reach = {}

        def closure(p):
            if p not in reach:
                reach[p] = set()
                for d in self.deps[p]:
                    reach[p] |= {d} | closure(d)
            return reach[p]

        edges = []
        for p in sorted(self.deps):
            for d in sorted(self.deps[p]):
                if not any(d in closure(o) for o in self.deps[p] if o != d):
                    edges.append((p, d))
        return edges


def part_of(path, root):
    """'ir' for src/loom/ir/..., 'apps' for apps/..., 'ggml_hrx' for src/ggml_hrx/..., 'tests'
    for tests/ and fuzz/, else None."""
    rel = path.relative_to(root).parts
    if len(rel) >= 3 and rel[0] == "src" and rel[1] == "ggml_hrx":
        return "ggml_hrx"
    if len(rel) >= 4 and rel[0] == "src" and rel[1] == "loom":
        return rel[2]
    if rel and rel[0] == "apps":
        return "apps"
    if rel and rel[0] in ("tests", "fuzz"):
        return "tests"
    return None


def included_part(kind, target, including_file, root):
    """The part an include names: loom/<part>/... from the src/ include root, or a relative path
    ("../exec/x.h") that lands in src/loom/<part>/."""
    m = LOOM_INCLUDE_RE.match(target)
    if m:
        return m.group(1)
    if kind == '"':
        resolved = (including_file.parent / target).resolve()
        try:
            rel = resolved.relative_to((root / "src" / "loom").resolve()).parts
        except ValueError:
            return None
        if len(rel) >= 2:
            return rel[0]
    return None


def source_files(root):
    for top in ("src/loom", "src/ggml_hrx", "apps", "tests", "fuzz"):
        base = root / top
        if base.is_dir():
            for f in sorted(base.rglob("*")):
                if f.suffix in SOURCE_SUFFIXES and f.is_file():
                    yield f


def check_includes(graph, root):
    """Returns (violations, used): one line per forbidden include, and the (from, to) part pairs
    that some include of src/loom/ uses."""
    violations, used = [], set()
    for f in source_files(root):
        owner = part_of(f, root)
        if owner is None:
            continue
        if owner == "apps":
            allowed = graph.apps
        elif owner == "ggml_hrx":
            allowed = graph.ggml_hrx
        elif owner == "tests":
            allowed = None
        else:
            allowed = {owner} | graph.deps.get(owner, set())
        for lineno, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            to = included_part(m.group(1), m.group(2), f, root)
            if to is None:
                continue
            loc = f"{f.relative_to(root)}:{lineno}"
            if owner not in ("apps", "tests", "ggml_hrx"):
                used.add((owner, to))
            if to not in graph.deps:
                violations.append(f"{loc}: {owner} -> {to}: no part '{to}' "
                                  f"(parts: {', '.join(sorted(graph.deps))})")
            elif allowed is not None and to not in allowed:
                violations.append(f"{loc}: {owner} -> {to}: not a declared dependency "
                                  f"({owner} may include: {', '.join(sorted(allowed)) or 'nothing'})")
    return violations, used


# One line under each part's name in the diagram (a part missing here is drawn with its name).
PART_LABELS = {
    "base": "Status, logging, mmap,\nthread pool",
    "gguf": "GGUF file, ggml types,\nquant formats",
    "ref": "reference numerics\nof every op",
    "text": "tokenizer, Unicode,\nJinja chat templates",
    "model": "architectures, Program,\nBackend, KV cache",
    "engine": "engine, session,\nsampler",
    "ir": "Loom IR: op table,\nverifier, passes",
    "codegen": "PTX, C++, AMDGPU\nemitters",
    "hrx": "device runtime:\ncpu and cuda drivers",
    "kernels": "the op library:\nspecs, IR generators",
    "store": "kernel store,\ncandidate format",
    "evolve": "kernel search,\nknowledge base",
    "exec": "Backend on HRX:\nlowering, fusion",
    "serve": "OpenAI-compatible\nHTTP server",
}


def write_dot(graph, out):
    layers = graph.layers()
    lines = ["// Generated by tools/check_layers.py --dot (tools/draw_architecture.sh): Loom's parts",
             "// and their declared dependencies (loom_part DEPS in CMakeLists.txt), without the edges",
             "// that a longer path already implies. An arrow points from a part to what it uses.",
             "digraph loom {",
             '  graph [rankdir=TB, nodesep=0.3, ranksep=0.5, fontname="DejaVu Sans", bgcolor="white"];',
             '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", color="#4a6fa5",'
             ' fontname="DejaVu Sans", fontsize=11, margin="0.12,0.05"];',
             '  edge [color="#6b7b8c", arrowsize=0.7];',
             '  apps [label=<<b>apps/loom</b><br/><font point-size="9">the CLI</font>>,'
             ' fillcolor="#fdf1dc", color="#b07a1f"];']
    for p in sorted(graph.deps):
        sub = PART_LABELS.get(p, "").replace("\n", "<br/>")
        label = f"<b>{p}</b>" + (f'<br/><font point-size="9">{sub}</font>' if sub else "")
        lines.append(f"  {p} [label=<{label}>];")
    for layer in sorted(set(layers.values())):
        same = " ".join(sorted(p for p, l in layers.items() if l == layer))
        lines.append(f"  {{ rank=same; {same} }}")
    for p, d in graph.reduced_edges():
        lines.append(f"  {p} -> {d};")
    # The CLI links every part; draw only its arrows to the parts nothing else in its set uses.
    tops = sorted(p for p in graph.apps if p in graph.deps
                  and not any(p in graph.deps[o] for o in graph.apps if o in graph.deps))
    for p in tops:
        lines.append(f"  apps -> {p};")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    if out == "-":
        sys.stdout.write(text)
    else:
        pathlib.Path(out).write_text(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[1])
    ap.add_argument("--dot", help="write the dependency graph in graphviz form to this file ('-': stdout)")
    ap.add_argument("--unused", action="store_true",
                    help="also list declared dependencies that no include uses (not a failure)")
    args = ap.parse_args()
    root = args.root.resolve()
    if not (root / "CMakeLists.txt").exists():
        print(f"check_layers: {root} has no CMakeLists.txt", file=sys.stderr)
        return 2

    graph = Graph(root)
    ok = graph.validate()
    for e in graph.errors:
        print(f"check_layers: {e}", file=sys.stderr)
    if not graph.find_cycle():
        layers = graph.layers()
        order = [" ".join(sorted(p for p, l in layers.items() if l == n)) for n in sorted(set(layers.values()))]
        if args.dot != "-":
            print("layer order (each layer may include only the layers below it that it declares):")
            for n, parts in enumerate(order):
                print(f"  {n}: {parts}")
            print(f"  apps: may include {', '.join(sorted(graph.apps))}")
            print(f"  ggml_hrx: may include {', '.join(sorted(graph.ggml_hrx))}")
        if args.dot:
            write_dot(graph, args.dot)
    violations, used = check_includes(graph, root)
    if args.unused:
        for p in sorted(graph.deps):
            idle = sorted(d for d in graph.deps[p] if (p, d) not in used)
            if idle:
                print(f"note: {p} declares {', '.join(idle)} but includes none of its headers")
    for v in violations:
        print(v, file=sys.stderr)
    if violations or not ok:
        print(f"check_layers: {len(violations)} forbidden include(s), {len(graph.errors)} graph "
              f"error(s); allowed edges come from the loom_part(... DEPS ...) lines of CMakeLists.txt",
              file=sys.stderr)
        return 1
    if args.dot != "-":
        print(f"check_layers: ok ({len(graph.deps)} parts, every include follows a declared dependency)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
