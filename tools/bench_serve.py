#!/usr/bin/env python3
"""Load benchmark of `loom serve`: aggregate generation tokens/s and time to first token at
1, 4 and 16 concurrent streams (by default), as one user of each stream would see them.

Starts its own server (or uses --url), validates first (every stream gets exactly max_tokens
tokens; identical greedy requests give identical text alone and under load), warms up, then
runs each concurrency level --repeat times (round-robin over the levels) and reports the median
and the spread. --baseline BIN measures a second binary alongside, its runs interleaved with the
first one's (A/B under the same machine load).

  tools/bench_serve.py --loom build/loom -m ~/.cache/loom/models/SmolLM2-135M-Instruct-Q4_1.gguf \
      --json bench/results/<date>-<device>-serve.json
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]


def device_name(loom, device):
    """The device the server runs on, as `loom devices` names it (the server's default: the first
    CUDA GPU when there is one, else the CPU)."""
    try:
        info = json.loads(subprocess.run([loom, "devices", "--json"], capture_output=True, text=True,
                                         timeout=60).stdout)
        devs = info.get("devices", [])
        want = device or ""
        if not want or want.startswith("cuda"):
            idx = int(want.split(":")[1]) if ":" in want else 0
            gpus = [d for d in devs if d.get("id", "").startswith("cuda")]
            if len(gpus) > idx:
                return f"{gpus[idx]['name']} ({gpus[idx]['id']})"
        cpu = next(d for d in devs if d.get("id") == "cpu")
        return f"CPU: {cpu['name']} ({os.cpu_count()} cores visible, device {device or 'cpu-ref'})"
    except Exception:  # noqa: BLE001 - the name is informative only
        return f"CPU: {cpu_name()} ({os.cpu_count()} cores visible)"


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def one_stream(url, prompt, max_tokens, out, i, barrier):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    barrier.wait()
    t0 = time.perf_counter()
    ttft, text, usage = None, "", None
    with requests.post(url + "/v1/completions", json=body, stream=True, timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: {"):
                continue
            j = json.loads(line[6:])
            if j.get("usage"):
                usage = j["usage"]["completion_tokens"]
            for c in j.get("choices", []):
                if c.get("text"):
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    text += c["text"]
    out[i] = {"ttft": ttft, "text": text, "tokens": usage, "end": time.perf_counter(), "start": t0}


def cpu_seconds(pid):
    """User + system CPU time of a process (all its threads) from /proc, or None."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def run_level(url, n, max_tokens):
    prompts = [f"Story number {i}: Once upon a time, in a village by the sea," for i in range(n)]
    out = [None] * n
    barrier = threading.Barrier(n)
    ts = [threading.Thread(target=one_stream, args=(url, prompts[i], max_tokens, out, i, barrier)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    start = min(o["start"] for o in out)
    end = max(o["end"] for o in out)
    tokens = sum(o["tokens"] for o in out)
    return {"streams": n, "tokens": tokens, "seconds": end - start, "tokens_per_second": tokens / (end - start),
            "ttft_median": statistics.median(o["ttft"] for o in out), "ttft_max": max(o["ttft"] for o in out),
            "texts": [o["text"] for o in out], "token_counts": [o["tokens"] for o in out]}


def start_server(loom, model, levels, threads, device):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [loom, "serve", "-m", model, "--port", str(port), "--parallel", str(max(levels)), "-c", "512",
           "-t", str(threads), "-q"] + (["--device", device] if device else [])
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(3000):
        if proc.poll() is not None:
            raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}")
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                break
        except requests.RequestException:
            time.sleep(0.2)
    return proc, url


def binary_commit(loom):
    """The binary's own commit (`loom --version`: "loom X (COMMIT)"); the checkout it runs from
    may be another one (a copied tree on a GPU machine)."""
    ver = subprocess.run([loom, "--version"], capture_output=True, text=True).stdout.strip()
    commit = ver[ver.find("(") + 1:ver.rfind(")")] if "(" in ver else ""
    if not commit:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    return commit


def summarize(levels, per_level, cpu_used, have_cpu, max_tokens, repeat, label=""):
    results = []
    for n in levels:
        runs = per_level[n]
        tps = [r["tokens_per_second"] for r in runs]
        ttft = [r["ttft_median"] for r in runs]
        row = {"streams": n, "max_tokens": max_tokens, "repeat": repeat,
               "tokens_per_second_median": statistics.median(tps), "tokens_per_second_min": min(tps),
               "tokens_per_second_max": max(tps), "ttft_seconds_median": statistics.median(ttft),
               "ttft_seconds_min": min(ttft), "ttft_seconds_max": max(ttft),
               "ttft_worst_stream_seconds": max(r["ttft_max"] for r in runs),
               "server_cpu_ms_per_token": cpu_used[n] * 1e3 / sum(r["tokens"] for r in runs) if have_cpu else None}
        results.append(row)
        print(f"{label}{n:3d} streams: {row['tokens_per_second_median']:7.1f} tok/s aggregate "
              f"({row['tokens_per_second_min']:.1f}..{row['tokens_per_second_max']:.1f}), "
              f"TTFT median {row['ttft_seconds_median'] * 1e3:.0f} ms "
              f"({row['ttft_seconds_min'] * 1e3:.0f}..{row['ttft_seconds_max'] * 1e3:.0f})"
              + (f", server CPU {row['server_cpu_ms_per_token']:.1f} ms/token" if row["server_cpu_ms_per_token"] else ""),
              flush=True)
    base = results[0]["tokens_per_second_median"]
    cpu_base = results[0]["server_cpu_ms_per_token"]
    for r in results:
        r["speedup_vs_first"] = r["tokens_per_second_median"] / base
        if cpu_base and r["server_cpu_ms_per_token"]:
            r["cpu_efficiency_vs_first"] = cpu_base / r["server_cpu_ms_per_token"]
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loom", default=str(ROOT / "build" / "loom"))
    ap.add_argument("--baseline", help="a second loom binary (e.g. the previous commit's) measured the same way, "
                    "its runs interleaved with --loom's, so that both see the same machine load")
    ap.add_argument("-m", "--model", default=str(pathlib.Path.home() / ".cache/loom/models/SmolLM2-135M-Instruct-Q4_1.gguf"))
    ap.add_argument("--url", help="use a running server instead of starting one")
    ap.add_argument("--streams", default="1,4,16")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", help="the server's --device (default: its own default: cuda:0 when present, else cpu-ref)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    if a.baseline and a.url:
        ap.error("--baseline starts its own servers; it does not combine with --url")
    levels = [int(x) for x in a.streams.split(",")]
    load_before = os.getloadavg()
    # Each entry: (label, binary, process or None, url).
    servers = []
    try:
        if a.url:
            servers.append(("", a.loom, None, a.url))
        else:
            proc, url = start_server(a.loom, a.model, levels, a.threads, a.device)
            servers.append(("", a.loom, proc, url))
            if a.baseline:
                proc, url = start_server(a.baseline, a.model, levels, a.threads, a.device)
                servers.append(("baseline ", a.baseline, proc, url))
        for label, _, _, url in servers:
            # Validate: greedy + ignore_eos -> exactly max_tokens each, and the same text alone as
            # under the heaviest load (continuous batching must not change results).
            alone = run_level(url, 1, a.max_tokens)
            loaded = run_level(url, max(levels), a.max_tokens)
            assert all(c == a.max_tokens for c in loaded["token_counts"]), (label, loaded["token_counts"])
            assert loaded["texts"][0] == alone["texts"][0], f"{label}stream 0 differs under load"
        if a.baseline:
            texts = [run_level(url, 1, a.max_tokens)["texts"][0] for _, _, _, url in servers]
            assert texts[0] == texts[1], "the two binaries give different greedy text"
        # Repetitions go round-robin over the levels (1, 4, 16, 1, 4, 16, ...) and the binaries,
        # so that a shared machine's changing load falls on every level alike and the ratios stay
        # fair.
        per_level = [{n: [] for n in levels} for _ in servers]
        cpu_used = [{n: 0.0 for n in levels} for _ in servers]
        for _ in range(a.repeat):
            for n in levels:
                for k, (_, _, proc, url) in enumerate(servers):
                    # CPU time the server spends per generated token: unlike wall time it hardly
                    # depends on how busy a shared machine is.
                    c0 = cpu_seconds(proc.pid) if proc else None
                    per_level[k][n].append(run_level(url, n, a.max_tokens))
                    c1 = cpu_seconds(proc.pid) if proc else None
                    if c0 is not None and c1 is not None:
                        cpu_used[k][n] += c1 - c0
        summaries = [summarize(levels, per_level[k], cpu_used[k], servers[k][2] is not None, a.max_tokens, a.repeat,
                               servers[k][0]) for k in range(len(servers))]
        doc = {"what": "loom serve load benchmark (completions, greedy, ignore_eos, streaming)",
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "commit": binary_commit(a.loom), "device": device_name(a.loom, a.device),
               "threads": a.threads, "model": pathlib.Path(a.model).name,
               # The machine may be shared: the load average says how much CPU the run really had.
               "load_average_before": load_before[0], "load_average_after": os.getloadavg()[0],
               "command": " ".join([sys.argv[0]] + sys.argv[1:]),
               # LOOM_* settings change what the server runs (e.g. LOOM_FUSE=0).
               "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("LOOM_")}, "results": summaries[0]}
        if a.baseline:
            doc["baseline"] = {"commit": binary_commit(a.baseline), "binary": a.baseline, "results": summaries[1]}
        if a.json:
            pathlib.Path(a.json).write_text(json.dumps(doc, indent=2) + "\n")
        print(json.dumps(doc, indent=2))
    finally:
        for _, _, proc, _ in servers:
            if proc:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=120)


if __name__ == "__main__":
    main()
