"""`loom chat`: slash commands over a pipe (/help, /system, /reset, /save, /load, unknown words),
and in a real terminal driven through tmux: Ctrl-C mid-reply returns to the prompt with the
conversation kept, arrow-up recalls the last line (also from the history file of an earlier
session), /help lists the commands, Ctrl-C twice at an empty prompt quits."""
import json
import os
import shutil
import subprocess
import time
import uuid

import pytest

from conftest import model_path


def chat_pipe(loom_bin, text, tmp_path, *args):
    env = dict(os.environ, LOOM_CHAT_STATS="1", LOOM_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([str(loom_bin), "chat", "-m", str(model_path("smollm2")), "-t", "2", "--temp", "0",
                           "-n", "8", *args], input=text, capture_output=True, text=True, env=env, timeout=300)


def stats_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("[") and "tok/s" in line]


def test_slash_commands_answer_and_never_reach_the_model(loom_bin, tmp_path):
    p = chat_pipe(loom_bin, "/help\n/bogus words\n/system Be terse.\n/system\n/reset\n/save\n/exit\nnot read\n", tmp_path)
    assert p.returncode == 0, p.stderr
    for cmd in ("/help", "/system TEXT", "/reset", "/save FILE", "/load FILE", "/exit"):
        assert cmd in p.stderr, cmd
    assert "unknown command /bogus" in p.stderr
    assert "system message set" in p.stderr and "system message: Be terse." in p.stderr
    assert "conversation cleared" in p.stderr
    assert "/save needs a file name" in p.stderr
    assert p.stdout.strip() == "", "a slash command went to the model"
    assert stats_lines(p.stderr) == []


def test_double_slash_sends_the_line_to_the_model(loom_bin, tmp_path):
    p = chat_pipe(loom_bin, "//help me\n", tmp_path)
    assert p.returncode == 0, p.stderr
    assert "unknown command" not in p.stderr and "commands:" not in p.stderr
    assert len(stats_lines(p.stderr)) == 1 and p.stdout.strip()


