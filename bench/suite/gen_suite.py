#!/usr/bin/env python3
"""Writes the evolve benchmark suite: one Loom op file per op under bench/suite/ops/ and the
problem list bench/suite/suite.json (problem = op file + shape + level).

Each op file holds a C++ reference (the judge's truth), a Loom IR kernel template to search
from, and a "pytorch" field: the PyTorch eager equivalent, read by the GPU baseline and ignored
by the judge. The kernel templates share one idea: the default knobs give the plain SIMT kernel
(one element, row or output per thread, scalar loads), and the knobs reach the transformations
that matter on a CPU and a GPU alike: vector width (`vw`: 1 = scalar, 4/8/16 = f32xN loads,
stores and arithmetic), work per thread (`ev` vectors, `tm` rows), and threads per block (`bs`).
Every template has a scalar tail, so any size in the op's dims is handled (the judge's held-out
shapes move each size by one).

  python3 bench/suite/gen_suite.py          # rewrites bench/suite/ops/*.json and suite.json
  python3 bench/suite/gen_suite.py --out D  # writes them under D instead
"""
import json
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
VWS = [1, 4, 8, 16]


def ty(vw):
    return "f32" if vw == 1 else f"f32x{vw}"


class Body:
    """Lines of IR computing per-element values; `{T}` is the element type (f32 or f32xN),
    `{s}` a suffix that keeps names unique, and `%NAME{s}` the values."""

    def __init__(self, lines, out):
        self.lines, self.out = lines, out

    def emit(self, vw, s, ins):
        # ins: the IR names bound to the body's inputs %a, %b, ... (already loaded)
        text = []
        for ln in self.lines:
            t = ln.replace("{T}", ty(vw)).replace("{s}", s)
            for k, v in ins.items():
                t = t.replace(f"%{k}@", v)
            text.append("    " + t)
        out = self.out.replace("{s}", s)
        for k, v in ins.items():
            out = out.replace(f"%{k}@", v)
        return text, out


def B(*lines, out="%r{s}"):
    return Body(list(lines), out)


# ---- element-wise bodies: input %a@ (and %b@), result %r{s} -----------------------------
ACT = {
    "relu": (B("%z{s} = const 0.0 : {T}", "%r{s} = max %a@, %z{s}"),
             "std::fmax(x, 0.0f)", "torch.relu(x)"),
    "leaky_relu": (B("%z{s} = const 0.0 : {T}", "%k{s} = const 0.01 : {T}", "%p{s} = cmp.gt %a@, %z{s}",
                     "%m{s} = mul %a@, %k{s}", "%r{s} = select %p{s}, %a@, %m{s}"),
                   "x > 0.0f ? x : x * 0.01f", "torch.nn.functional.leaky_relu(x, 0.01)"),
    "gelu": (B("%h{s} = const 0.5 : {T}", "%o{s} = const 1.0 : {T}", "%c{s} = const 0.70710678118654752 : {T}",
               "%u{s} = mul %a@, %c{s}", "%e{s} = erf %u{s}", "%f{s} = add %e{s}, %o{s}", "%g{s} = mul %a@, %h{s}",
               "%r{s} = mul %g{s}, %f{s}"),
             "0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f))", "torch.nn.functional.gelu(x)"),
    "gelu_tanh": (B("%h{s} = const 0.5 : {T}", "%o{s} = const 1.0 : {T}", "%c{s} = const 0.7978845608028654 : {T}",
                    "%k{s} = const 0.044715 : {T}", "%x2{s} = mul %a@, %a@", "%x3{s} = mul %x2{s}, %a@",
                    "%t{s} = mul %x3{s}, %k{s}", "%u{s} = add %a@, %t{s}", "%v{s} = mul %u{s}, %c{s}",
                    "%e{s} = tanh %v{s}", "%f{s} = add %e{s}, %o{s}", "%g{s} = mul %a@, %h{s}", "%r{s} = mul %g{s}, %f{s}"),
                  "0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)))",
                  "torch.nn.functional.gelu(x, approximate='tanh')"),
    "silu": (B("%o{s} = const 1.0 : {T}", "%n{s} = neg %a@", "%e{s} = exp %n{s}", "%d{s} = add %e{s}, %o{s}",
               "%r{s} = div %a@, %d{s}"),
             "x / (1.0f + std::exp(-x))", "torch.nn.functional.silu(x)"),
    "sigmoid": (B("%o{s} = const 1.0 : {T}", "%n{s} = neg %a@", "%e{s} = exp %n{s}", "%d{s} = add %e{s}, %o{s}",
                  "%r{s} = div %o{s}, %d{s}"),
                "1.0f / (1.0f + std::exp(-x))", "torch.sigmoid(x)"),
    "tanh": (B("%r{s} = tanh %a@"), "std::tanh(x)", "torch.tanh(x)"),
    "softplus": (B("%o{s} = const 1.0 : {T}", "%th{s} = const 20.0 : {T}", "%e{s} = exp %a@", "%d{s} = add %e{s}, %o{s}",
                   "%l{s} = log %d{s}", "%p{s} = cmp.gt %a@, %th{s}", "%r{s} = select %p{s}, %a@, %l{s}"),
                 "x > 20.0f ? x : std::log1p(std::exp(x))", "torch.nn.functional.softplus(x)"),
    "elu": (B("%z{s} = const 0.0 : {T}", "%o{s} = const 1.0 : {T}", "%e{s} = exp %a@", "%m{s} = sub %e{s}, %o{s}",
              "%p{s} = cmp.gt %a@, %z{s}", "%r{s} = select %p{s}, %a@, %m{s}"),
            "x > 0.0f ? x : std::expm1(x)", "torch.nn.functional.elu(x)"),
    "hardtanh": (B("%lo{s} = const -1.0 : {T}", "%hi{s} = const 1.0 : {T}", "%m{s} = max %a@, %lo{s}",
                   "%r{s} = min %m{s}, %hi{s}"),
                 "std::fmin(std::fmax(x, -1.0f), 1.0f)", "torch.nn.functional.hardtanh(x)"),
    "hardswish": (B("%z{s} = const 0.0 : {T}", "%t{s} = const 3.0 : {T}", "%six{s} = const 6.0 : {T}",
                    "%u{s} = add %a@, %t{s}", "%m{s} = max %u{s}, %z{s}", "%c{s} = min %m{s}, %six{s}",
                    "%p{s} = mul %a@, %c{s}", "%r{s} = div %p{s}, %six{s}"),
                  "x * std::fmin(std::fmax(x + 3.0f, 0.0f), 6.0f) / 6.0f", "torch.nn.functional.hardswish(x)"),
    # Two forms (knob `form`): the textbook composition x tanh(softplus(x)), three transcendental
    # functions per value, and the closed form with one: tanh(log(1 + e)) = n / (n + 2) where
    # n = e (e + 2), e = exp(min(x, 20)) (beyond 20 the quotient rounds to 1, as tanh does).
    "mish": ([B("%o{s} = const 1.0 : {T}", "%th{s} = const 20.0 : {T}", "%e{s} = exp %a@", "%d{s} = add %e{s}, %o{s}",
                "%l{s} = log %d{s}", "%p{s} = cmp.gt %a@, %th{s}", "%sp{s} = select %p{s}, %a@, %l{s}",
                "%t{s} = tanh %sp{s}", "%r{s} = mul %a@, %t{s}"),
              B("%th{s} = const 20.0 : {T}", "%two{s} = const 2.0 : {T}", "%c{s} = min %a@, %th{s}", "%e{s} = exp %c{s}",
                "%ep{s} = add %e{s}, %two{s}", "%nn{s} = mul %e{s}, %ep{s}", "%dd{s} = add %nn{s}, %two{s}",
                "%q{s} = div %nn{s}, %dd{s}", "%r{s} = mul %a@, %q{s}")],
             "x * std::tanh(x > 20.0f ? x : std::log1p(std::exp(x)))", "torch.nn.functional.mish(x)"),
}
BIN = {
    "add": (B("%r{s} = add %a@, %b@"), "a + b", "a + b"),
    "mul": (B("%r{s} = mul %a@, %b@"), "a * b", "a * b"),
    "swiglu": (B("%o{s} = const 1.0 : {T}", "%n{s} = neg %a@", "%e{s} = exp %n{s}", "%d{s} = add %e{s}, %o{s}",
                 "%q{s} = div %a@, %d{s}", "%r{s} = mul %q{s}, %b@"),
               "a / (1.0f + std::exp(-a)) * b", "torch.nn.functional.silu(a) * b"),
}

