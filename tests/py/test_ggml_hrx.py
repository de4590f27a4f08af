"""ggml-hrx: stock llama.cpp (built by tools/llama_cpp.sh from the llama.cpp that
llama-cpp-python==0.3.36 vendors) loads libggml-hrx.so through GGML_BACKEND_PATH, lists the HRX
devices, and test-backend-ops passes on the HRX cpu device (HRX0 on a machine without a GPU) for
every op and type the backend claims: each claimed case ran and passed, none was skipped, and the
backend claims exactly the (op, type) pairs below (docs/ggml_hrx.md)."""
import os
import re
import subprocess

import pytest

from conftest import ROOT

# What ggml-hrx claims in supports_op: op -> the types of its first source (MUL_MAT's weights;
# activations are f32). A pair missing from test-backend-ops' claimed cases, or one claimed
# but not listed here, fails the test: the list is the backend's contract.
CLAIMED = {
    "ADD": {"f32"},
    "MUL": {"f32"},
    "SWIGLU": {"f32"},
    "GEGLU": {"f32"},
    "ROPE": {"f32"},
    "SCALE": {"f32"},
    "RMS_NORM": {"f32"},
    "GET_ROWS": {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q6_K"},
    "SET_ROWS": {"f32", "f16"},
    "MUL_MAT": {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K"},
}
DEVICE = "HRX0"
RESULT = re.compile(r"^  ([A-Z_0-9]+)\((.*)\): (.*)$")
SUMMARY = re.compile(r"^  (\d+)/(\d+) tests passed$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def llama(llama_cpp_bin):
    """Builds (or finds built) llama.cpp and libggml-hrx.so; returns (bin dir, environment)."""
    bin_dir = llama_cpp_bin
    build = os.environ.get("LOOM_BUILD_DIR") or str(ROOT / "build")
    module = os.path.join(build, "libggml-hrx.so")
    assert os.path.exists(module), f"{module} was not built"
    # Without a GPU, HRX0 is the cpu driver; a GPU machine lists its GPUs first. The CPU
    # backend's OpenMP workers would spin against HRX's thread pool on the same cores.
    env = dict(os.environ, GGML_BACKEND_PATH=module, CUDA_VISIBLE_DEVICES="", OMP_WAIT_POLICY="passive")
    return bin_dir, env


def test_llama_cli_lists_the_hrx_devices(llama):
    bin_dir, env = llama
    r = subprocess.run([os.path.join(bin_dir, "llama-cli"), "--list-devices"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    print(r.stdout)
    assert re.search(rf"^\s*{DEVICE}: HRX cpu ", r.stdout, re.M), r.stdout + r.stderr


def case_type(op, params):
    m = re.search(r"\btype(?:_a|_dst)?=(\w+)", params)
    assert m, f"{op}({params}): no type in the case's parameters"
    return m.group(1)


@pytest.mark.parametrize("op", sorted(CLAIMED))
def test_backend_ops_pass_for_every_claimed_case(llama, op):
    bin_dir, env = llama
    # Two workers: the cpp kernels of a new shape compile on the host, one compiler per core.
    r = subprocess.run([os.path.join(bin_dir, "test-backend-ops"), "-b", DEVICE, "-o", op, "-j", "2"],
                       capture_output=True, text=True, env=env, timeout=1800)
    out = ANSI.sub("", r.stdout)
    claimed, passed, failed, unclaimed = [], [], [], 0
    summary = None
    for line in out.splitlines():
        if m := SUMMARY.match(line):
            summary = (int(m.group(1)), int(m.group(2)))
        m = RESULT.match(line)
        if not m or m.group(1) != op:
            continue
        params, status = m.group(2), m.group(3).strip()
        if status.startswith("not supported"):
            unclaimed += 1
            continue
        claimed.append(params)
        (passed if status.endswith("OK") else failed).append(params)
    types = {case_type(op, p) for p in claimed}
    print(f"{op} on {DEVICE}: {len(claimed)} cases claimed, {len(passed) + len(failed)} tested, {len(passed)} passed "
          f"({unclaimed} left to the CPU backend); types {sorted(types)}")
    tail = "\n".join(out.splitlines()[-20:]) + "\n" + r.stderr[-3000:]
    assert not failed, f"{len(failed)} failing {op} cases, e.g. {failed[:5]}\n{tail}"
    # Every claimed case ran: test-backend-ops' own count of run cases equals the claimed ones.
    assert summary == (len(passed), len(claimed)), f"summary {summary} vs {len(passed)}/{len(claimed)}\n{tail}"
    assert r.returncode == 0, tail
    assert types == CLAIMED[op], f"{op}: claimed types {sorted(types)}, expected {sorted(CLAIMED[op])}"
    if op == "MUL_MAT":
        assert all("type_b=f32" in p for p in claimed), "MUL_MAT claimed with non-f32 activations"
