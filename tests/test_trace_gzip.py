"""``trace -o run.jsonl.gz`` writes gzip; ``history`` streams it, ``show``/``diff``/``export``
read it through a decompressed temporary copy (traces/compressed); a stream cut short (a killed
run) gives what it holds."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from backstep.traces.index import TraceIndex

SCRIPT = textwrap.dedent("""\
    import torch
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    for step in range(5):
        (w * w).sum().backward()
    print(w.grad.tolist())
""")


def _backstep(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "backstep", *argv], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)


def test_gzip_trace_reads_as_the_plain_one(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    plain = subprocess.run([sys.executable, "train.py"], capture_output=True, text=True,
                           cwd=tmp_path, timeout=300)
    packed = _backstep(tmp_path, "trace", "-o", "run.jsonl.gz", "train.py")
    unpacked = _backstep(tmp_path, "trace", "-o", "run.jsonl", "train.py")
    assert (packed.returncode, packed.stdout) == (plain.returncode, plain.stdout)
    raw = (tmp_path / "run.jsonl.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    text = gzip.decompress(raw).decode()
    assert text.count('"event":"history"') == 5 and text.rstrip().endswith(
        '"event":"exit","code":0,"traceback":null,"passes":5}')
    with TraceIndex(tmp_path / "run.jsonl.gz") as index:
        assert index.numbers() == [1, 2, 3, 4, 5] and not index.problems
    for command in (["history"], ["export", "--pass", "3"]):
        a = _backstep(tmp_path, *command, "run.jsonl.gz")
        b = _backstep(tmp_path, *command, "run.jsonl")
        assert a.returncode == 0 and (a.stdout, a.stderr) == (b.stdout, b.stderr)
    same = _backstep(tmp_path, "diff", "run.jsonl", "run.jsonl.gz")
    assert same.returncode == 0 and "no difference" in same.stdout
    assert unpacked.returncode == 0


def test_a_gzip_trace_cut_short_gives_what_it_holds(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    _backstep(tmp_path, "trace", "-o", "run.jsonl.gz", "train.py")
    raw = (tmp_path / "run.jsonl.gz").read_bytes()
    (tmp_path / "cut.jsonl.gz").write_bytes(raw[: len(raw) * 2 // 3])
    with TraceIndex(tmp_path / "cut.jsonl.gz") as index:
        assert index.numbers()
        assert any("compressed file is cut short" in p for p in index.problems)
    shown = _backstep(tmp_path, "history", "cut.jsonl.gz")
    assert shown.returncode == 0 and shown.stdout.splitlines()[1].split()[0] == "1"


KILLED = textwrap.dedent("""\
    import os, signal, sys, torch
    if len(sys.argv) > 1:
        import backstep
        backstep.attach(trace=sys.argv[1], when=["nonfinite"])
    w = torch.ones(3, requires_grad=True)
    for step in range(20):
        (w * w).sum().backward()
        if step == 10:
            print("killing", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
    print("never")
""")


@pytest.mark.parametrize("how", ["trace", "attach"])
def test_sigterm_leaves_a_valid_trace_and_the_same_status(tmp_path: Path, how: str) -> None:
    (tmp_path / "job.py").write_text(KILLED)
    plain = subprocess.run([sys.executable, "job.py"], capture_output=True, text=True,
                           cwd=tmp_path, timeout=300)
    if how == "trace":
        run = _backstep(tmp_path, "trace", "-o", "run.jsonl.gz", "job.py")
    else:
        run = subprocess.run([sys.executable, "job.py", "run.jsonl.gz"], capture_output=True,
                             text=True, cwd=tmp_path, timeout=300)
    assert plain.returncode == -signal.SIGTERM
    assert (run.returncode, run.stdout) == (plain.returncode, plain.stdout)
    lines = gzip.decompress((tmp_path / "run.jsonl.gz").read_bytes()).decode().splitlines()
    events = [json.loads(line) for line in lines]  # every line whole
    assert events[-1] == {"event": "exit", "code": -15, "traceback": None, "passes": 11}
    assert [e["n"] for e in events if e["event"] == "history"] == list(range(1, 12))