PRELUDE = ["%tid = thread_id.x", "%bid = block_id.x", "%bdim = block_dim.x", "%b0 = mul %bid, %bdim",
           "%g = add %b0, %tid", "%zero = const 0 : i32", "%one = const 1 : i32"]


def ld(dst, ptr, idx, vw, align=True):
    if vw == 1:
        return f"{dst} = load {ptr}[{idx}]"
    return f"{dst} = load {ptr}[{idx}], align 4 : f32x{vw}"


def elementwise_kernel(name, body, n_in, bias=False, n="n"):
    """y = f(inputs) over n elements; with `bias`, a per-column vector b[i % cols] is added first.
    `body` may be a list of equivalent forms: one kernel per form and width, knob `form` picks."""
    forms = body if isinstance(body, list) else [body]
    ptrs = [f"%in{i}: ptr<global, f32>" for i in range(n_in)]
    if bias:
        ptrs.append("%bias: ptr<global, f32>")
    ptrs.append("%y: ptr<global, f32>")
    nargs = len(ptrs)
    kname = name if len(forms) == 1 else f"{name}_f${{form}}"
    src = [f"// launch {kname}_v${{vw}} grid=${{({n}+bs*vw*ev-1)/(bs*vw*ev)}},1,1 block=${{bs}},1,1 args="
           + ",".join(str(i) for i in range(nargs))]
    for f, b in enumerate(forms):
        src += elementwise_kernels(name if len(forms) == 1 else f"{name}_f{f}", b, ptrs, n_in, bias, n)
    return src, nargs


def elementwise_kernels(name, body, ptrs, n_in, bias, n):
    """One form's kernels, one per vector width."""
    src = []
    for vw in VWS:
        src.append(f"kernel @{name}_v{vw}({', '.join(ptrs)}) {{")
        src += ["  " + p for p in PRELUDE]
        src += [f"  %per = const ${{{vw}*ev}} : i32", "  %base = mul %g, %per", f"  %n = const ${{{n}}} : i32",
                "  %end = add %base, %per", "  %full = cmp.le %end, %n"]
        if bias:
            src.append("  %cols = const ${cols} : i32")
        src.append("  if %full {")
        src += [f"    %vstep = const {vw} : i32", "    %nev = const ${ev} : i32",
                "    for %j = %zero to %nev step %one {", "      %jo = mul %j, %vstep", "      %i = add %base, %jo"]
        src += body_at(body, vw, "v", n_in, bias, "      ")
        rv = body.out.replace("{s}", "v")
        src += [f"      store %y[%i], {rv}" + (", align 4" if vw > 1 else ""), "    }", "  } else {",
                "    for %it = %base to %n step %one {"]
        src += body_at(body, 1, "t", n_in, bias, "      ", "%it")
        src += [f"      store %y[%it], {body.out.replace('{s}', 't')}", "    }", "  }", "}"]
    return src


def body_at(body, vw, s, n_in, bias, indent, idx="%i"):
    out, ins = [], {}
    for k in range(n_in):
        out.append(indent + ld(f"%x{k}{s}", f"%in{k}", idx, vw))
        ins["ab"[k]] = f"%x{k}{s}"
    if bias:
        out += [indent + f"%col{s} = rem {idx}, %cols", indent + ld(f"%bv{s}", "%bias", f"%col{s}", vw),
                indent + f"%xb{s} = add %x0{s}, %bv{s}"]
        ins["a"] = f"%xb{s}"
    lines, _ = body.emit(vw, s, ins)
    return out + [indent + ln.strip() for ln in lines]


def cpp_ref(args_decl, loop):
    return ["#include <cmath>", "extern \"C\" void reference(void* const* args, const long long* dims) {"] + \
        ["  " + a for a in args_decl] + ["  " + l for l in loop] + ["}"]


def ew_op(name, body, cexpr, torch, n_in, bias=False, special=False):
    n = "rows*cols" if bias else "n"
    kernel, nargs = elementwise_kernel(name, body, n_in, bias, n)
    names = ["x"] if n_in == 1 else ["a", "b"]
    args = [{"name": nm, "role": "input", "type": "f32", "count": n, "range": [-6, 6]} for nm in names]
    if special:  # IEEE defines the result everywhere (inf, NaN, -0.0, denormals): the judge tries them
        for a in args:
            a["special"] = True
    decl = [f"const float* {nm}_in = static_cast<const float*>(args[{i}]);" for i, nm in enumerate(names)]
    dims = {"n": {"min": 1, "max": 1 << 28}}
    if bias:
        dims = {"rows": {"min": 1}, "cols": {"min": 1, "max": 1 << 20, "multiple_of": 16}}
        args.append({"name": "b", "role": "input", "type": "f32", "count": "cols", "range": [-1, 1]})
        decl.append("const float* b = static_cast<const float*>(args[1]);")
    decl.append(f"float* y = static_cast<float*>(args[{nargs - 1}]);")
    args.append({"name": "y", "role": "output", "type": "f32", "count": n})
    if bias:
        loop = ["const long long n = dims[0] * dims[1], cols = dims[1];",
                "for (long long i = 0; i < n; ++i) { const float x = x_in[i] + b[i % cols]; y[i] = " + cexpr + "; }"]
    else:
        loop = ["const long long n = dims[0];",
                "for (long long i = 0; i < n; ++i) { " + ("const float x = x_in[i]; " if n_in == 1 else "const float a = a_in[i], b = b_in[i]; ") +
                "y[i] = " + cexpr + "; }"]
    op = {"name": f"suite_{name}", "description": f"element-wise {name} over n f32 values",
          "dims": dims, "args": args,
          "cost": {"bytes": f"4*{n}*{n_in + 1}" + ("+4*cols" if bias else ""), "flops": n},
          "tolerance": {"atol": 1e-5, "rtol": 1e-5},
          "test_shapes": ["n=1000", "n=65536"] if not bias else ["rows=3,cols=48", "rows=64,cols=256"],
          "reference": {"lang": "cpp", "entry": "reference", "source": cpp_ref(decl, loop)},
          "kernel": {"knobs": {"vw": VWS, "ev": [1, 2, 4, 8], "bs": [64, 16, 32, 128, 256]}, "source": kernel}}
    if isinstance(body, list):
        op["kernel"]["knobs"]["form"] = list(range(len(body)))
    if bias:
        op["description"] = f"y[r, c] = {name.split('_', 1)[1]}(x[r, c] + b[c]) over rows x cols"
        op["pytorch"] = ["def model(x, b, rows, cols):", "    x = x.view(rows, cols) + b",
                         "    return (" + torch + ").reshape(-1)"]
    else:
        op["pytorch"] = [f"def model({', '.join(names)}, n):", f"    return {torch}"]
    return op


