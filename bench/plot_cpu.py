#!/usr/bin/env python3
"""Loom's CPU speed over llama.cpp's, per file and test, as an SVG bar chart, from the JSON that
bench/bench_cpu.py writes (several runs combine: e.g. a pp128 run and a pp512 run).

    python3 bench/plot_cpu.py RUN.json [RUN.json ...] -o chart.svg [--device cpu] [--tests pp128,pp512,tg32]

Per file one bar per test (ppN, tgN): the median of Loom's new binary (or the only one) over the
faster llama.cpp of the run (its portable bindings or `--llama-native`'s llama-bench), and, where
the run had `--old-bin`, the old binary's ratio as a lighter bar behind it. Dashed lines mark 1x
and the CPU issue's floors (prompts 1.2x, generation 1.5x). A later run's numbers for a (file,
test) replace an earlier run's.
"""
import argparse
import json
import pathlib
from html import escape

COLORS = {"pp": "#2b6cb0", "tg": "#c05621"}


def ratios(runs, device):
    """{file: {test: (new ratio, old ratio or None)}} in first-seen file order."""
    out = {}
    for path in runs:
        r = json.loads(pathlib.Path(path).read_text())
        tests = {"pp": f"pp{r['n_prompt']}", "tg": f"tg{r['n_gen']}"}
        for name, entry in r["models"].items():
            peers = [entry[k] for k in ("llama_cpp", "llama_cpp_native") if k in entry]
            if not peers:
                continue
            new = entry.get(f"loom_new_{device}", entry.get(f"loom_{device}"))
            old = entry.get(f"loom_old_{device}")
            if new is None:
                continue
            for w, test in tests.items():
                key = f"{w}_tokens_per_second"
                peer = max(p[key]["median"] for p in peers)
                out.setdefault(name, {})[test] = (new[key]["median"] / peer,
                                                  old[key]["median"] / peer if old else None)
    return out


def svg(data, title):
    tests = sorted({t for d in data.values() for t in d}, key=lambda t: (t[:2] != "pp", int(t[2:])))
    bar, gap, left, top, width = 14, 10, 190, 50, 460
    rows = len(data)
    height = top + rows * (len(tests) * bar + gap) + 60
    vmax = max(3.0, max(r for d in data.values() for n, o in d.values() for r in (n, o or 0)) * 1.05)
    x = lambda v: left + v / vmax * width  # noqa: E731
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" height="{height}" '
         f'font-family="sans-serif" font-size="12">',
         f'<text x="{left}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>']
    for v, label in ((1.0, "1x"), (1.2, "1.2x"), (1.5, "1.5x")):
        s.append(f'<line x1="{x(v):.1f}" y1="{top - 8}" x2="{x(v):.1f}" y2="{height - 50}" stroke="#888" '
                 f'stroke-dasharray="4 3"/>')
        s.append(f'<text x="{x(v):.1f}" y="{top - 12}" text-anchor="middle" fill="#555">{label}</text>')
    y = top
    for name, d in data.items():
        s.append(f'<text x="{left - 8}" y="{y + len(tests) * bar / 2 + 4:.1f}" text-anchor="end">{escape(name)}</text>')
        for t in tests:
            if t in d:
                new, old = d[t]
                c = COLORS[t[:2]]
                if old is not None:
                    s.append(f'<rect x="{left}" y="{y + 1}" width="{x(old) - left:.1f}" height="{bar - 2}" '
                             f'fill="{c}" opacity="0.3"/>')
                s.append(f'<rect x="{left}" y="{y + 4}" width="{x(new) - left:.1f}" height="{bar - 8}" fill="{c}"/>')
                s.append(f'<text x="{x(max(new, old or 0)) + 4:.1f}" y="{y + bar - 3}">{t} {new:.2f}x</text>')
            y += bar
        y += gap
    s.append(f'<text x="{left}" y="{height - 28}" fill="#555">Loom --device cpu tok/s over the faster llama.cpp '
             f'(same run); light bars: the old binary</text>')
    s.append(f'<line x1="{left}" y1="{top - 4}" x2="{left}" y2="{height - 50}" stroke="#000"/>')
    s.append("</svg>")
    return "\n".join(s) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--title", default=None)
    ap.add_argument("--tests", default=None, help="comma-separated tests to show (default: all)")
    args = ap.parse_args()
    data = ratios(args.runs, args.device)
    if args.tests:
        keep = set(args.tests.split(","))
        data = {name: {t: v for t, v in d.items() if t in keep} for name, d in data.items()}
    if not data:
        raise SystemExit("no Loom and llama.cpp results for that device in these files")
    first = json.loads(pathlib.Path(args.runs[0]).read_text())
    title = args.title or f"{first['device']}, {first['threads']} threads: Loom / llama.cpp"
    pathlib.Path(args.out).write_text(svg(data, title))
    print(f"plot_cpu: wrote {args.out} ({len(data)} files)")


if __name__ == "__main__":
    main()
