"""Shared fixtures for the oracle tests: the loom binary and the two reference models."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
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


def model_path(name: str) -> pathlib.Path:
    path = MODELS[name]
    assert path.exists(), f"model {name} missing at {path} (run tools/fetch_models.py)"
    return path


@pytest.fixture(scope="session", params=["smollm2", "gemma3"])
def model(request) -> pathlib.Path:
    return model_path(request.param)


def run_loom(loom_bin, *args, input=None, check=True, timeout=600):
    """Runs loom; returns CompletedProcess with text stdout/stderr."""
    return subprocess.run([str(loom_bin), *map(str, args)], input=input, capture_output=True,
                          text=isinstance(input, str) or input is None, timeout=timeout, check=check)