# ---- row-wise ops: one thread per row of a rows x cols matrix --------------------------------
def reduce_pass(p, vw, body, comb, init, ins, splats, ind="    "):
    """Lines reducing body(col) over the row with `comb` (add|max) into %acc{p}."""
    out = []
    def bind(s):
        loads, m = [], {}
        for k, (ptr, row) in ins.items():
            idx = f"%c{p}{s}"
            loads.append(ld(f"%L{k}{p}{s}", f"%{ptr}r" if row else f"%{ptr}", idx, vw if s == "v" else 1))
            m[k] = f"%L{k}{p}{s}"
        for k in splats:
            m[k] = f"%{k}_s{p}" if s == "v" else f"%{k}"
        return loads, m
    start = "%zero"
    if vw > 1:
        out += [f"%vstep{p} = const {vw} : i32", f"%nv{p} = const ${{cols/{vw}*{vw}}} : i32",
                f"%iv{p} = const {init} : f32x{vw}"]
        out += [f"%{k}_s{p} = splat %{k} : f32x{vw}" for k in splats]
        out.append(f"%accv{p} = for %c{p}v = %zero to %nv{p} step %vstep{p} iter(%a{p}v = %iv{p}) : f32x{vw} {{")
        loads, m = bind("v")
        lines, r = body.emit(vw, f"{p}v", m)
        out += ["  " + l for l in loads] + ["  " + l.strip() for l in lines]
        out += [f"  %a2{p}v = {comb} %a{p}v, {r}", f"  yield %a2{p}v", "}"]
        out.append(f"%h{p}_0 = extract %accv{p}[0]")
        for i in range(1, vw):
            out += [f"%e{p}_{i} = extract %accv{p}[{i}]", f"%h{p}_{i} = {comb} %h{p}_{i - 1}, %e{p}_{i}"]
        first, start = f"%h{p}_{vw - 1}", f"%nv{p}"
    else:
        out.append(f"%it{p} = const {init} : f32")
        first = f"%it{p}"
    out.append(f"%acc{p} = for %c{p}t = {start} to %nc step %one iter(%a{p}t = {first}) : f32 {{")
    loads, m = bind("t")
    lines, r = body.emit(1, f"{p}t", m)
    out += ["  " + l for l in loads] + ["  " + l.strip() for l in lines]
    out += [f"  %a2{p}t = {comb} %a{p}t, {r}", f"  yield %a2{p}t", "}"]
    return [ind + l for l in out]


def map_pass(p, vw, body, ins, splats, outp, ind="    "):
    out = []
    def bind(s):
        loads, m = [], {}
        for k, (ptr, row) in ins.items():
            loads.append(ld(f"%L{k}{p}{s}", f"%{ptr}r" if row else f"%{ptr}", f"%c{p}{s}", vw if s == "v" else 1))
            m[k] = f"%L{k}{p}{s}"
        for k in splats:
            m[k] = f"%{k}_s{p}" if s == "v" else f"%{k}"
        return loads, m
    start = "%zero"
    if vw > 1:
        out += [f"%vstep{p} = const {vw} : i32", f"%nv{p} = const ${{cols/{vw}*{vw}}} : i32"]
        out += [f"%{k}_s{p} = splat %{k} : f32x{vw}" for k in splats]
        out.append(f"for %c{p}v = %zero to %nv{p} step %vstep{p} {{")
        loads, m = bind("v")
        lines, r = body.emit(vw, f"{p}v", m)
        out += ["  " + l for l in loads] + ["  " + l.strip() for l in lines]
        out += [f"  store %{outp}r[%c{p}v], {r}, align 4", "}"]
        start = f"%nv{p}"
    out.append(f"for %c{p}t = {start} to %nc step %one {{")
    loads, m = bind("t")
    lines, r = body.emit(1, f"{p}t", m)
    out += ["  " + l for l in loads] + ["  " + l.strip() for l in lines]
    out += [f"  store %{outp}r[%c{p}t], {r}", "}"]
    return [ind + l for l in out]


def row_op(name, desc, args, passes, cref, torch, tol, flops="rows*cols"):
    """args: [(name, role, count)]; passes: ("reduce", body, comb, init, ins, splats, then_lines)
    or ("map", body, ins, splats, out) or ("store", value, out) for one value per row."""
    row_ptrs = {a for a, _, c in args if c == "rows*cols"}
    src = [f"// launch {name}_v${{vw}} grid=${{(rows+bs-1)/bs}},1,1 block=${{bs}},1,1 args="
           + ",".join(str(i) for i in range(len(args)))]
    for vw in VWS:
        src.append(f"kernel @{name}_v{vw}({', '.join(f'%{a}: ptr<global, f32>' for a, _, _ in args)}) {{")
        src += ["  " + l for l in PRELUDE] + ["  %nr = const ${rows} : i32", "  %in = cmp.lt %g, %nr", "  if %in {",
                                             "    %nc = const ${cols} : i32", "    %ncf = convert %nc : f32",
                                             "    %roff = mul %g, %nc"]
        src += [f"    %{a}r = offset %{a}, %roff" for a in sorted(row_ptrs)]
        for p, ps in enumerate(passes):
            if ps[0] == "reduce":
                _, body, comb, init, ins, splats, then = ps
                src += reduce_pass(p, vw, body, comb, init, ins, splats)
                src += ["    " + l.replace("%ACC", f"%acc{p}") for l in then]
            elif ps[0] == "map":
                _, body, ins, splats, outp = ps
                src += map_pass(p, vw, body, ins, splats, outp)
            else:
                src.append(f"    store %{ps[2]}[%g], {ps[1]}")
        src += ["  }", "}"]
    jargs = []
    for a, role, count in args:
        j = {"name": a, "role": role, "type": "f32", "count": count}
        if role == "input":
            j["range"] = [-2, 2]
        jargs.append(j)
    decl = [f"{'const ' if r == 'input' else ''}float* {a} = static_cast<{'const ' if r == 'input' else ''}float*>(args[{i}]);"
            for i, (a, r, _) in enumerate(args)]
    decl.append("const long long rows = dims[0], cols = dims[1];")
    nbytes = "+".join("4*" + c for _, _, c in args)
    return {"name": f"suite_{name}", "description": desc,
            "dims": {"rows": {"min": 1}, "cols": {"min": 1, "max": 1 << 20}}, "args": jargs,
            "cost": {"bytes": nbytes, "flops": flops}, "tolerance": tol,
            "test_shapes": ["rows=3,cols=37", "rows=64,cols=256"],
            "reference": {"lang": "cpp", "entry": "reference", "source": cpp_ref(decl, cref)},
            "kernel": {"knobs": {"vw": VWS, "bs": [64, 16, 32, 128, 256]}, "source": src},
            "pytorch": torch}


IDENT = Body([], "%a@")
SQ = B("%r{s} = mul %a@, %a@")
EXPSUB = B("%d{s} = sub %a@, %m@", "%r{s} = exp %d{s}")
X_ROW = {"a": ("x", True)}
ROW_LOOP = "for (long long r = 0; r < rows; ++r) {"


