"""evolve over a shared PostgreSQL database, against a real server that this module starts itself
(initdb into a temp dir, pg_ctl on a unix socket there and a free port, stopped at the end; as
`nobody` when run as root, since postgres refuses root):

- one coordinator (`evolve run --workers 0`) and three `evolve worker` processes on the cpu device
  complete a bounded search; one worker is killed with SIGKILL in the middle of an evaluation: its
  lease runs out, another worker evaluates it, and nothing is lost or counted twice (one candidate
  per proposal, one result per queued evaluation); another is stopped (SIGSTOP) in the middle of
  one and woken after the search: its late answer is dropped;
- a second coordinator of the running job is refused with a message naming the first (pid, host,
  since when);
- the same search with one worker (`--workers 1`), its database server stopped and started in the
  middle, proposes the same candidates and ends with the same best (the op's knob `passes` makes
  kernels 3x and 10x slower than the fastest, so timing noise cannot reorder the classes).
"""
import glob
import json
import os
import pathlib
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import ROOT, free_port, run_loom

OP = ROOT / "tests" / "evolve" / "ops" / "row_sum_passes.json"
SEARCH = ["--op-file", OP, "--shape", "rows=256,cols=1024", "--device", "cpu", "--budget", "8", "--strategy", "random",
          "--seed", "7", "--trials", "1", "--holdout", "1", "--time-per-candidate", "0.05", "--ws-factor", "0.25",
          "--confirm-rounds", "1", "--compile-jobs", "3", "--no-store"]
LEASE = "5"


def pg_bin(name):
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or ([shutil.which(name)] if shutil.which(name) else [])
    return found[-1] if found else None