def test_save_and_load_round_trip(loom_bin, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    p = chat_pipe(loom_bin, f"Hello there\n/save {a}\n/reset\n/save {tmp_path / 'empty.json'}\n/load {a}\n/save {b}\n",
                  tmp_path, "--system", "You are a cat.")
    assert p.returncode == 0, p.stderr
    saved = json.loads(a.read_text())
    assert [m["role"] for m in saved] == ["system", "user", "assistant"]
    assert saved[0]["content"] == "You are a cat." and saved[1]["content"] == "Hello there"
    assert saved[2]["content"].strip(), "the reply was not kept"
    assert json.loads((tmp_path / "empty.json").read_text()) == saved[:1], "/reset keeps only the system message"
    assert json.loads(b.read_text()) == saved
    assert f"saved 3 messages to {a}" in p.stderr and f"loaded 3 messages from {a}" in p.stderr


def test_load_refuses_bad_files_and_keeps_the_conversation(loom_bin, tmp_path):
    bad = {"notjson.json": "{not json", "role.json": json.dumps([{"role": "wizard", "content": "x"}]),
           "shape.json": json.dumps({"role": "user"}), "late_system.json":
           json.dumps([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])}
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
    lines = "".join(f"/load {tmp_path / name}\n" for name in bad) + f"/load {tmp_path / 'missing.json'}\n"
    out = tmp_path / "after.json"
    p = chat_pipe(loom_bin, lines + f"/save {out}\n", tmp_path, "--system", "Keep me.")
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("could not load (conversation unchanged)") == len(bad) + 1, p.stderr
    assert json.loads(out.read_text()) == [{"role": "system", "content": "Keep me."}]


# ---- a real terminal through tmux -----------------------------------------------------------

class Tmux:
    def __init__(self, command, env):
        assert shutil.which("tmux"), "tmux is missing (tools/setup.sh --dev installs it)"
        self.name = "loom-test-" + uuid.uuid4().hex[:8]
        envs = " ".join(f"{k}={v}" for k, v in env.items())
        # The shell line after loom reports its exit status into the pane.
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "160", "-y", "50",
                        f"env {envs} {command}; echo CHAT_EXITED $?; sleep 600"], check=True)

    def screen(self):
        return subprocess.run(["tmux", "capture-pane", "-p", "-J", "-S", "-200", "-t", self.name],
                              capture_output=True, text=True, check=True).stdout

    def keys(self, *keys):
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def type_line(self, text):
        self.keys("-l", text)
        self.keys("Enter")

    def wait_for(self, predicate, what, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.screen()
            if predicate(s):
                return s
            time.sleep(0.2)
        pytest.fail(f"timed out waiting for {what}; screen:\n{self.screen()}")

    def last_line(self):
        lines = [line for line in self.screen().splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def close(self):
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture
def chat_env(tmp_path):
    return {"LOOM_CACHE_DIR": str(tmp_path / "cache"), "TERM": "xterm"}


def start_chat(loom_bin, env):
    cmd = f"{loom_bin} chat -m {model_path('smollm2')} -t 2 --temp 0 --ignore-eos -n 3000"
    t = Tmux(cmd, env)
    t.wait_for(lambda s: "/help for commands" in s and s.rstrip().endswith(">"), "the first prompt")
    return t


def test_terminal_ctrl_c_history_and_help(loom_bin, chat_env, tmp_path):
    t = start_chat(loom_bin, chat_env)
    try:
        t.type_line("/help")
        t.wait_for(lambda s: "/load FILE" in s and "/system TEXT" in s and s.rstrip().endswith(">"), "/help's list")

        story = "Tell me a very long story about a dragon."
        t.type_line(story)
        # The reply streams; stop it once it has some text.
        t.wait_for(lambda s: len(s.split(story, 1)[-1].strip()) > 200, "a reply in progress")
        t.keys("C-c")
        s = t.wait_for(lambda s: "[reply stopped]" in s and s.rstrip().endswith(">"), "the prompt after Ctrl-C")
        assert "CHAT_EXITED" not in s

        # Arrow-up recalls the last line typed; Ctrl-U clears it again.
        t.keys("Up")
        t.wait_for(lambda s: t.last_line().rstrip() == "> " + story, "arrow-up recalling the last line")
        t.keys("C-u")
        t.wait_for(lambda s: t.last_line().rstrip() == ">", "the cleared line")

        # The stopped reply is part of the conversation.
        saved = tmp_path / "conv.json"
        t.type_line(f"/save {saved}")
        t.wait_for(lambda s: "saved 2 messages" in s, "/save")
        conv = json.loads(saved.read_text())
        assert [m["role"] for m in conv] == ["user", "assistant"] and conv[0]["content"] == story
        assert len(conv[1]["content"]) > 100, "the partial reply was not kept"

        # The next turn reuses the kept conversation from the cache.
        t.type_line("What was the dragon called?")
        t.keys("C-c")  # stop this one early too: only the stats matter
        s = t.wait_for(lambda s: s.count("[reply stopped]") == 2 and s.rstrip().endswith(">"), "the second reply")
        stats = [line for line in s.splitlines() if line.startswith("[") and "cached]" in line]
        assert " 0 cached" in stats[0] and " 0 cached" not in stats[-1], stats

        # Ctrl-C at an empty prompt explains; a second one quits.
        t.keys("C-c")
        t.wait_for(lambda s: "Ctrl-C again" in s, "the hint after one Ctrl-C")
        t.keys("C-c")
        s = t.wait_for(lambda s: "CHAT_EXITED" in s, "loom chat to exit")
        assert "CHAT_EXITED 0" in s
    finally:
        t.close()

    # The history file persists: a new session recalls the last line of the earlier one.
    history = tmp_path / "cache" / "chat_history"
    assert story in history.read_text().replace("\\040", " ")
    t = start_chat(loom_bin, chat_env)
    try:
        t.keys("Up")
        t.wait_for(lambda s: t.last_line().rstrip() == "> What was the dragon called?", "history from the file")
        t.keys("C-u", "C-d")
        s = t.wait_for(lambda s: "CHAT_EXITED" in s, "Ctrl-D to quit")
        assert "CHAT_EXITED 0" in s
    finally:
        t.close()