def row_ops():
    ops = {}
    ops["row_sum"] = row_op("row_sum", "y[r] = sum over c of x[r, c]", [("x", "input", "rows*cols"), ("y", "output", "rows")],
                            [("reduce", IDENT, "add", "0.0", X_ROW, [], []), ("store", "%acc0", "y")],
                            [ROW_LOOP, "  double s = 0; for (long long c = 0; c < cols; ++c) s += x[r * cols + c];",
                             "  y[r] = (float)s;", "}"],
                            ["def model(x, rows, cols):", "    return x.view(rows, cols).sum(dim=1)"],
                            {"atol": 1e-4, "rtol": 1e-4})
    ops["row_max"] = row_op("row_max", "y[r] = max over c of x[r, c]", [("x", "input", "rows*cols"), ("y", "output", "rows")],
                            [("reduce", IDENT, "max", "-inf", X_ROW, [], []), ("store", "%acc0", "y")],
                            [ROW_LOOP, "  float m = -INFINITY; for (long long c = 0; c < cols; ++c) m = std::fmax(m, x[r * cols + c]);",
                             "  y[r] = m;", "}"],
                            ["def model(x, rows, cols):", "    return x.view(rows, cols).amax(dim=1)"],
                            {"exact": True})
    ops["row_mean"] = row_op("row_mean", "y[r] = mean over c of x[r, c]", [("x", "input", "rows*cols"), ("y", "output", "rows")],
                             [("reduce", IDENT, "add", "0.0", X_ROW, [], ["%mean = div %ACC, %ncf"]), ("store", "%mean", "y")],
                             [ROW_LOOP, "  double s = 0; for (long long c = 0; c < cols; ++c) s += x[r * cols + c];",
                              "  y[r] = (float)(s / cols);", "}"],
                             ["def model(x, rows, cols):", "    return x.view(rows, cols).mean(dim=1)"],
                             {"atol": 1e-5, "rtol": 1e-4})
    ops["row_l2norm"] = row_op("row_l2norm", "y[r] = sqrt(sum over c of x[r, c]^2)",
                               [("x", "input", "rows*cols"), ("y", "output", "rows")],
                               [("reduce", SQ, "add", "0.0", X_ROW, [], ["%nrm = sqrt %ACC"]), ("store", "%nrm", "y")],
                               [ROW_LOOP, "  double s = 0; for (long long c = 0; c < cols; ++c) s += (double)x[r * cols + c] * x[r * cols + c];",
                                "  y[r] = (float)std::sqrt(s);", "}"],
                               ["def model(x, rows, cols):", "    return torch.linalg.vector_norm(x.view(rows, cols), dim=1)"],
                               {"atol": 1e-4, "rtol": 1e-4}, flops="2*rows*cols")
    ops["matvec"] = row_op("matvec", "y[r] = sum over c of A[r, c] * x[c] (f32 matrix-vector product)",
                           [("A", "input", "rows*cols"), ("x", "input", "cols"), ("y", "output", "rows")],
                           [("reduce", B("%r{s} = mul %a@, %b@"), "add", "0.0", {"a": ("A", True), "b": ("x", False)}, [], []),
                            ("store", "%acc0", "y")],
                           [ROW_LOOP, "  double s = 0; for (long long c = 0; c < cols; ++c) s += (double)A[r * cols + c] * x[c];",
                            "  y[r] = (float)s;", "}"],
                           ["def model(A, x, rows, cols):", "    return A.view(rows, cols) @ x"],
                           {"atol": 1e-4, "rtol": 1e-4}, flops="2*rows*cols")
    sm_then = ["%inv = const 1.0 : f32", "%rs = div %inv, %ACC"]
    ops["softmax"] = row_op("softmax", "y[r, :] = softmax(x[r, :])", [("x", "input", "rows*cols"), ("y", "output", "rows*cols")],
                            [("reduce", IDENT, "max", "-inf", X_ROW, [], ["%m = max %ACC, %ACC"]),
                             ("reduce", EXPSUB, "add", "0.0", X_ROW, ["m"], sm_then),
                             ("map", B("%d{s} = sub %a@, %m@", "%e{s} = exp %d{s}", "%r{s} = mul %e{s}, %rs@"), X_ROW, ["m", "rs"], "y")],
                            [ROW_LOOP, "  const float* xr = x + r * cols; float* yr = y + r * cols;",
                             "  float m = -INFINITY; for (long long c = 0; c < cols; ++c) m = std::fmax(m, xr[c]);",
                             "  double s = 0; for (long long c = 0; c < cols; ++c) s += std::exp(xr[c] - m);",
                             "  for (long long c = 0; c < cols; ++c) yr[c] = (float)(std::exp(xr[c] - m) / s);", "}"],
                            ["def model(x, rows, cols):", "    return torch.softmax(x.view(rows, cols), dim=1).reshape(-1)"],
                            {"atol": 1e-6, "rtol": 1e-4}, flops="5*rows*cols")
    ops["log_softmax"] = row_op("log_softmax", "y[r, :] = log_softmax(x[r, :])", [("x", "input", "rows*cols"), ("y", "output", "rows*cols")],
                                [("reduce", IDENT, "max", "-inf", X_ROW, [], ["%m = max %ACC, %ACC"]),
                                 ("reduce", EXPSUB, "add", "0.0", X_ROW, ["m"], ["%ls = log %ACC", "%sh = add %m, %ls"]),
                                 ("map", B("%r{s} = sub %a@, %sh@"), X_ROW, ["sh"], "y")],
                                [ROW_LOOP, "  const float* xr = x + r * cols; float* yr = y + r * cols;",
                                 "  float m = -INFINITY; for (long long c = 0; c < cols; ++c) m = std::fmax(m, xr[c]);",
                                 "  double s = 0; for (long long c = 0; c < cols; ++c) s += std::exp(xr[c] - m);",
                                 "  for (long long c = 0; c < cols; ++c) yr[c] = (float)(xr[c] - m - std::log(s));", "}"],
                                ["def model(x, rows, cols):", "    return torch.log_softmax(x.view(rows, cols), dim=1).reshape(-1)"],
                                {"atol": 1e-5, "rtol": 1e-5}, flops="4*rows*cols")
    ops["layer_norm"] = row_op(
        "layer_norm", "y[r, :] = (x[r, :] - mean) / sqrt(var + 1e-5) * g + b (biased variance)",
        [("x", "input", "rows*cols"), ("gamma", "input", "cols"), ("beta", "input", "cols"), ("y", "output", "rows*cols")],
        [("reduce", IDENT, "add", "0.0", X_ROW, [], ["%mean = div %ACC, %ncf"]),
         ("reduce", B("%d{s} = sub %a@, %mean@", "%r{s} = mul %d{s}, %d{s}"), "add", "0.0", X_ROW, ["mean"],
          ["%var = div %ACC, %ncf", "%eps = const 1e-5 : f32", "%ve = add %var, %eps", "%sd = sqrt %ve",
           "%o1 = const 1.0 : f32", "%rstd = div %o1, %sd"]),
         ("map", B("%d{s} = sub %a@, %mean@", "%n{s} = mul %d{s}, %rstd@", "%gn{s} = mul %n{s}, %g@", "%r{s} = add %gn{s}, %b@"),
          {"a": ("x", True), "g": ("gamma", False), "b": ("beta", False)}, ["mean", "rstd"], "y")],
        [ROW_LOOP, "  const float* xr = x + r * cols; float* yr = y + r * cols;",
         "  double s = 0; for (long long c = 0; c < cols; ++c) s += xr[c];", "  const double mean = s / cols;",
         "  double v = 0; for (long long c = 0; c < cols; ++c) v += (xr[c] - mean) * (xr[c] - mean);",
         "  const double rstd = 1.0 / std::sqrt(v / cols + 1e-5);",
         "  for (long long c = 0; c < cols; ++c) yr[c] = (float)((xr[c] - mean) * rstd * gamma[c] + beta[c]);", "}"],
        ["def model(x, gamma, beta, rows, cols):",
         "    return torch.nn.functional.layer_norm(x.view(rows, cols), (cols,), gamma, beta, eps=1e-5).reshape(-1)"],
        {"atol": 1e-4, "rtol": 1e-4}, flops="8*rows*cols")
    rms_body = B("%n{s} = mul %a@, %rstd@", "%r{s} = mul %n{s}, %w@")
    rms_then = ["%ms = div %ACC, %ncf", "%eps = const 1e-6 : f32", "%me = add %ms, %eps", "%sd = sqrt %me",
                "%o1 = const 1.0 : f32", "%rstd = div %o1, %sd"]
    ops["rms_norm"] = row_op(
        "rms_norm", "y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + 1e-6) * w",
        [("x", "input", "rows*cols"), ("w", "input", "cols"), ("y", "output", "rows*cols")],
        [("reduce", SQ, "add", "0.0", X_ROW, [], rms_then),
         ("map", rms_body, {"a": ("x", True), "w": ("w", False)}, ["rstd"], "y")],
        [ROW_LOOP, "  const float* xr = x + r * cols; float* yr = y + r * cols;",
         "  double s = 0; for (long long c = 0; c < cols; ++c) s += (double)xr[c] * xr[c];",
         "  const double rstd = 1.0 / std::sqrt(s / cols + 1e-6);",
         "  for (long long c = 0; c < cols; ++c) yr[c] = (float)(xr[c] * rstd * w[c]);", "}"],
        ["def model(x, w, rows, cols):", "    x = x.view(rows, cols)",
         "    return (x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-6) * w).reshape(-1)"],
        {"atol": 1e-4, "rtol": 1e-4}, flops="4*rows*cols")
    ops["add_rms_norm"] = row_op(
        "add_rms_norm", "h = x + res; y[r, :] = h[r, :] / sqrt(mean(h[r, :]^2) + 1e-6) * w (residual add fused into RMS norm)",
        [("x", "input", "rows*cols"), ("res", "input", "rows*cols"), ("w", "input", "cols"), ("y", "output", "rows*cols")],
        [("reduce", B("%h{s} = add %a@, %b@", "%r{s} = mul %h{s}, %h{s}"), "add", "0.0",
          {"a": ("x", True), "b": ("res", True)}, [], rms_then),
         ("map", B("%h{s} = add %a@, %b@", "%n{s} = mul %h{s}, %rstd@", "%r{s} = mul %n{s}, %w@"),
          {"a": ("x", True), "b": ("res", True), "w": ("w", False)}, ["rstd"], "y")],
        [ROW_LOOP, "  const float* xr = x + r * cols; const float* rr = res + r * cols; float* yr = y + r * cols;",
         "  double s = 0; for (long long c = 0; c < cols; ++c) { const float h = xr[c] + rr[c]; s += (double)h * h; }",
         "  const double rstd = 1.0 / std::sqrt(s / cols + 1e-6);",
         "  for (long long c = 0; c < cols; ++c) yr[c] = (float)((xr[c] + rr[c]) * rstd * w[c]);", "}"],
        ["def model(x, res, w, rows, cols):", "    h = (x + res).view(rows, cols)",
         "    return (h * torch.rsqrt(h.pow(2).mean(dim=1, keepdim=True) + 1e-6) * w).reshape(-1)"],
        {"atol": 1e-4, "rtol": 1e-4}, flops="5*rows*cols")
    return ops


