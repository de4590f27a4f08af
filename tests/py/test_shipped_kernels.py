"""The kernels that ship with Loom (data/kernels/*.json, compiled into the binary): `loom kernels
shipped` lists them; `loom bench` on the default model uses those filed under the CPU's key, says
so on stderr and in its JSON, and the text it generates keeps the reference engine's bits; the
user's own store wins over them, and LOOM_NO_SHIPPED_KERNELS=1 turns them off."""
import json
import os
import pathlib

import pytest

from conftest import ROOT, model_path, run_loom

KEY = "cpu:x86-64-v3"  # the key the committed cpu file is searched for (data/kernels/cpu-x86-64-v3.json)


def has_avx2() -> bool:
    try:
        return "avx2" in pathlib.Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def shipped(loom_bin):
    return json.loads(run_loom(loom_bin, "kernels", "shipped", "--json").stdout)


def env_for(tmp_path, **extra):
    env = dict(os.environ)
    env.pop("LOOM_NO_KERNEL_STORE", None)
    env.pop("LOOM_NO_SHIPPED_KERNELS", None)
    env["LOOM_EVOLVE_DB"] = str(tmp_path / "user-store.db")  # the user's store: empty unless a test fills it
    env["LOOM_CPU_ARCH"] = "x86-64-v3"  # the shipped file's key, on any AVX2 machine
    env.update(extra)
    return env


def bench(loom_bin, env):
    r = run_loom(loom_bin, "bench", "-m", model_path("smollm2"), "--device", "cpu", "-p", "8", "-n", "8", "-r", "1",
                 "--json", env=env)
    first = json.loads(r.stdout.splitlines()[0])
    return first["tuned_kernels"], [l for l in r.stderr.splitlines() if l.startswith("loom: shipped kernel:")]


def test_the_committed_files_are_the_ones_compiled_in(loom_bin):
    info = shipped(loom_bin)
    in_tree = sorted(p.name for p in (ROOT / "data" / "kernels").glob("*.json"))
    assert sorted(f"{f['device_arch'].replace(':', '-')}.json" for f in info["files"]) == in_tree
    for f in info["files"]:
        assert f["commit"] and f["command"].startswith("loom evolve ship") and f["searched_on"], f
        for k in f["kernels"]:
            assert k["speedup"] >= 1.05 and k["median_us"] > 0 and k["baseline_us"] > 0, k


@pytest.mark.skipif(not has_avx2(), reason="the shipped cpu kernels are filed under x86-64-v3 (AVX2); this CPU lacks AVX2")
def test_bench_uses_the_shipped_kernels_says_so_and_keeps_the_reference_bits(loom_bin, tmp_path):
    info = shipped(loom_bin)
    files = {f["device_arch"]: f for f in info["files"]}
    assert KEY in files, f"no shipped file for {KEY}: {sorted(files)}"
    # The default model's decode mat-vecs (SmolLM2-135M Q4_1: wtype 3, the output matrix Q8_0).
    want = {("matvec", k["shape"]) for k in files[KEY]["kernels"]
            if k["op"] == "matvec" and (k["shape"].endswith("wtype=3") or k["shape"] == "n_in=576,n_out=49152,n_tokens=1,wtype=8")}
    assert want, "the shipped cpu file has none of the default model's shapes"

    tuned, lines = bench(loom_bin, env_for(tmp_path))
    used = {(t["op"], t["shape"]) for t in tuned if t["origin"] == "shipped:cpu-x86-64-v3.json"}
    assert want <= used, (want, tuned)
    assert len(lines) >= len(want), lines
    assert all("(cpu-x86-64-v3.json evolve-" in l or " cpu-x86-64-v3.json evolve-" in l for l in lines), lines

    off, off_lines = bench(loom_bin, env_for(tmp_path, LOOM_NO_SHIPPED_KERNELS="1"))
    assert off == [] and off_lines == []

    # Same greedy text as the reference engine with them (the cpu driver's kernels are the
    # reference's bits; `loom evolve ship` ships only winners that keep their baseline's bits).
    args = ["run", "-m", model_path("smollm2"), "-p", "The capital of France is", "-n", "24", "--temp", "0"]
    ref = run_loom(loom_bin, *args, "--device", "cpu-ref", env=env_for(tmp_path)).stdout
    cpu = run_loom(loom_bin, *args, "--device", "cpu", env=env_for(tmp_path))
    assert "loom: shipped kernel:" in cpu.stderr
    assert cpu.stdout == ref


