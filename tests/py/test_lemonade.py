"""A launch as a Lemonade-style launcher does it, from the shipped descriptor
(examples/lemonade/loom-backend.json, shown in docs/server.md): fill in {resolved_path}, {port}
and {ctx_size}, run the command (with `loom` found on PATH), wait for its /health check, send
one chat completion with the official openai client, stop it with the descriptor's signal."""
import json
import os
import re
import signal
import subprocess
import time
import urllib.request

import openai

from conftest import ROOT, free_port, model_path

DESCRIPTOR = ROOT / "examples" / "lemonade" / "loom-backend.json"


def fill(value, values):
    """The descriptor with every {name} placeholder replaced (strings inside lists and dicts)."""
    if isinstance(value, str):
        def sub(m):
            assert m.group(1) in values, f"unknown placeholder {m.group(0)} in the descriptor"
            return str(values[m.group(1)])
        return re.sub(r"\{(\w+)\}", sub, value)
    if isinstance(value, list):
        return [fill(v, values) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, values) for k, v in value.items()}
    return value


def test_descriptor_in_docs_is_the_shipped_file():
    shipped = json.loads(DESCRIPTOR.read_text())
    docs = (ROOT / "docs" / "server.md").read_text()
    section = docs.split("## Launching from a custom-backend descriptor", 1)[1]
    block = section.split("```json\n", 1)[1].split("```", 1)[0]
    assert json.loads(block) == shipped
    text = DESCRIPTOR.read_text()
    for placeholder in ("{port}", "{resolved_path}", "{ctx_size}"):
        assert placeholder in text


def test_launch_from_the_descriptor(loom_bin, tmp_path):
    desc = json.loads(DESCRIPTOR.read_text())
    port = free_port()
    d = fill(desc, {"port": port, "resolved_path": model_path("smollm2"), "ctx_size": 768})
    cmd = d["command"]
    assert cmd[0] == "loom" and "{" not in " ".join(cmd)
    env = dict(os.environ, PATH=f"{loom_bin.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        check = d["health_check"]
        deadline = time.time() + check["timeout_seconds"]
        healthy = False
        while time.time() < deadline and proc.poll() is None:
            try:
                req = urllib.request.Request(check["url"], method=check["method"])
                with urllib.request.urlopen(req, timeout=2) as r:
                    if r.status == check["expect_status"]:
                        healthy = True
                        break
            except OSError:
                time.sleep(0.2)
        assert healthy, f"no healthy /health (exit {proc.poll()}):\n{(tmp_path / 'serve.log').read_text()}"

        client = openai.OpenAI(base_url=d["api_base"], api_key="unused")
        reply = client.chat.completions.create(model="loom", max_tokens=16, temperature=0,
                                               messages=[{"role": "user", "content": "Say hello."}])
        assert reply.choices[0].message.content.strip()
        assert reply.usage.completion_tokens > 0
        # The placeholders reached the server: its context is the {ctx_size} given.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/props", timeout=10) as r:
            assert json.loads(r.read())["default_generation_settings"]["n_ctx"] == 768
    finally:
        stop = d["stop"]
        proc.send_signal(getattr(signal, stop["signal"]))
        try:
            rc = proc.wait(timeout=stop["timeout_seconds"])
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
        log.close()
    assert rc == 0, (tmp_path / "serve.log").read_text()
    assert "loom serve: stopped" in (tmp_path / "serve.log").read_text()
