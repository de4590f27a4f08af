"""Shared fixtures for the oracle tests: the loom binary and the two reference models."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The oracle: llama-cpp-python's bindings over the stock llama.cpp of tools/llama_cpp.sh, bound
# before any test module imports llama_cpp (tools/llama_oracle.py).
sys.path.insert(0, str(ROOT / "tools"))
import llama_oracle  # noqa: E402

llama_oracle.load()
CACHE = pathlib.Path(os.environ.get("LOOM_CACHE_DIR") or pathlib.Path.home() / ".cache" / "loom")
MODELS = {
    "smollm2": CACHE / "models" / "SmolLM2-135M-Instruct-Q4_1.gguf",
    "gemma3": CACHE / "models" / "gemma-3-270m-Q4_K_M.gguf",
}


@pytest.fixture(scope="session")
def loom_bin() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("LOOM_BIN", ROOT / "build" / "loom"))
    assert path.exists(), f"loom binary not built at {path} (run tools/build.sh)"
    return path


@pytest.fixture(scope="session")
def llama_cpp_bin() -> str:
    """Stock llama.cpp's tools, built (or found built) by tools/llama_cpp.sh; returns their folder."""
    r = subprocess.run([str(ROOT / "tools" / "llama_cpp.sh")], capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, f"tools/llama_cpp.sh failed:\n{r.stdout}\n{r.stderr}"
    printed = subprocess.run([str(ROOT / "tools" / "llama_cpp.sh"), "--print"], capture_output=True, text=True,
                             check=True).stdout
    return dict(line.split(" ", 1) for line in printed.splitlines())["bin"]


def model_path(name: str) -> pathlib.Path:
    path = MODELS[name]
    assert path.exists(), f"model {name} missing at {path} (run tools/fetch_models.py)"
    return path


@pytest.fixture(scope="session", params=["smollm2", "gemma3"])
def model(request) -> pathlib.Path:
    return model_path(request.param)


def cpu_has_amx():
    """Whether the cpu device's prompt matmuls take Intel AMX tiles here (codegen::cpu_amx_usable:
    the CPU and kernel offer AMX, native code, LOOM_CPU_AMX not 0)."""
    info = pathlib.Path("/proc/cpuinfo")
    flags = info.read_text().split() if info.exists() else []
    return all(f in flags for f in ("amx_tile", "amx_int8", "amx_bf16")) and \
        os.environ.get("LOOM_CPU_AMX", "1") != "0" and os.environ.get("LOOM_CPU_ARCH", "native") == "native"


def exact_env():
    """The environment for `--device cpu` runs that must give the reference's bits: the prompt
    matmuls in the reference's arithmetic (LOOM_CPU_MATMUL=exact), not AMX tiles or summed lanes."""
    return dict(os.environ, LOOM_CPU_MATMUL="exact")


def run_loom(loom_bin, *args, input=None, check=True, timeout=600, env=None):
    """Runs loom (with `env` as its whole environment when given); returns CompletedProcess with
    text stdout/stderr."""
    return subprocess.run([str(loom_bin), *map(str, args)], input=input, capture_output=True,
                          text=isinstance(input, str) or input is None, timeout=timeout, check=check, env=env)


# ---- `loom serve` (tests/py/test_serve*.py) -------------------------------------------------

def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoomServer:
    """A `loom serve` process on a free local port, ready when /health answers. Use as a context
    manager; exit sends SIGTERM (the draining shutdown) and waits. Its log is in self.log_path."""

    def __init__(self, loom_bin, model, *args, log_dir=None):
        import tempfile
        self.cmd = [str(loom_bin), "serve", "-m", str(model), *map(str, args)]
        self.port = free_port()
        self.cmd += ["--port", str(self.port)]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = pathlib.Path(log_dir or tempfile.mkdtemp()) / f"serve-{self.port}.log"
        self.proc = None

    def start(self, timeout=180):
        import time
        import urllib.request
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"loom serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"loom serve did not become ready in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout=120) -> int:
        import signal
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()
        return self.proc.returncode if self.proc else 0

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


@pytest.fixture(scope="module")
def loom_server(loom_bin):
    """SmolLM2 behind `loom serve` with 16 slots (module-scoped: the tests of one file share it)."""
    with LoomServer(loom_bin, model_path("smollm2"), "--parallel", "16", "-c", "1024") as server:
        yield server
