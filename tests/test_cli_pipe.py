"""``backstep demo | head``: a command whose stdout closes early ends quietly, as python tools
do. A traced script's own output is the script's: it meets a closed pipe exactly as under
plain python (same traceback, same exit status)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ENV = {**os.environ, "PYTHONWARNINGS": "ignore::UserWarning"}


def closed_stdout(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run with fd 1 a pipe whose reader is already gone: every write to it fails."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(args, cwd=cwd, env=ENV, stdin=subprocess.DEVNULL, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [["demo"], ["demo", "graph_basics", "--script"]])
def test_our_own_output_ends_quietly(tmp_path: Path, args: list[str]) -> None:
    done = closed_stdout([sys.executable, "-m", "backstep", *args], tmp_path)
    assert (done.returncode, done.stderr) == (1, "")


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["trace", "--help"]])
def test_argparse_output_ends_quietly(tmp_path: Path, args: list[str]) -> None:
    """argparse itself ignores a failed write and exits 0; nothing may follow on stderr."""
    done = closed_stdout([sys.executable, "-m", "backstep", *args], tmp_path)
    assert done.stderr == "" and done.returncode in (0, 1)


@pytest.mark.parametrize("body", [
    "print('one line')\n",  # fails in the interpreter's last flush
    "for i in range(100000):\n    print(i)\n",  # fails inside print: a traceback of the script's
])
def test_a_traced_scripts_broken_pipe_is_the_scripts_own(tmp_path: Path, body: str) -> None:
    (tmp_path / "talk.py").write_text(body)
    plain = closed_stdout([sys.executable, "talk.py"], tmp_path)
    traced = closed_stdout([sys.executable, "-m", "backstep", "trace", "-o", "t.jsonl",
                            "talk.py"], tmp_path)
    assert (traced.returncode, traced.stderr) == (plain.returncode, plain.stderr)
    assert plain.returncode != 0 and "BrokenPipeError" in plain.stderr
