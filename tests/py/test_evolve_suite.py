"""evolve's benchmark suite (bench/suite): every problem's op file loads and matches its generator,
carries its PyTorch eager equivalent, and every problem is searched on the cpu device with a tiny
budget (bench/evolve_suite.py --small: each op's larger test shape, its smaller one held out);
every winner is accepted by the judge, whose checks include the held-out shapes.

  LOOM_BIN=build/loom python3 -m pytest tests/py/test_evolve_suite.py
"""
import json
import pathlib
import subprocess
import sys

from conftest import ROOT, run_loom

SUITE = ROOT / "bench" / "suite"


def problems():
    return json.loads((SUITE / "suite.json").read_text())["problems"]


def test_suite_files_are_generated_and_complete(tmp_path):
    subprocess.run([sys.executable, str(SUITE / "gen_suite.py"), "--out", str(tmp_path)], check=True, capture_output=True)
    generated = sorted(p.name for p in (tmp_path / "ops").glob("*.json"))
    assert generated == sorted(p.name for p in (SUITE / "ops").glob("*.json")), "run bench/suite/gen_suite.py"
    for name in generated:
        assert (tmp_path / "ops" / name).read_text() == (SUITE / "ops" / name).read_text(), f"{name}: run bench/suite/gen_suite.py"
    assert (tmp_path / "suite.json").read_text() == (SUITE / "suite.json").read_text()
    ps = problems()
    assert len(ps) >= 30 and {p["level"] for p in ps} == {1, 2}
    assert len({p["name"] for p in ps}) == len(ps)
    for p in ps:
        op = json.loads((SUITE / p["op_file"]).read_text())
        assert op["reference"]["lang"] == "cpp" and op["kernel"]["source"], p["name"]
        assert any("def model(" in line for line in op["pytorch"]), p["name"]
        assert len(op["test_shapes"]) >= 2, p["name"]


def test_every_op_file_loads(loom_bin, tmp_path):
    # `check` with no candidates loads and validates the op file, nothing else; the references are
    # compiled and run by the searches below (a baseline needs its reference).
    for p in problems():
        r = run_loom(loom_bin, "evolve", "check", "--op-file", SUITE / p["op_file"], "--shape", p["shape"], check=False)
        assert r.returncode == 0 and "0 candidates" in r.stdout, (p["name"], r.stderr)
    op = json.loads((SUITE / "ops" / "relu.json").read_text())
    del op["reference"]
    (tmp_path / "broken.json").write_text(json.dumps(op))
    bad = run_loom(loom_bin, "evolve", "check", "--op-file", tmp_path / "broken.json", "--shape", "n=4", check=False)
    assert bad.returncode != 0 and "needs a \"reference\"" in bad.stderr, bad.stderr


def test_every_problem_is_searched_and_its_winner_judged_correct(loom_bin, tmp_path):
    out = tmp_path / "suite.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "evolve_suite.py"), "--loom", str(loom_bin), "--small",
                        "--budget", "1", "--holdout", "1", "--trials", "1", "--time-per-candidate", "0.02",
                        "--confirm-rounds", "1", "--ws-factor", "0.25", "--jobs", "2",
                        "--db", str(tmp_path / "suite.db"), "-o", str(out)], capture_output=True, text=True, timeout=900)
    print(r.stdout[-6000:], r.stderr[-2000:])
    doc = json.loads(out.read_text())
    assert doc["commit"] and doc["device"].startswith("cpu") and "evolve_suite.py" in doc["command"]
    res = doc["problems"]
    assert len(res) == len(problems())
    for p in res:
        # Correct = the job finished and its winner passed every check of the judge, held-out shapes included.
        assert p["correct"], (p["name"], p.get("error"))
        assert p["holdout_shapes"].startswith("{"), (p["name"], "no held-out shape was judged")
        assert p["evaluations"] >= 2 and p["speedup"] > 0
    assert doc["summary"]["correctness_rate"] == 1.0 and r.returncode == 0
    assert f"[{len(res)}/{len(res)}]" in r.stdout, "one progress line per problem"
    assert doc["partial"] is False
    # --resume keeps every problem the file holds: nothing is searched again, the results stay.
    again = subprocess.run([sys.executable, str(ROOT / "bench" / "evolve_suite.py"), "--loom", str(loom_bin), "--small",
                            "--budget", "1", "--db", str(tmp_path / "suite.db"), "--resume", "-o", str(out)],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resume: {len(res)} problems kept" in again.stdout and "[ 1/" not in again.stdout, again.stdout[-2000:]
    assert json.loads(out.read_text())["problems"] == res