# ---- matrix products: C[b] = op(A[b]) @ op(B[b]) (+ bias, activation) -------------------------
TMS = [1, 2, 4]


def matmul_op(name, desc, layout="nn", batch=False, epilogue=None, torch=None, tests=None):
    """layout nn: A [M,K], B [K,N]; tn: A stored [K,M]; nt: B stored [N,K]. A thread computes
    tm rows x vw columns (nn, tn: vectors along N) or tm rows x 1 column with vectors along K (nt)."""
    args = [("A", "M*K"), ("B", "K*N")]
    if epilogue:
        args.append(("bias", "N"))
    args.append(("C", "M*N"))
    if batch:
        args = [(a, c if a == "bias" else f"batch*{c}") for a, c in args]
    along_k = layout == "nt"
    cols = "N" if along_k else "N/vw"
    src = [f"// launch {name}_v${{vw}}_t${{tm}} grid=${{({cols}+bs-1)/bs}},${{(M+tm-1)/tm}},${{{'batch' if batch else 1}}} "
           f"block=${{bs}},1,1 args=" + ",".join(str(i) for i in range(len(args)))]
    for vw in VWS:
        for tm in TMS:
            T = ty(vw)
            ptrs = ", ".join(f"%{a}: ptr<global, f32>" for a, _ in args)
            k = [f"kernel @{name}_v{vw}_t{tm}({ptrs}) {{"] + ["  " + l for l in PRELUDE]
            k += ["  %by = block_id.y", "  %bz = block_id.z", "  %nM = const ${M} : i32", "  %nK = const ${K} : i32",
                  "  %nN = const ${N} : i32", f"  %vwc = const {1 if along_k else vw} : i32", "  %n0 = mul %g, %vwc",
                  "  %inn = cmp.lt %n0, %nN", "  if %inn {", f"    %tmc = const {tm} : i32", "    %m0 = mul %by, %tmc",
                  "    %mlast = sub %nM, %one", "    %sA = const ${M*K} : i32", "    %sB = const ${K*N} : i32",
                  "    %sC = const ${M*N} : i32", "    %oA = mul %bz, %sA", "    %oB = mul %bz, %sB", "    %oC = mul %bz, %sC",
                  "    %Ab = offset %A, %oA", "    %Bb = offset %B, %oB", "    %Cb = offset %C, %oC",
                  f"    %z = const 0.0 : {T}"]
            for r in range(tm):
                k += [f"    %rr{r} = const {r} : i32", f"    %mr{r} = add %m0, %rr{r}", f"    %mc{r} = min %mr{r}, %mlast"]
                if layout != "tn":
                    k.append(f"    %ar{r} = mul %mc{r}, %nK")
            if not along_k:
                res = ", ".join(f"%acc{r}" for r in range(tm))
                it = ", ".join(f"%c{r} = %z" for r in range(tm))
                k.append(f"    {res} = for %k = %zero to %nK step %one iter({it}) {{")
                k.append("      %bk = mul %k, %nN")
                k.append("      %bi = add %bk, %n0")
                k.append("      " + ld("%bv", "%Bb", "%bi", vw))
                ys = []
                for r in range(tm):
                    if layout == "nn":
                        k.append(f"      %ai{r} = add %ar{r}, %k")
                    else:
                        k += [f"      %ak{r} = mul %k, %nM", f"      %ai{r} = add %ak{r}, %mc{r}"]
                    k.append(f"      %a{r} = load %Ab[%ai{r}]")
                    if vw > 1:
                        k.append(f"      %as{r} = splat %a{r} : {T}")
                        k.append(f"      %d{r} = fma %as{r}, %bv, %c{r}")
                    else:
                        k.append(f"      %d{r} = fma %a{r}, %bv, %c{r}")
                    ys.append(f"%d{r}")
                k += ["      yield " + ", ".join(ys), "    }"]
                outs = [f"%acc{r}" for r in range(tm)]
                ovw = vw
            else:
                # C[m, n] = dot(A[m, :], B[n, :]): vectors along K, then a scalar tail.
                k += ["    %brow = mul %n0, %nK"]
                res = ", ".join(f"%acc{r}" for r in range(tm))
                it = ", ".join(f"%c{r} = %z" for r in range(tm))
                if vw > 1:
                    k += [f"    %vst = const {vw} : i32", f"    %kv = const ${{K/{vw}*{vw}}} : i32"]
                    k.append(f"    {res} = for %k = %zero to %kv step %vst iter({it}) {{")
                else:
                    k.append(f"    {res} = for %k = %zero to %nK step %one iter({it}) {{")
                k += ["      %bi = add %brow, %k", "      " + ld("%bv", "%Bb", "%bi", vw)]
                ys = []
                for r in range(tm):
                    k += [f"      %ai{r} = add %ar{r}, %k", "      " + ld(f"%a{r}", "%Ab", f"%ai{r}", vw),
                          f"      %d{r} = fma %a{r}, %bv, %c{r}"]
                    ys.append(f"%d{r}")
                k += ["      yield " + ", ".join(ys), "    }"]
                outs = []
                for r in range(tm):
                    if vw > 1:
                        k.append(f"    %h{r}_0 = extract %acc{r}[0]")
                        for i in range(1, vw):
                            k += [f"    %e{r}_{i} = extract %acc{r}[{i}]", f"    %h{r}_{i} = add %h{r}_{i - 1}, %e{r}_{i}"]
                        outs.append(f"%h{r}_{vw - 1}")
                    else:
                        outs.append(f"%acc{r}")
                if vw > 1:
                    tails = ", ".join(f"%t{r}" for r in range(tm))
                    it = ", ".join(f"%q{r} = {outs[r]}" for r in range(tm))
                    k.append(f"    {tails} = for %kt = %kv to %nK step %one iter({it}) {{")
                    k += ["      %bit = add %brow, %kt", "      %bvt = load %Bb[%bit]"]
                    for r in range(tm):
                        k += [f"      %ait{r} = add %ar{r}, %kt", f"      %at{r} = load %Ab[%ait{r}]",
                              f"      %dt{r} = fma %at{r}, %bvt, %q{r}"]
                    k += ["      yield " + ", ".join(f"%dt{r}" for r in range(tm)), "    }"]
                    outs = [f"%t{r}" for r in range(tm)]
                ovw = 1
            if epilogue:
                k.append("    " + ld("%bb", "%bias", "%n0", ovw))
            for r in range(tm):
                v = outs[r]
                if epilogue:
                    k.append(f"    %eb{r} = add {v}, %bb")
                    lines, v = ACT[epilogue][0].emit(ovw, f"e{r}", {"a": f"%eb{r}"})
                    k += [ln.rstrip() for ln in lines]
                k += [f"    %ok{r} = cmp.lt %mr{r}, %nM", f"    if %ok{r} {{", f"      %co{r} = mul %mr{r}, %nN",
                      f"      %ci{r} = add %co{r}, %n0", f"      store %Cb[%ci{r}], {v}" + (", align 4" if ovw > 1 else ""), "    }"]
            k += ["  }", "}"]
            src += k
    dims = {}
    if batch:
        dims["batch"] = {"min": 1}
    dims.update({"M": {"min": 1}, "K": {"min": 1}, "N": {"min": 1} if along_k else {"min": 16, "multiple_of": 16}})
    bt = "batch*" if batch else ""
    jargs = [{"name": a, "role": "output" if a == "C" else "input", "type": "f32", "count": c} for a, c in args]
    for j in jargs:
        if j["role"] == "input":
            j["range"] = [-1, 1]
    names = [a for a, _ in args]
    decl = [f"{'const ' if a != 'C' else ''}float* {a} = static_cast<{'const ' if a != 'C' else ''}float*>(args[{i}]);"
            for i, a in enumerate(names)]
    d = ["batch"] if batch else []
    d += ["M", "K", "N"]
    decl.append("const long long " + ", ".join(f"{x} = dims[{i}]" for i, x in enumerate(d)) + ";")
    if not batch:
        decl.append("const long long batch = 1;")
    a_idx = {"nn": "A[bi * M * K + m * K + k]", "tn": "A[bi * M * K + k * M + m]", "nt": "A[bi * M * K + m * K + k]"}[layout]
    b_idx = {"nn": "B[bi * K * N + k * N + n]", "tn": "B[bi * K * N + k * N + n]", "nt": "B[bi * K * N + n * K + k]"}[layout]
    post = "const float x = (float)s + bias[n]; s = " + ACT[epilogue][1] + ";" if epilogue else ""
    loop = ["for (long long bi = 0; bi < batch; ++bi)", "  for (long long m = 0; m < M; ++m)",
            "    for (long long n = 0; n < N; ++n) {", "      double s = 0;",
            f"      for (long long k = 0; k < K; ++k) s += (double){a_idx} * {b_idx};"]
    if epilogue:
        loop.append("      " + post)
    loop += ["      C[bi * M * N + m * N + n] = (float)s;", "    }"]
    return {"name": f"suite_{name}", "description": desc, "dims": dims, "args": jargs,
            "cost": {"bytes": "+".join(f"4*{c}" for _, c in args), "flops": f"2*{bt}M*K*N"},
            "tolerance": {"atol": 1e-3, "rtol": 1e-3}, "test_shapes": tests,
            "reference": {"lang": "cpp", "entry": "reference", "source": cpp_ref(decl, loop)},
            "kernel": {"knobs": {"vw": VWS, "tm": TMS, "bs": [64, 16, 32, 128, 256]}, "source": src},
            "pytorch": torch}


