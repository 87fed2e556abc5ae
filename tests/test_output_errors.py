"""Issue 45: output that cannot be written is one line and status 2, never a traceback and
never the 1 that ``diff`` means by "the runs differ"; ``show`` with no terminal refuses at once
instead of drawing into a file until killed."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

TRACE = str(Path(__file__).parent / "fixtures" / "small_trace.jsonl")
ENV = {**os.environ, "PYTHONWARNINGS": "ignore::UserWarning"}
COMMANDS = [["diff", TRACE, TRACE], ["diff", "--json", TRACE, TRACE], ["export", TRACE],
            ["export", "--pass", "1", "--dot", TRACE]]


def backstep(args: list[str], cwd: Path, **streams) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backstep", *args], cwd=cwd, env=ENV,
                          stderr=subprocess.PIPE, text=True, timeout=60, **streams)


def one_line(stderr: str, who: str, why: str) -> None:
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    assert stderr.startswith(f"backstep {who}: cannot write the output: {why}"), stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", COMMANDS)
def test_a_full_disk_is_one_line_and_status_2(tmp_path: Path, args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        done = backstep(args, tmp_path, stdin=subprocess.DEVNULL, stdout=full)
    assert done.returncode == 2
    one_line(done.stderr, args[0], "No space left on device")


@pytest.mark.parametrize("args", COMMANDS)
def test_a_closed_stdout_is_one_line_and_status_2(tmp_path: Path, args: list[str]) -> None:
    """``>&-``: before, ``AttributeError: 'NoneType' object has no attribute 'flush'``."""
    done = subprocess.run(f"exec {shlex.join([sys.executable, '-m', 'backstep', *args])} >&-",
                          shell=True, cwd=tmp_path, env=ENV, stdin=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 2
    one_line(done.stderr, args[0], "standard output is closed")


def test_a_closed_stdout_never_becomes_the_written_file(tmp_path: Path) -> None:
    """With fd 1 closed the next file opened would get it: ``export -o`` must still write
    only its file, and succeed."""
    out = tmp_path / "pass.dot"
    command = [sys.executable, "-m", "backstep", "export", TRACE, "-o", str(out)]
    done = subprocess.run(f"exec {shlex.join(command)} >&-", shell=True, cwd=tmp_path, env=ENV,
                          stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert out.read_text().startswith("digraph")


def test_show_without_a_terminal_refuses_in_one_line(tmp_path: Path) -> None:
    """``show t.jsonl </dev/null >file`` drew the UI into the file until killed."""
    with open(tmp_path / "out", "w") as out:
        done = backstep(["show", TRACE], tmp_path, stdin=subprocess.DEVNULL, stdout=out)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no terminal" in done.stderr, done.stderr
    assert (tmp_path / "out").read_text() == ""
