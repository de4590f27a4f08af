"""PyTorch eager as the peer of evolve's benchmark suite on a GPU.

Each op file of the suite carries its PyTorch equivalent (`"pytorch"`: a `model(*inputs, *dims)`
function). For one problem this module

1. makes the op's inputs as the op file describes them (element type, count expression, value
   range), on the GPU;
2. checks that PyTorch computes what the op file's C++ reference computes (compiled here with the
   host compiler and run on the same inputs), within the op's tolerance: a peer that answers a
   different question would make the comparison meaningless;
3. times `model(...)` as Loom's judge times a candidate: the host clock around one call and a
   device synchronize, every call on another image of the inputs so that the working set exceeds
   the GPU's L2 cache by the same factor, warm-up first, the median over a time budget. CUDA
   events around each call are recorded beside it (the device's view, launch latency included).

TF32 is switched off for matmul and convolution: the references are float32, and so are Loom's
kernels. Only the standard library, numpy and torch are needed (torch is on the GPU machine).
"""
import ctypes
import hashlib
import math
import os
import pathlib
import re
import statistics
import subprocess
import tempfile
import time

import numpy as np

_NP = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "i8": np.int8}


def _eval_count(expr, dims):
    if not re.fullmatch(r"[A-Za-z0-9_+\-*/() ]+", expr):
        raise ValueError(f"count expression {expr!r} has characters outside + - * / ( ) and names")
    return int(eval(expr.replace("/", "//"), {"__builtins__": {}}, dict(dims)))  # noqa: S307 (checked above)


def _reference_lib(op, cache_dir):
    ref = op["reference"]
    if ref.get("lang") != "cpp":
        raise ValueError(f"reference language {ref.get('lang')!r} is not cpp")
    src = "\n".join(ref["source"]) + "\n"
    key = hashlib.sha256(src.encode()).hexdigest()[:16]
    so = pathlib.Path(cache_dir) / f"ref_{key}.so"
    if not so.exists():
        cpp = so.with_suffix(".cpp")
        cpp.write_text(src)
        cxx = os.environ.get("CXX", "c++")
        r = subprocess.run([cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-o", str(so), str(cpp)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"compiling the reference of {op['name']}: {r.stderr[-400:]}")
    lib = ctypes.CDLL(str(so))
    fn = getattr(lib, ref.get("entry", "reference"))
    fn.restype = None
    fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_longlong)]
    return fn


def _host_inputs(op, dims, rng):
    arrays = []
    for a in op["args"]:
        dt = _NP.get(a["type"])
        if dt is None:
            raise ValueError(f"argument {a['name']}: type {a['type']} is not handled by the PyTorch peer")
        n = _eval_count(a["count"], dims)
        if a["role"] == "input":
            lo, hi = a.get("range", [-1, 1])
            if np.issubdtype(dt, np.floating):
                arrays.append(rng.uniform(lo, hi, n).astype(dt))
            else:
                arrays.append(rng.integers(int(lo), int(hi) + 1, n).astype(dt))
        else:
            arrays.append(np.zeros(n, dtype=dt))
    return arrays


def _model(op):
    import torch  # noqa: F401  (the model's source refers to it)
    ns = {"torch": torch}
    exec("\n".join(op["pytorch"]) + "\n", ns)  # noqa: S102 (the project's own op files)
    return ns["model"]


def measure(op, dims, *, device="cuda:0", ws_factor=1.0, time_s=0.3, min_reps=20, max_reps=20000, seed=1,
            cache_dir=None):
    """Checks and times PyTorch eager on one problem. Returns a dict (see the module's text)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(device)
    cache_dir = cache_dir or os.path.join(tempfile.gettempdir(), "loom-suite-torch")
    os.makedirs(cache_dir, exist_ok=True)
    model = _model(op)
    names = list(op["dims"])
    dim_vals = [int(dims[k]) for k in names]
    rng = np.random.default_rng(seed)
    host = _host_inputs(op, dims, rng)
    ins = [i for i, a in enumerate(op["args"]) if a["role"] == "input"]
    outs = [i for i, a in enumerate(op["args"]) if a["role"] == "output"]
    if len(outs) != 1:
        raise ValueError(f"{op['name']}: the PyTorch peer handles one output, the op has {len(outs)}")

    # 1. Correctness against the op file's reference, on the same inputs.
    ref = _reference_lib(op, cache_dir)
    ptrs = (ctypes.c_void_p * len(host))(*[h.ctypes.data_as(ctypes.c_void_p) for h in host])
    dvals = (ctypes.c_longlong * len(names))(*dim_vals)
    ref(ptrs, dvals)
    want = host[outs[0]]
    gpu_in = [torch.from_numpy(host[i]).to(dev) for i in ins]
    with torch.no_grad():
        got = model(*gpu_in, *dim_vals).reshape(-1).float().cpu().numpy()
    tol = op.get("tolerance", {})
    atol, rtol = float(tol.get("atol", 1e-5)), float(tol.get("rtol", 1e-5))
    if got.shape != want.shape:
        return {"torch_correct": False, "torch_error": f"output has {got.size} values, the reference {want.size}"}
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bound = atol + rtol * np.abs(want.astype(np.float64))
    bad = int(np.count_nonzero(~(err <= bound)))
    result = {"torch_correct": bad == 0, "torch_max_abs_err": float(np.nanmax(err)) if err.size else 0.0,
              "torch_mismatches": bad}

    # 2. Timing over a working set of `copies` images of the inputs, larger than L2 by ws_factor.
    in_bytes = sum(host[i].nbytes for i in ins)
    cuda = dev.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size if cuda else 32 << 20  # cpu: a smoke test only
    copies = max(1, min(4096, math.ceil(ws_factor * l2 / max(1, in_bytes)), (8 << 30) // max(1, in_bytes)))
    images = [[torch.empty_like(t) for t in gpu_in] for _ in range(copies)]
    for k, img in enumerate(images):
        for t, src in zip(img, gpu_in):
            t.copy_(src)
            if t.is_floating_point() and k:
                t.mul_(1.0 + 1e-7 * k)  # images differ: nothing can be replayed from an earlier call
    sync()
    wall, event = [], []
    start, end = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else (None, None)
    with torch.no_grad():
        for k in range(min(copies, 64) + 3):  # warm-up
            model(*images[k % copies], *dim_vals)
        sync()
        t_end = time.perf_counter() + time_s
        k = 0
        while len(wall) < max_reps and (len(wall) < min_reps or time.perf_counter() < t_end):
            img = images[k % copies]
            k += 1
            if cuda:
                start.record()
            a = time.perf_counter()
            model(*img, *dim_vals)
            if cuda:
                end.record()
            sync()
            b = time.perf_counter()
            wall.append((b - a) * 1e6)
            if cuda:
                event.append(start.elapsed_time(end) * 1e3)
    result.update({"torch_us": round(statistics.median(wall), 2),
                   "torch_us_spread": [round(min(wall), 2), round(sorted(wall)[int(0.9 * (len(wall) - 1))], 2)],
                   "torch_event_us": round(statistics.median(event), 2) if event else None, "torch_reps": len(wall),
                   "torch_ws_bytes": copies * in_bytes, "torch_version": torch.__version__,
                   "torch_device": torch.cuda.get_device_name(dev) if cuda else "cpu"})
    return result
