"""`loom evolve report`: what its charts and tables show is what the database holds.

A small cpu search (about 40 s on a 2-core machine) of a row-sum whose knobs plant failing
kernels (`passes=0` never stores: the judge's `stale`; `skew=1` sums one column too few:
`wrong`), then its report parsed: the best-time curve has one point per evaluation in order and
never rises, the per-status counts of "Why candidates failed" equal the database's, the roofline
points sit under the measured read-bandwidth roof, and a job on another device key is counted,
not drawn.
"""
import html.parser
import json
import pathlib
import sqlite3

from conftest import run_loom

BASE_OP = pathlib.Path(__file__).resolve().parents[2] / "tests" / "evolve" / "ops" / "row_sum_passes.json"


def planted_op(path):
    op = json.loads(BASE_OP.read_text())
    op["name"] = "row_sum_planted"
    op["kernel"]["knobs"] = {"passes": [4, 1, 0], "skew": [0, 1], "bs": [64, 32]}
    op["kernel"]["source"] = [line.replace("row_sum_passes", "row_sum_planted").replace("const ${cols} : i32", "const ${cols-skew} : i32")
                              for line in op["kernel"]["source"]]
    assert any("cols-skew" in line for line in op["kernel"]["source"])
    path.write_text(json.dumps(op))


class Marks(html.parser.HTMLParser):
    """Every element with a class, in document order, with its attributes."""

    def __init__(self):
        super().__init__()
        self.marks = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "class" in a:
            self.marks.append((tag, a))

    def of(self, cls):
        return [a for _, a in self.marks if a["class"] == cls]


def test_report_shows_the_search_the_roofline_and_why_candidates_failed(loom_bin, tmp_path):
    op, db, out = tmp_path / "op.json", tmp_path / "r.db", tmp_path / "r.html"
    planted_op(op)
    run_loom(loom_bin, "evolve", "run", "--op-file", op, "--shape", "rows=256,cols=1024", "--budget", "8", "--strategy",
             "random", "--seed", "3", "--trials", "1", "--holdout", "1", "--time-per-candidate", "0.05", "--confirm-rounds",
             "1", "--no-store", "--compile-jobs", "2", "--db", db, timeout=600)
    con = sqlite3.connect(str(db))
    rows = con.execute("SELECT seq, status, speedup FROM candidates WHERE job = 1 ORDER BY seq").fetchall()
    (baseline_us,), = con.execute("SELECT baseline_us FROM jobs WHERE id = 1").fetchall()
    by_status = dict(con.execute("SELECT status, count(*) FROM candidates WHERE job = 1 AND status != 'ok' GROUP BY status"))
    assert by_status.get("rejected", 0) >= 1, rows  # the planted kernels were proposed
    # A job of the same op timed on another device key (a GPU): it must not appear in the cpu roofline.
    con.execute("INSERT INTO jobs(id, op, shape, device, device_arch, config, best_candidate, status) SELECT 2, op, shape, "
                "'cuda', 'cuda:sm_90:NVIDIA H200', config, best_candidate, status FROM jobs WHERE id = 1")
    con.commit()
    con.close()
    run_loom(loom_bin, "evolve", "report", "1", "-o", out, "--db", db)
    text = out.read_text()
    p = Marks()
    p.feed(text)

    # 1. Best time so far: one point per evaluation, in seq order, never rising, ending at the best.
    best = p.of("overall-best")
    assert [int(a["data-eval"]) for a in best] == list(range(len(rows)))
    assert [int(a["data-seq"]) for a in best] == [s for s, _, _ in rows]
    ys = [float(a["data-best-us"]) for a in best]
    assert all(b <= a for a, b in zip(ys, ys[1:])), ys
    assert abs(ys[0] - baseline_us) <= 1e-6 * baseline_us
    top = max(sp for _, st, sp in rows if st == "ok")
    assert abs(ys[-1] - baseline_us / top) <= 1e-6 * ys[-1]
    assert len(p.of("fail")) == sum(st != "ok" for _, st, _ in rows)

    # 2. Why candidates failed: counts per status equal the database's; every group has a message.
    why = p.of("why")[1:]  # the first is the table itself
    counts = {}
    for a in why:
        counts[a["data-status"]] = counts.get(a["data-status"], 0) + int(a["data-count"])
    assert counts == by_status, (counts, by_status)
    tags = {a["data-tag"] for a in why if a["data-status"] == "rejected"}
    assert tags <= {"stale", "wrong"} and tags, tags

    # 3. Roofline of the cpu key: the baseline and the winner under the roof; the GPU job counted, not drawn.
    pts = p.of("roof-pt")
    roles = [a["data-role"] for a in pts]
    assert "winner" in roles and "baseline" in roles
    for a in pts:
        assert float(a["data-gflops"]) < float(a["data-roof-gflops"]), a
        assert a["data-job"] == "1"
    devices = [a["data-device"] for a in p.of("axes")]
    assert len(devices) == 1 and devices[0].startswith("cpu:")
    assert "1 job(s) on cuda:sm_90:NVIDIA H200" in text