@pytest.mark.skipif(not has_avx2(), reason="the shipped cpu kernels are filed under x86-64-v3 (AVX2); this CPU lacks AVX2")
def test_the_users_store_wins_over_a_shipped_kernel(loom_bin, tmp_path):
    files = {f["device_arch"]: f for f in shipped(loom_bin)["files"]}
    k = next(k for k in files[KEY]["kernels"] if k["shape"].endswith("wtype=3"))
    name = json.loads(run_loom(loom_bin, "devices", "--json").stdout)["devices"][0]["name"]
    mine = dict(k, device_arch=f"cpu:{name}", loom_version=k.get("loom_version", "0.1.0"), job=4242, candidate=7,
                body={"kind": "schedule", "knobs": {"rows_per_block": 4, "row_tile": 1, "prefetch": 2048}})
    (tmp_path / "mine.json").write_text(json.dumps([mine]))
    env = env_for(tmp_path)
    before, _ = bench(loom_bin, env)
    assert k["shape"] in {t["shape"] for t in before}, before
    run_loom(loom_bin, "kernels", "--db", env["LOOM_EVOLVE_DB"], "import", tmp_path / "mine.json", env=env)
    after, _ = bench(loom_bin, env)
    by_shape = {t["shape"]: t for t in after}
    assert by_shape[k["shape"]]["id"] == "evolve-4242.7" and by_shape[k["shape"]]["origin"] == env["LOOM_EVOLVE_DB"]
    # The other shapes keep their shipped kernels; a shape with none takes the user's kernel for
    # its class (the store's fallback, last in the lookup order).
    shipped_before = {t["shape"]: t for t in before if t["shape"] != k["shape"]}
    assert shipped_before and all(by_shape[s] == t for s, t in shipped_before.items()), (before, after)
    for t in after:
        if t["shape"] not in shipped_before and t["shape"] != k["shape"]:
            assert t["id"] == "evolve-4242.7", t


def test_kernels_export_import_round_trip_and_bad_files(loom_bin, tmp_path):
    files = {f["device_arch"]: f for f in shipped(loom_bin)["files"]}
    k = dict(next(iter(files[KEY]["kernels"])), device_arch="cpu:elsewhere", job=7, candidate=9)
    (tmp_path / "in.json").write_text(json.dumps([k]))
    db = tmp_path / "a.db"
    run_loom(loom_bin, "kernels", "--db", db, "import", tmp_path / "in.json")
    out = json.loads(run_loom(loom_bin, "kernels", "--db", db, "export").stdout)
    assert len(out) == 1 and out[0]["id"] == "evolve-7.9" and out[0]["body"] == k["body"]
    assert out[0]["shape_class"].startswith("matvec|") and out[0]["device_arch"] == "cpu:elsewhere"
    # The export imports again into another store, unchanged.
    (tmp_path / "out.json").write_text(json.dumps(out))
    run_loom(loom_bin, "kernels", "--db", tmp_path / "b.db", "import", tmp_path / "out.json")
    assert json.loads(run_loom(loom_bin, "kernels", "--db", tmp_path / "b.db", "export").stdout) == out
    for bad, why in [([dict(k, op="no_such_op")], "names unknown op 'no_such_op'"),
                     ([{kk: v for kk, v in k.items() if kk != "body"}], "has no body"),
                     ([dict(k, device_arch="")], "lacks device_arch"),
                     ({"not": "a list"}, "not a JSON array")]:
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        r = run_loom(loom_bin, "kernels", "--db", tmp_path / "c.db", "import", tmp_path / "bad.json", check=False)
        assert r.returncode != 0 and why in r.stderr and "Traceback" not in r.stderr, r.stderr
