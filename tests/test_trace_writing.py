"""``backstep trace`` writing its file: a disk that fills (or ``ulimit -f``) cuts the trace, never
the script; and ``-o`` never overwrites the script or another Python file."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

LIMIT = 64 * 1024  # bytes a file may grow to (RLIMIT_FSIZE), as under `ulimit -f 64`

TRAINING = """\
    import torch
    w = torch.ones(8, requires_grad=True)
    for i in range(200):
        (w * float(i)).tanh().sum().backward()
    print("trained", float(w.grad.sum()))
    raise SystemExit(3)
"""


def limited() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def trace(tmp_path: Path, *args: str, **kwargs: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backstep", "trace", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]


def test_a_full_file_system_cuts_the_trace_not_the_script(tmp_path: Path) -> None:
    """Python ignores SIGXFSZ, so a write past RLIMIT_FSIZE fails with EFBIG, as ENOSPC would
    on a full disk. The script's output and exit code stand; one line says where the trace is
    cut, and the file holds whole events only."""
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(TRAINING))
    plain = subprocess.run([sys.executable, str(job)], capture_output=True, text=True,
                           timeout=300)
    done = trace(tmp_path, "-o", "out.jsonl", str(job), preexec_fn=limited)
    assert (done.returncode, done.stdout) == (plain.returncode, plain.stdout) == (3, done.stdout)
    out = tmp_path / "out.jsonl"
    lines = out.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])
    assert done.stderr == plain.stderr + (f"backstep: the trace out.jsonl is cut after event {len(lines) - 1} "
                           "(File too large, EFBIG): the rest of the run was not recorded\n")
    assert 0 < out.stat().st_size <= LIMIT
    shown = subprocess.run([sys.executable, "-m", "backstep", "export", str(out)],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and shown.stdout.startswith("digraph")


TRAINING_GZ = """\
    import torch
    torch.manual_seed(0)
    w = torch.randn(64, requires_grad=True)
    for i in range(400):  # random gradients: 64 KiB of gzip well before the end
        (w * torch.randn(64)).tanh().sum().backward()
    print("trained", float(w.grad.sum()))
    raise SystemExit(3)
"""


def test_a_full_file_system_cuts_a_gzip_trace_and_counts_its_events(tmp_path: Path) -> None:
    """The gzip trace's cut-back counted newline bytes of the compressed file (and cut the
    stream at the last one): the one line said "after event 295" of a file holding 4,387. It
    counts the events a reader reads back, and leaves the compressed stream as it was written."""
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(TRAINING_GZ))
    plain = subprocess.run([sys.executable, str(job)], capture_output=True, text=True,
                           timeout=300)
    done = trace(tmp_path, "-o", "out.jsonl.gz", str(job), preexec_fn=limited)
    assert (done.returncode, done.stdout) == (plain.returncode, plain.stdout) == (3, done.stdout)
    out = tmp_path / "out.jsonl.gz"
    raw = out.read_bytes()
    assert 0 < len(raw) <= LIMIT
    text = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw)  # as far as it goes
    lines = text.split(b"\n")[:-1]  # the whole ones
    assert 1000 < len(lines) and all(json.loads(line) for line in lines)
    assert done.stderr == plain.stderr + (
        f"backstep: the trace out.jsonl.gz is cut after event {len(lines)} "
        "(File too large, EFBIG): the rest of the run was not recorded\n")
    assert text.startswith(b'{"event":"session"')
    shown = subprocess.run([sys.executable, "-m", "backstep", "history", str(out)],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and len(shown.stdout.splitlines()) > 100


@pytest.mark.parametrize("name", ["job.py", "other.py"])
def test_the_output_is_never_a_python_file(tmp_path: Path, name: str) -> None:
    job = tmp_path / "job.py"
    job.write_text("open('ran', 'w').close()\n")
    (tmp_path / "other.py").write_text("x = 1\n")
    before = {p.name: p.read_text() for p in tmp_path.glob("*.py")}
    done = trace(tmp_path, "-o", name, str(job))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"backstep trace: -o {name} is ")
    assert {p.name: p.read_text() for p in tmp_path.glob("*.py")} == before
    assert not (tmp_path / "ran").exists()


def test_the_script_by_another_name_is_still_the_script(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.write_text("print('hi')\n")
    os.symlink(job, tmp_path / "link")
    done = trace(tmp_path, "-o", "link", "job")
    assert done.returncode == 2 and "is the script itself" in done.stderr
    assert job.read_text() == "print('hi')\n"


def test_the_default_file_is_named_on_stderr_and_stdout_stays_the_scripts(tmp_path: Path) -> None:
    """Issue 44: without -o the trace went to ./backstep-trace.jsonl without a word."""
    job = tmp_path / "job.py"
    job.write_text("import sys, torch\n(torch.ones(2, requires_grad=True) * 2).sum().backward()\n"
                   "print('out')\nprint('err', file=sys.stderr)\n")
    plain = subprocess.run([sys.executable, str(job)], capture_output=True, text=True,
                           timeout=300)
    done = trace(tmp_path, str(job))
    assert (done.returncode, done.stdout) == (plain.returncode, plain.stdout) == (0, "out\n")
    assert done.stderr == ("backstep trace: writing backstep-trace.jsonl (-o FILE to choose)\n"
                           + plain.stderr)
    assert (tmp_path / "backstep-trace.jsonl").stat().st_size > 0
    chosen = trace(tmp_path, "-o", "mine.jsonl", str(job))
    assert chosen.stderr == plain.stderr  # a file of one's own choosing: nothing said
