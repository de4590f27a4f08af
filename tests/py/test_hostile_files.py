"""Model paths that are not regular files: a FIFO, a directory, a character device and a Unix
socket given to `loom info`, `loom run -m` and `loom tokenize -m` end at once in one line on
stderr naming the path ("... is not a regular file") and exit code 2 (a bad argument). A FIFO must not be
opened in a blocking way (that hangs until some writer appears), so every run has a timeout."""
import os
import socket

import pytest

from conftest import run_loom

TIMEOUT = 30


@pytest.fixture(params=["fifo", "directory", "chardev", "socket"])
def odd_path(request, tmp_path):
    kind = request.param
    if kind == "fifo":
        path = tmp_path / "model.gguf"
        os.mkfifo(path)
        yield path, "a FIFO"
    elif kind == "directory":
        path = tmp_path / "model.gguf"
        path.mkdir()
        yield path, "a directory"
    elif kind == "chardev":
        yield "/dev/null", "a character device"
    else:
        path = tmp_path / "model.sock"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.bind(str(path))
            s.listen(1)
            yield path, "a socket"


@pytest.mark.parametrize("args", [["info", "{}"], ["info", "--json", "{}"], ["run", "-m", "{}", "-p", "hi", "-n", "1"],
                                  ["run", "-m", "{}", "--device", "cpu-ref", "-p", "hi", "-n", "1"],
                                  ["tokenize", "-m", "{}", "--info"]],
                         ids=["info", "info-json", "run", "run-cpu-ref", "tokenize"])
def test_not_a_regular_file_is_refused_at_once(loom_bin, odd_path, args):
    path, kind = odd_path
    proc = run_loom(loom_bin, *[a.format(path) for a in args], check=False, timeout=TIMEOUT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert f"{path} is not a regular file ({kind})" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