class Postgres:
    """A PostgreSQL server of this test: data and socket in a temp dir, trust authentication."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="loom-pg-")
        self.port = free_port()
        self.user = None
        if os.geteuid() == 0:
            self.user = "nobody"
            os.chown(self.dir, pwd.getpwnam("nobody").pw_uid, -1)
        self.url = f"postgresql://loom@/postgres?host={self.dir}&port={self.port}"

    def _run(self, *args, check=True):
        cmd = list(map(str, args))
        if self.user:
            cmd = ["runuser", "-u", self.user, "--"] + cmd
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=check)

    def init(self):
        self._run(pg_bin("initdb"), "-D", f"{self.dir}/data", "-A", "trust", "-U", "loom", "--no-sync")

    def start(self):
        self._run(pg_bin("pg_ctl"), "-D", f"{self.dir}/data", "-l", f"{self.dir}/log", "-w", "-o",
                  f"-k {self.dir} -p {self.port} -c listen_addresses='' -c fsync=off", "start")

    def stop(self, check=True):
        self._run(pg_bin("pg_ctl"), "-D", f"{self.dir}/data", "-m", "fast", "-w", "stop", check=check)

    def sql(self, query):
        r = subprocess.run([pg_bin("psql"), "-At", "-F", "|", "-d", self.url, "-c", query], capture_output=True,
                           text=True, timeout=60, check=True)
        return [line.split("|") for line in r.stdout.splitlines() if line]


@pytest.fixture(scope="module")
def pg():
    if not pg_bin("initdb") or not pg_bin("pg_ctl"):
        pytest.skip("the PostgreSQL server (Debian's postgresql, installed by tools/setup.sh --dev) is not installed")
    server = Postgres()
    server.init()
    server.start()
    yield server
    server.stop(check=False)
    shutil.rmtree(server.dir, ignore_errors=True)


class Proc:
    """A loom process whose output lines are collected by a thread (and can be waited for)."""

    def __init__(self, loom_bin, *args, env=None):
        self.p = subprocess.Popen([str(loom_bin), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=env)
        self.lines = []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            with self.cv:
                self.lines.append(line)
                self.cv.notify_all()
        with self.cv:
            self.cv.notify_all()

    def wait_for(self, pattern, timeout=120):
        rx = re.compile(pattern)
        deadline = time.time() + timeout
        with self.cv:
            while True:
                for line in self.lines:
                    m = rx.search(line)
                    if m:
                        return m
                left = deadline - time.time()
                assert left > 0 and self.p.poll() is None or any(rx.search(x) for x in self.lines), \
                    f"no line matching {pattern!r}:\n{self.text()}"
                self.cv.wait(min(left, 0.5))

    def text(self):
        with self.cv:
            return "".join(self.lines)


def job_of(coord):
    return int(coord.wait_for(r"^job (\d+) in ").group(1))


def candidates(pg, job):
    return pg.sql(f"SELECT seq, hash, status, coalesce(worker, ''), body FROM candidates WHERE job = {job} ORDER BY seq")


def winner_passes(pg, job):
    (body,), = pg.sql(f"SELECT c.body FROM jobs j JOIN candidates c ON c.id = j.best_candidate WHERE j.id = {job}")
    return json.loads(body)["knobs"]["passes"]


def test_coordinator_three_workers_sigkill_second_coordinator_and_restart(loom_bin, pg):
    wtmp = pathlib.Path(pg.dir) / "worker-tmp"  # the workers' pools of input sets
    wtmp.mkdir()
    workers = [Proc(loom_bin, "evolve", "worker", "--db", pg.url, "--device", "cpu", "--lease", LEASE,
                    env={**os.environ, "TMPDIR": str(wtmp)}) for _ in range(3)]
    coord = Proc(loom_bin, "evolve", "run", *SEARCH, "--workers", "0", "--db", pg.url)
    try:
        job = job_of(coord)

        def holder(pattern, among, min_seq=0):
            deadline = time.time() + 120
            while True:
                assert time.time() < deadline, f"no worker printed {pattern!r}:\n" + coord.text()
                for w in among:
                    for m in re.finditer(pattern, w.text()):
                        if int(m.group(2)) >= min_seq:
                            return w, m
                time.sleep(0.02)

        # The worker that leased the baseline (the slowest kernel) is killed in the middle of it.
        victim, m = holder(r"worker (\S+): leased job \d+ eval #(0) ", workers)
        victim.p.send_signal(signal.SIGKILL)
        victim.p.wait()
        name, seq = m.group(1), int(m.group(2))
        # Another is stopped in the middle of a search evaluation; it wakes after the search, when
        # its lease has passed to a third worker, and its late answer must not count.
        others = [w for w in workers if w is not victim]
        min_seq = 1
        while True:
            sleeper, m = holder(r"worker (\S+): leased job \d+ eval #(\d+) ", others, min_seq)
            sleeper.p.send_signal(signal.SIGSTOP)
            sleeper_name, sleeper_seq = m.group(1), int(m.group(2))
            time.sleep(0.2)  # output already in the pipe arrives
            if not re.search(rf"job {job} eval #{sleeper_seq}: ", sleeper.text()):
                break  # stopped in the middle of it
            sleeper.p.send_signal(signal.SIGCONT)  # it had finished: the next one
            min_seq = sleeper_seq + 1
        # A second coordinator of the running job is refused and names the first.
        other = run_loom(loom_bin, "evolve", "resume", job, "--workers", "0", "--db", pg.url, check=False)
        assert other.returncode != 0
        assert re.search(rf"job {job} is being run by pid {coord.p.pid} on {re.escape(socket.gethostname())} since "
                         r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(heartbeat \d+ s ago\)", other.stderr), other.stderr
        assert coord.p.wait(timeout=240) == 0, coord.text()
        sleeper.p.send_signal(signal.SIGCONT)
        sleeper.wait_for(rf"worker {re.escape(sleeper_name)}: job {job} eval #{sleeper_seq}: result dropped, the lease "
                         "passed to another worker")
        # Between evaluations SIGTERM ends a worker cleanly, its pools of the ended job removed.
        for w in workers[:]:
            if w is not victim:
                w.p.send_signal(signal.SIGTERM)
                assert w.p.wait(timeout=30) == 0, w.text()
                assert "stopped between evaluations" in w.text(), w.text()
        assert not list(wtmp.glob("loom-evolve-pool-*")), list(wtmp.iterdir())
    finally:
        for w in workers:
            if w.p.poll() is None:
                w.p.send_signal(signal.SIGCONT)
                w.p.send_signal(signal.SIGTERM)
                w.p.wait(timeout=30)
        if coord.p.poll() is None:
            coord.p.kill()
    out = coord.text()
    assert f"job {job} done: 9 evaluations" in out, out

    # Nothing lost, nothing counted twice: one candidate per proposal (baseline + 8), one result
    # per queued evaluation; the killed worker's evaluation was leased again and finished by another.
    cands = candidates(pg, job)
    assert [int(c[0]) for c in cands] == list(range(9))
    evals = pg.sql(f"SELECT seq, status, attempts, worker FROM evaluations WHERE job = {job} AND kind = 'eval' ORDER BY seq")
    assert [int(e[0]) for e in evals] == list(range(9)) and all(e[1] == "done" for e in evals), evals
    retried = {int(e[0]): e for e in evals if int(e[2]) > 1}
    assert sorted(retried) == sorted([seq, sleeper_seq]), evals
    assert retried[seq][3] != name, "the killed worker's evaluation was finished by another worker"
    assert retried[sleeper_seq][3] != sleeper_name, "the stopped worker's evaluation was finished by another worker"
    # Every candidate names the worker whose answer counted: never the killed one (it died in its
    # first evaluation), and for the stopped worker's evaluation not the stopped worker (which may
    # have finished earlier ones before it was stopped).
    assert all(c[3] and c[3] != name for c in cands), cands
    assert cands[sleeper_seq][3] != sleeper_name, cands
    assert all(re.search(r"leased job \d+ eval", w.text()) for w in workers), "all three workers took evaluations"
    report = pathlib.Path(pg.dir) / "report.html"
    run_loom(loom_bin, "evolve", "report", job, "-o", report, "--db", pg.url)
    html = report.read_text()
    assert "<h2>Workers</h2>" in html and all(c[3] in html for c in cands), "the report shows the search per worker"

    # The same search with one worker and a database restart in the middle: same proposals, same best.
    coord1 = Proc(loom_bin, "evolve", "run", *SEARCH, "--workers", "1", "--worker-lease", LEASE, "--db", pg.url)
    try:
        job1 = job_of(coord1)
        coord1.wait_for(r"^\[\s+2 ")
        pg.stop()
        time.sleep(1)
        pg.start()
        assert coord1.p.wait(timeout=240) == 0, coord1.text()
    finally:
        if coord1.p.poll() is None:
            coord1.p.kill()
    out1 = coord1.text()
    assert "reconnected after" in out1, out1
    assert f"job {job1} done: 9 evaluations" in out1, out1
    cands1 = candidates(pg, job1)
    assert [(c[0], c[1]) for c in cands1] == [(c[0], c[1]) for c in cands], "same seed and budget: same proposals"
    ok = [json.loads(c[4])["knobs"]["passes"] for c in cands if c[2] == "ok"]
    assert winner_passes(pg, job1) == winner_passes(pg, job) == min(ok), (winner_passes(pg, job1), winner_passes(pg, job), ok)
    st = run_loom(loom_bin, "evolve", "status", job1, "--db", pg.url).stdout
    assert "  status: done\n" in st, st


def test_schema_versions_upgrade_an_old_file_and_refuse_a_newer_one(loom_bin, tmp_path):
    """The same schema code serves SQLite: a file from before schema versions (no schema_version
    table, jobs without the lease columns) is upgraded in place; a newer one is refused."""
    import sqlite3
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE jobs(id INTEGER PRIMARY KEY, op TEXT, shape TEXT, device TEXT, device_arch TEXT, "
                "strategy TEXT, synth TEXT, seed INTEGER, budget TEXT, config TEXT, loom_version TEXT, status TEXT, "
                "created REAL, elapsed_s REAL DEFAULT 0, baseline_us REAL, best_candidate INTEGER, confirmed_speedup REAL)")
    con.execute("INSERT INTO jobs(op, shape, device, strategy, synth, budget, status) "
                "VALUES ('add', 'n=1000', 'cpu', 'mcts', 'mutate', '8', 'done')")
    con.commit()
    con.close()
    st = run_loom(loom_bin, "evolve", "status", "--db", db)
    assert "job 1: add {n=1000}" in st.stdout and "status: done" in st.stdout, st.stdout
    con = sqlite3.connect(db)
    assert [v for (v,) in con.execute("SELECT version FROM schema_version ORDER BY version")] == [1, 2]
    cols = {row[1] for row in con.execute("PRAGMA table_info(jobs)")}
    assert {"lease_pid", "heartbeat", "leased_at", "reason"} <= cols, cols
    assert "worker" in {row[1] for row in con.execute("PRAGMA table_info(candidates)")}
    con.execute("INSERT INTO schema_version(version) VALUES (99)")
    con.commit()
    con.close()
    r = run_loom(loom_bin, "evolve", "status", "--db", db, check=False)
    assert r.returncode != 0 and "schema version 99, newer than this Loom's 2" in r.stderr, r.stderr


def test_worker_bad_arguments_fail_cleanly(loom_bin, tmp_path):
    r = run_loom(loom_bin, "evolve", "worker", check=False, timeout=30)
    assert r.returncode != 0 and "worker needs --db" in r.stderr, r.stderr
    req = tmp_path / "req.json"
    req.write_text("{}")
    r = run_loom(loom_bin, "evolve", "worker", req, "--db", tmp_path / "x.db", check=False, timeout=30)
    assert r.returncode != 0 and "exclude each other" in r.stderr, r.stderr
    r = run_loom(loom_bin, "evolve", "worker", "--db", tmp_path / "x.db", "--lease", "0", check=False, timeout=30)
    assert r.returncode != 0 and "--lease 0" in r.stderr, r.stderr
    # A malformed URL is refused at once (no reconnection loop for a typo).
    t0 = time.time()
    r = run_loom(loom_bin, "evolve", "status", "--db", "postgresql://loom@/x?no_such_option=1", check=False, timeout=30)
    assert r.returncode != 0 and "--db postgresql://loom@/x?no_such_option=1" in r.stderr, r.stderr
    assert time.time() - t0 < 5