def matmul_ops():
    ops = {}
    t = ["M=3,K=5,N=16", "M=64,K=64,N=64"]
    ops["matmul"] = matmul_op("matmul", "C = A @ B (A [M,K], B [K,N], f32)", "nn",
                              torch=["def model(A, B, M, K, N):", "    return (A.view(M, K) @ B.view(K, N)).reshape(-1)"], tests=t)
    ops["matmul_tn"] = matmul_op("matmul_tn", "C = A^T @ B (A stored [K,M], B [K,N], f32)", "tn",
                                 torch=["def model(A, B, M, K, N):", "    return (A.view(K, M).t() @ B.view(K, N)).reshape(-1)"], tests=t)
    ops["matmul_nt"] = matmul_op("matmul_nt", "C = A @ B^T (A [M,K], B stored [N,K], f32)", "nt",
                                 torch=["def model(A, B, M, K, N):", "    return (A.view(M, K) @ B.view(N, K).t()).reshape(-1)"],
                                 tests=["M=3,K=5,N=7", "M=64,K=64,N=64"])
    ops["bmm"] = matmul_op("bmm", "C[b] = A[b] @ B[b] (batched, f32)", "nn", batch=True,
                           torch=["def model(A, B, batch, M, K, N):",
                                  "    return torch.bmm(A.view(batch, M, K), B.view(batch, K, N)).reshape(-1)"],
                           tests=["batch=2,M=3,K=5,N=16", "batch=4,M=32,K=32,N=32"])
    for act in ("relu", "gelu", "silu"):
        ops[f"matmul_bias_{act}"] = matmul_op(
            f"matmul_bias_{act}", f"C = {act}(A @ B + bias) (A [M,K], B [K,N], bias [N]: a linear layer with a fused epilogue)",
            "nn", epilogue=act,
            torch=["def model(A, B, bias, M, K, N):",
                   f"    return ({ACT[act][2].replace('(x', '(A.view(M, K) @ B.view(K, N) + bias', 1)}).reshape(-1)"], tests=t)
    return ops


