"""The llama.cpp that the oracle tests (tests/py) and bench/bench_cpu.py compare Loom with:
llama-cpp-python's bindings over the stock llama.cpp that tools/llama_cpp.sh builds from the same
pinned sdist (libllama.so, and the CPU backend as a module: GGML_BACKEND_DL). llama.cpp is
compiled once for both uses, so tools/setup.sh installs the bindings without building their own
copy (CMAKE_ARGS=-DLLAMA_BUILD=OFF). The stock build takes the source and CPU flags the bindings'
own build would (AVX2 pinned on AVX2 machines), and gives the same logits bit for bit.

    import llama_oracle
    L = llama_oracle.load()   # the llama_cpp module, its CPU backend loaded
"""
import ctypes
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
_loaded = None


def stock_bin() -> pathlib.Path:
    printed = subprocess.run([str(ROOT / "tools" / "llama_cpp.sh"), "--print"], capture_output=True, text=True,
                             check=True).stdout
    return pathlib.Path(dict(line.split(" ", 1) for line in printed.splitlines())["bin"])


def load():
    """Returns the llama_cpp module bound to the stock build (built by tools/llama_cpp.sh; an
    error naming that script when it is missing)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    bin_dir = stock_bin()
    if not (bin_dir / "libllama.so").exists() or not (bin_dir / "libggml.so").exists():
        raise RuntimeError(f"llama.cpp is not built at {bin_dir}: run tools/llama_cpp.sh (tools/setup.sh --dev does)")
    os.environ["LLAMA_CPP_LIB_PATH"] = str(bin_dir)
    import llama_cpp  # noqa: E402 (binds to LLAMA_CPP_LIB_PATH at import)
    ggml = ctypes.CDLL(str(bin_dir / "libggml.so"))
    ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_load_all_from_path.restype = None
    # Only the CPU backend: an out-of-tree backend named by GGML_BACKEND_PATH (ggml-hrx, whose
    # tests set it for their subprocesses) must not become the oracle's device.
    saved = os.environ.pop("GGML_BACKEND_PATH", None)
    try:
        ggml.ggml_backend_load_all_from_path(str(bin_dir).encode())
    finally:
        if saved is not None:
            os.environ["GGML_BACKEND_PATH"] = saved
    ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    if ggml.ggml_backend_reg_count() == 0:
        raise RuntimeError(f"no ggml backend loaded from {bin_dir} (libggml-cpu.so missing?)")
    _loaded = llama_cpp
    return llama_cpp
