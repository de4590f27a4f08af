#!/usr/bin/env python3
"""Compare two LOOM_DUMP_VALUES directories value by value, in the order the first run wrote them.

  LOOM_DUMP_VALUES=/tmp/ref loom run --device cpu-ref -p "..." -n 1
  LOOM_DUMP_VALUES=/tmp/hrx loom run --device cpu     -p "..." -n 1
  python3 tools/compare_dumps.py /tmp/ref /tmp/hrx [--all]

Prints, per value: cosine similarity, max |diff| and max |diff| / max |ref|. Without --all it
stops after the first few values that are clearly off, which is where to look.
"""
import argparse
import os
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ref")
    ap.add_argument("other")
    ap.add_argument("--all", action="store_true", help="print every value, not just up to the first bad ones")
    ap.add_argument("--bad", type=float, default=1e-3, help="relative max-diff counted as bad")
    a = ap.parse_args()
    names = sorted((f for f in os.listdir(a.ref) if f.endswith(".f32")),
                   key=lambda f: os.stat(os.path.join(a.ref, f)).st_mtime_ns)
    bad = 0
    for f in names:
        p = os.path.join(a.other, f)
        if not os.path.exists(p):
            print(f"{f[:-4]:40s} missing in {a.other}")
            continue
        x = np.fromfile(os.path.join(a.ref, f), dtype=np.float32).astype(np.float64)
        y = np.fromfile(p, dtype=np.float32).astype(np.float64)
        if x.size != y.size:
            print(f"{f[:-4]:40s} sizes differ: {x.size} vs {y.size}")
            continue
        d = np.abs(x - y)
        scale = max(np.abs(x).max(), 1e-30)
        cos = float(x @ y / max(np.sqrt((x @ x) * (y @ y)), 1e-300))
        rel = float(d.max() / scale)
        flag = "  <-- BAD" if rel > a.bad or not np.isfinite(y).all() else ""
        print(f"{f[:-4]:40s} cos {cos:.6f}  max|diff| {d.max():.3e}  rel {rel:.2e}  (argmax {int(d.argmax())}){flag}")
        if flag:
            bad += 1
            if bad >= 3 and not a.all:
                break
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