def attention_op():
    """Causal attention per head: O[h, i] = softmax(Q[h, i] . K[h, :i+1]^T / sqrt(D)) @ V[h, :i+1],
    one thread per query row with an online softmax (running max, sum and output)."""
    D = 64
    src = ["// launch attention_v${vw} grid=${(L+bs-1)/bs},${H},1 block=${bs},1,1 args=0,1,2,3"]
    for vw in VWS:
        T, nt = ty(vw), D // vw
        k = [f"kernel @attention_v{vw}(%Q: ptr<global, f32>, %K: ptr<global, f32>, %V: ptr<global, f32>, %O: ptr<global, f32>) {{"]
        k += ["  " + l for l in PRELUDE]
        k += ["  %h = block_id.y", "  %nL = const ${L} : i32", "  %in = cmp.lt %g, %nL", "  if %in {",
              f"    %nD = const {D} : i32", "    %hL = mul %h, %nL", "    %hi = add %hL, %g", "    %qo = mul %hi, %nD",
              f"    %df = const {D}.0 : f32", "    %sq = sqrt %df", "    %o1 = const 1.0 : f32", "    %scale = div %o1, %sq",
              "    %ninf = const -inf : f32", "    %zf = const 0.0 : f32", f"    %zv = const 0.0 : {T}", "    %jend = add %g, %one"]
        for t in range(nt):
            k += [f"    %qd{t} = const {t * vw} : i32", f"    %qi{t} = add %qo, %qd{t}", "    " + ld(f"%q{t}", "%Q", f"%qi{t}", vw)]
        res = ", ".join(["%mf", "%lf"] + [f"%af{t}" for t in range(nt)])
        it = ", ".join(["%mm = %ninf", "%ll = %zf"] + [f"%ac{t} = %zv" for t in range(nt)])
        k.append(f"    {res} = for %j = %zero to %jend step %one iter({it}) {{")
        k += ["      %hj = add %hL, %j", "      %ko = mul %hj, %nD"]
        for t in range(nt):
            k += [f"      %ki{t} = add %ko, %qd{t}", "      " + ld(f"%k{t}", "%K", f"%ki{t}", vw)]
            k.append(f"      %p{t} = mul %q{t}, %k{t}" if t == 0 else f"      %p{t} = fma %q{t}, %k{t}, %p{t - 1}")
        dot = f"%p{nt - 1}"
        if vw > 1:
            k.append(f"      %hs0 = extract {dot}[0]")
            for i in range(1, vw):
                k += [f"      %he{i} = extract {dot}[{i}]", f"      %hs{i} = add %hs{i - 1}, %he{i}"]
            dot = f"%hs{vw - 1}"
        k += [f"      %sc = mul {dot}, %scale", "      %mn = max %mm, %sc", "      %dm = sub %mm, %mn", "      %cf = exp %dm",
              "      %dsc = sub %sc, %mn", "      %pf = exp %dsc", "      %l2 = fma %ll, %cf, %pf"]
        cf, pf = "%cf", "%pf"
        if vw > 1:
            k += [f"      %cfs = splat %cf : {T}", f"      %pfs = splat %pf : {T}"]
            cf, pf = "%cfs", "%pfs"
        ys = ["%mn", "%l2"]
        for t in range(nt):
            k += [f"      %vi{t} = add %ko, %qd{t}", "      " + ld(f"%v{t}", "%V", f"%vi{t}", vw),
                  f"      %x{t} = mul %ac{t}, {cf}", f"      %an{t} = fma {pf}, %v{t}, %x{t}"]
            ys.append(f"%an{t}")
        k += ["      yield " + ", ".join(ys), "    }", "    %inv = div %o1, %lf"]
        inv = "%inv"
        if vw > 1:
            k.append(f"    %invs = splat %inv : {T}")
            inv = "%invs"
        for t in range(nt):
            k += [f"    %out{t} = mul %af{t}, {inv}", f"    store %O[%qi{t}], %out{t}" + (", align 4" if vw > 1 else "")]
        k += ["  }", "}"]
        src += k
    decl = ["const float* Q = static_cast<const float*>(args[0]);", "const float* K = static_cast<const float*>(args[1]);",
            "const float* V = static_cast<const float*>(args[2]);", "float* O = static_cast<float*>(args[3]);",
            "const long long H = dims[0], L = dims[1], D = dims[2];", "std::vector<double> p(L);"]
    loop = ["for (long long h = 0; h < H; ++h)", "  for (long long i = 0; i < L; ++i) {",
            "    const float* q = Q + (h * L + i) * D; double m = -INFINITY, s = 0;",
            "    for (long long j = 0; j <= i; ++j) {", "      double d = 0; const float* kr = K + (h * L + j) * D;",
            "      for (long long e = 0; e < D; ++e) d += (double)q[e] * kr[e];",
            "      p[j] = d / std::sqrt((double)D); m = std::fmax(m, p[j]);", "    }",
            "    for (long long j = 0; j <= i; ++j) { p[j] = std::exp(p[j] - m); s += p[j]; }",
            "    for (long long e = 0; e < D; ++e) {", "      double o = 0;",
            "      for (long long j = 0; j <= i; ++j) o += p[j] * V[(h * L + j) * D + e];",
            "      O[(h * L + i) * D + e] = (float)(o / s);", "    }", "  }"]
    ref = cpp_ref(decl, loop)
    ref.insert(1, "#include <vector>")
    n = "H*L*D"
    return {"name": "suite_attention", "description": "causal attention per head, head dim 64: O = softmax(Q K^T / 8, causal) V",
            "dims": {"H": {"min": 1}, "L": {"min": 1, "max": 65536}, "D": {"min": D, "max": D}},
            "args": [{"name": a, "role": "input", "type": "f32", "count": n, "range": [-1, 1]} for a in "QKV"]
            + [{"name": "O", "role": "output", "type": "f32", "count": n}],
            "cost": {"bytes": "16*H*L*D", "flops": "2*H*L*L*D"}, "tolerance": {"atol": 1e-4, "rtol": 1e-3},
            "test_shapes": ["H=1,L=5,D=64", "H=2,L=64,D=64"],
            "reference": {"lang": "cpp", "entry": "reference", "source": ref},
            "kernel": {"knobs": {"vw": VWS, "bs": [64, 16, 32, 128, 256]}, "source": src},
            "pytorch": ["def model(Q, K, V, H, L, D):", "    q, k, v = (t.view(1, H, L, D) for t in (Q, K, V))",
                        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).reshape(-1)"]}


def conv1d_op():
    """y[co, t] = b[co] + sum over ci, k of w[co, ci, k] * x[ci, t + k] (valid padding, stride 1)."""
    src = ["// launch conv1d_v${vw} grid=${((T-KS+1)/vw+bs)/bs},${Cout},1 block=${bs},1,1 args=0,1,2,3"]
    for vw in VWS:
        T = ty(vw)
        k = [f"kernel @conv1d_v{vw}(%x: ptr<global, f32>, %w: ptr<global, f32>, %b: ptr<global, f32>, %y: ptr<global, f32>) {{"]
        k += ["  " + l for l in PRELUDE]
        k += ["  %co = block_id.y", "  %nTo = const ${T-KS+1} : i32", "  %nT = const ${T} : i32", "  %nCi = const ${Cin} : i32",
              "  %nKS = const ${KS} : i32", f"  %vwc = const {vw} : i32", "  %t0 = mul %g, %vwc", "  %t1 = add %t0, %vwc",
              "  %full = cmp.le %t1, %nTo", "  %bco = load %b[%co]", "  %wco = mul %co, %nCi", "  %yo = mul %co, %nTo",
              "  if %full {"]
        init = "%bco"
        if vw > 1:
            k.append(f"    %bs = splat %bco : {T}")
            init = "%bs"
        k += [f"    %acc = for %ci = %zero to %nCi step %one iter(%a = {init}) {{", "      %wr = add %wco, %ci",
              "      %wb = mul %wr, %nKS", "      %xr = mul %ci, %nT", "      %xb = add %xr, %t0",
              "      %s = for %kk = %zero to %nKS step %one iter(%a1 = %a) {", "        %wi = add %wb, %kk",
              "        %wv = load %w[%wi]", "        %xi = add %xb, %kk", "        " + ld("%xv", "%x", "%xi", vw)]
        if vw > 1:
            k += [f"        %ws = splat %wv : {T}", "        %a2 = fma %ws, %xv, %a1"]
        else:
            k.append("        %a2 = fma %wv, %xv, %a1")
        k += ["        yield %a2", "      }", "      yield %s", "    }", "    %yi = add %yo, %t0",
              "    store %y[%yi], %acc" + (", align 4" if vw > 1 else ""), "  } else {",
              "    for %t = %t0 to %nTo step %one {",
              "      %acct = for %cit = %zero to %nCi step %one iter(%at = %bco) {", "        %wrt = add %wco, %cit",
              "        %wbt = mul %wrt, %nKS", "        %xrt = mul %cit, %nT", "        %xbt = add %xrt, %t",
              "        %st = for %kt = %zero to %nKS step %one iter(%at1 = %at) {", "          %wit = add %wbt, %kt",
              "          %wvt = load %w[%wit]", "          %xit = add %xbt, %kt", "          %xvt = load %x[%xit]",
              "          %at2 = fma %wvt, %xvt, %at1", "          yield %at2", "        }", "        yield %st", "      }",
              "      %yit = add %yo, %t", "      store %y[%yit], %acct", "    }", "  }", "}"]
        src += k
    decl = ["const float* x = static_cast<const float*>(args[0]);", "const float* w = static_cast<const float*>(args[1]);",
            "const float* b = static_cast<const float*>(args[2]);", "float* y = static_cast<float*>(args[3]);",
            "const long long Cin = dims[0], Cout = dims[1], T = dims[2], KS = dims[3], To = T - KS + 1;"]
    loop = ["for (long long co = 0; co < Cout; ++co)", "  for (long long t = 0; t < To; ++t) {", "    double s = b[co];",
            "    for (long long ci = 0; ci < Cin; ++ci)",
            "      for (long long k = 0; k < KS; ++k) s += (double)w[(co * Cin + ci) * KS + k] * x[ci * T + t + k];",
            "    y[co * To + t] = (float)s;", "  }"]
    return {"name": "suite_conv1d", "description": "1-D convolution, valid padding, stride 1: x [Cin, T], w [Cout, Cin, KS], b [Cout] -> y [Cout, T-KS+1]",
            "dims": {"Cin": {"min": 1}, "Cout": {"min": 1}, "T": {"min": 8}, "KS": {"min": 1, "max": 7}},
            "args": [{"name": "x", "role": "input", "type": "f32", "count": "Cin*T", "range": [-1, 1]},
                     {"name": "w", "role": "input", "type": "f32", "count": "Cout*Cin*KS", "range": [-1, 1]},
                     {"name": "b", "role": "input", "type": "f32", "count": "Cout", "range": [-1, 1]},
                     {"name": "y", "role": "output", "type": "f32", "count": "Cout*(T-KS+1)"}],
            "cost": {"bytes": "4*Cin*T+4*Cout*Cin*KS+4*Cout+4*Cout*(T-KS+1)", "flops": "2*Cout*Cin*KS*(T-KS+1)"},
            "tolerance": {"atol": 1e-3, "rtol": 1e-3}, "test_shapes": ["Cin=3,Cout=2,T=11,KS=3", "Cin=16,Cout=16,T=256,KS=3"],
            "reference": {"lang": "cpp", "entry": "reference", "source": cpp_ref(decl, loop)},
            "kernel": {"knobs": {"vw": VWS, "bs": [64, 16, 32, 128, 256]}, "source": src},
            "pytorch": ["def model(x, w, b, Cin, Cout, T, KS):",
                        "    return torch.nn.functional.conv1d(x.view(1, Cin, T), w.view(Cout, Cin, KS), b).reshape(-1)"]}


# ---- the suite ---------------------------------------------------------------------------------
EW_N = "n=1048576"
ROWS = "rows=1024,cols=1024"
MM = "M=256,K=256,N=256"


def main():
    import argparse
    ap = argparse.ArgumentParser(description="writes the suite's op files and problem list")
    ap.add_argument("--out", default=str(HERE), help="directory for ops/ and suite.json (default: beside this script)")
    out = pathlib.Path(ap.parse_args().out)
    ops = {}
    for name, (body, c, t) in ACT.items():
        ops[name] = ew_op(name, body, c, t, 1)
    for name, (body, c, t) in BIN.items():
        ops[name] = ew_op(name, body, c, t, 2, special=name in ("add", "mul"))
    ops["bias_gelu"] = ew_op("bias_gelu", ACT["gelu"][0], ACT["gelu"][1], ACT["gelu"][2], 1, bias=True)
    ops.update(row_ops())
    ops.update(matmul_ops())
    ops["attention"] = attention_op()
    ops["conv1d"] = conv1d_op()
    problems = []
    def prob(name, op, shape, level, bound):
        problems.append({"name": name, "op_file": f"ops/{op}.json", "shape": shape, "level": level, "bound": bound})
    for name in ACT:
        prob(name, name, EW_N, 1, "memory")
    prob("add", "add", EW_N, 1, "memory")
    prob("mul", "mul", EW_N, 1, "memory")
    for name in ("row_sum", "row_max", "row_mean", "row_l2norm", "softmax", "log_softmax", "layer_norm", "rms_norm"):
        prob(name, name, ROWS, 1, "memory")
    prob("matvec", "matvec", "rows=2048,cols=1024", 1, "memory")
    prob("matmul_square", "matmul", MM, 1, "compute")
    prob("matmul_tall_skinny", "matmul", "M=2048,K=64,N=64", 1, "compute")
    prob("matmul_tn", "matmul_tn", MM, 1, "compute")
    prob("matmul_nt", "matmul_nt", MM, 1, "compute")
    prob("bmm", "bmm", "batch=8,M=128,K=128,N=128", 1, "compute")
    prob("conv1d", "conv1d", "Cin=32,Cout=32,T=4096,KS=3", 1, "compute")
    prob("swiglu", "swiglu", EW_N, 2, "memory")
    prob("bias_gelu", "bias_gelu", ROWS, 2, "memory")
    prob("add_rms_norm", "add_rms_norm", ROWS, 2, "memory")
    for act in ("relu", "gelu", "silu"):
        prob(f"matmul_bias_{act}", f"matmul_bias_{act}", MM, 2, "compute")
    prob("attention_causal", "attention", "H=4,L=256,D=64", 2, "compute")
    (out / "ops").mkdir(parents=True, exist_ok=True)
    for name, op in ops.items():
        (out / "ops" / f"{name}.json").write_text(json.dumps(op, indent=1) + "\n")
    suite = {"what": "evolve's benchmark suite: level 1 (one op) and level 2 (fused) problems, written for Loom",
             "generated_by": "bench/suite/gen_suite.py", "problems": problems}
    (out / "suite.json").write_text(json.dumps(suite, indent=1) + "\n")
    print(f"{len(ops)} op files, {len(problems)} problems")


if __name__ == "__main__":
    main()
