"""`loom serve` on an HRX device builds the step plans of likely batch sizes before it listens,
so the first requests' first tokens do not wait for a kernel compile (a plan compiled while
requests wait costs them 0.7-0.9 s of TTFT on the H200). On `--device cpu` each plan compiles
host C++; the backend prints "compiling N kernels" for each (LOOM_PROGRESS=1), which is what is
counted."""
import re
import threading

import requests

from conftest import LoomServer, model_path

ARGS = ["--device", "cpu", "--parallel", "2", "-c", "64", "-b", "16", "-t", "2"]


def complete(server, prompt, out, i):
    r = requests.post(server.url + "/v1/completions", timeout=600,
                      json={"prompt": prompt, "max_tokens": 4, "temperature": 0, "ignore_eos": True})
    out[i] = r


def first_request(server):
    out = [None]
    complete(server, "Hello there", out, 0)
    r = out[0]
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 4
    return r.json()["choices"][0]["text"]


def concurrent_requests(server):
    out = [None] * 2
    threads = [threading.Thread(target=complete, args=(server, p, out, i)) for i, p in enumerate(["The sky is", "One, two,"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in out:
        assert r is not None and r.status_code == 200, r and r.text
        assert r.json()["usage"]["completion_tokens"] == 4


def compiles(log: str) -> int:
    return log.count("compiling ")


def first_ttft_ms(log: str) -> float:
    return float(re.search(r"ttft=([0-9.]+)ms", log).group(1))


def test_plans_are_built_before_listening(loom_bin, tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_PROGRESS", "1")
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    with LoomServer(loom_bin, model_path("smollm2"), *ARGS, log_dir=tmp_path / "a") as server:
        at_ready = server.log()
        assert "step plans ready" in at_ready, at_ready
        assert "prepared the step plan for 2 tokens, 2 outputs" in at_ready, at_ready
        before = compiles(at_ready)
        assert before >= 3, at_ready
        # A lone request (its prompt step, then one-token decode steps) compiles nothing.
        text = first_request(server)
        after = server.log()
        assert compiles(after) == before, after[len(at_ready):]
        prepared_ttft = first_ttft_ms(after[len(at_ready):])
        # Steps that mix one request's decode token with another's prompt have sizes of their own
        # (not prepared by default); they must still work.
        concurrent_requests(server)
    # The check can fail: without preparation the same request compiles on first use.
    with LoomServer(loom_bin, model_path("smollm2"), *ARGS, "--no-prepare", log_dir=tmp_path / "b") as server:
        at_ready = server.log()
        assert "step plans ready" not in at_ready and compiles(at_ready) == 0, at_ready
        assert first_request(server) == text
        after = server.log()
        assert compiles(after) > 0, after
        print(f"first request TTFT: {prepared_ttft:.0f} ms with the plans prepared, "
              f"{first_ttft_ms(after[len(at_ready):]):.0f} ms without")
