"""`loom devices` on a machine without an AMD GPU: the amdgpu driver reports "no AMD GPU" and why,
for each cause that can be produced here for real: the HSA runtime as installed (in CI Debian's
libhsa-runtime64-1 without /dev/kfd), a library path that does not exist, and a library that is
not the HSA runtime (libc, which lacks its entry points). Never a crash, always exit code 0."""
import ctypes.util
import json
import os
import pathlib
import subprocess

import pytest


def devices(loom_bin, *args, **env):
    e = {k: v for k, v in os.environ.items() if k != "LOOM_HSA_RUNTIME"}
    e.update(env)
    r = subprocess.run([str(loom_bin), "devices", *args], capture_output=True, text=True, timeout=60, env=e)
    assert r.returncode == 0, r.stderr
    return r.stdout


def amdgpu_note(loom_bin, **env):
    out = json.loads(devices(loom_bin, "--json", **env))
    return out, out["amdgpu"]


def hsa_library_loads() -> bool:
    try:
        ctypes.CDLL("libhsa-runtime64.so.1")
        return True
    except OSError:
        return False


def test_installed_runtime_reports_its_reason(loom_bin):
    out, note = amdgpu_note(loom_bin)
    if note == "ok":
        pytest.skip("an AMD GPU is present here")
    assert note.startswith("no AMD GPU: "), note
    assert not any(d["id"].startswith("amdgpu") for d in out["devices"])
    if not hsa_library_loads():
        assert "the HSA runtime library is missing" in note, note
    elif not pathlib.Path("/dev/kfd").exists():
        assert "/dev/kfd is missing" in note and "libhsa-runtime64.so.1 loaded" in note, note
    # The text listing says the same on its own line.
    assert f"amdgpu: {note}" in devices(loom_bin)


def test_missing_library_is_named(loom_bin):
    _, note = amdgpu_note(loom_bin, LOOM_HSA_RUNTIME="/nonexistent/libhsa-runtime64.so.1")
    assert note.startswith("no AMD GPU: the HSA runtime library is missing: cannot load "
                           "/nonexistent/libhsa-runtime64.so.1"), note


def test_library_without_hsa_entry_points_is_named(loom_bin):
    libc = ctypes.util.find_library("c")
    assert libc
    _, note = amdgpu_note(loom_bin, LOOM_HSA_RUNTIME=libc)
    assert note.startswith(f"no AMD GPU: {libc} lacks HSA entry points (too old, or not the HSA runtime): "
                           "hsa_init, hsa_status_string"), note
