"""Issue 45: ``trace`` never writes through a symbolic link planted (in a shared directory) at
a name the person did not choose: the default ``backstep-trace.jsonl`` or a ``--children``
file. One line says why; the file the link points at is untouched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ENV = {**os.environ, "PYTHONWARNINGS": "ignore::UserWarning"}
SCRIPT = "import torch\n(torch.ones(2, requires_grad=True) * 2).sum().backward()\nprint('ok')\n"


def trace(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backstep", "trace", *args], cwd=cwd, env=ENV,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


def test_the_default_name_is_never_written_through_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "backstep-trace.jsonl").symlink_to(victim)
    (tmp_path / "s.py").write_text(SCRIPT)
    done = trace(["s.py"], tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "symbolic link" in done.stderr, done.stderr
    assert victim.read_text() == "precious\n"


def test_a_name_given_with_o_is_the_persons_choice(tmp_path: Path) -> None:
    """-o through a link of one's own is what was asked for (as any tool's -o)."""
    real = tmp_path / "real.jsonl"
    (tmp_path / "link.jsonl").symlink_to(real)
    (tmp_path / "s.py").write_text(SCRIPT)
    done = trace(["-o", "link.jsonl", "s.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert '"backward_begin"' in real.read_text() or "backward" in real.read_text()


def test_an_unchosen_name_refuses_links_fifos_and_other_files(tmp_path: Path) -> None:
    from backstep.commands.trace import open_trace_file

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "link.jsonl").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        open_trace_file(str(tmp_path / "link.jsonl"), False)
    (tmp_path / "dangling.jsonl").symlink_to(tmp_path / "new.txt")
    with pytest.raises(OSError, match="symbolic link"):
        open_trace_file(str(tmp_path / "dangling.jsonl"), False)
    assert not (tmp_path / "new.txt").exists()
    os.mkfifo(tmp_path / "fifo.jsonl")
    with pytest.raises(OSError):  # no reader: refused at once, never a hang
        open_trace_file(str(tmp_path / "fifo.jsonl"), False)
    assert victim.read_text() == "precious\n"
    old = tmp_path / "old.jsonl"
    old.write_text("an old trace, longer than the new one\n")
    with open_trace_file(str(old), False) as out:  # a file of ours: overwritten, as before
        out.write(b"new\n")
    assert old.read_text() == "new\n"


LAST_PID = Path("/proc/sys/kernel/ns_last_pid")
FORKS = """\
import os, sys, torch
victim = sys.argv[1]
last = int(open("/proc/sys/kernel/ns_last_pid").read())
for pid in range(last + 1, last + 400):  # the names the next children will get
    try:
        os.symlink(victim, f"run.{pid}.jsonl")
    except FileExistsError:
        pass
pid = os.fork()
if pid == 0:
    (torch.ones(2, requires_grad=True) * 3).sum().backward()
    os._exit(0)
os.waitpid(pid, 0)
print("child", pid)
"""


@pytest.mark.skipif(not LAST_PID.exists(), reason="needs Linux's ns_last_pid to plant links")
def test_a_childrens_file_is_never_written_through_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "forks.py").write_text(FORKS)
    done = trace(["--children", "-o", "run.jsonl", "forks.py", str(victim)], tmp_path)
    assert done.returncode == 0, done.stderr
    child = int(done.stdout.split()[-1])
    if not (tmp_path / f"run.{child}.jsonl").is_symlink():
        pytest.skip("the child's pid fell outside the planted names (a busy machine)")
    assert victim.read_text() == "precious\n"
    said = [line for line in done.stderr.splitlines() if "backstep" in line]
    assert len(said) == 1 and f"not recording child {child}" in said[0], done.stderr
    assert "symbolic link" in said[0]
