"""Ranks without torchrun: file names per rank, the session's fields, the process-group notice,
the status line, and ``run --rank`` on the ranks that stay plain (RANK/WORLD_SIZE set by hand)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

from backstep.commands.other_ranks import interpreter_options
from backstep.engine.process_group import GroupNotice
from backstep.events.form import expand
from backstep.process import ranks
from backstep.tui.panels.status import status_text
from backstep.tui.state.model import SessionModel

TWO = ranks.Rank(rank=1, local_rank=1, world_size=2)


@pytest.mark.parametrize(("template", "here", "expected"), [
    (None, ranks.Rank(), ("backstep-trace.jsonl", False)),
    (None, TWO, ("backstep-trace.rank1.jsonl", False)),
    ("t.jsonl", ranks.Rank(), ("t.jsonl", False)),
    ("t.jsonl", TWO, ("t.rank1.jsonl", True)),
    ("out/t", TWO, ("out/t.rank1", True)),
    ("r{rank}-{local_rank}-{pid}.jsonl", TWO, ("r1-1-77.jsonl", False)),
    ("{pid}.jsonl", TWO, ("77.jsonl", False)),  # distinct per process already: left as named
    ("{rank}.jsonl", ranks.Rank(), ("0.jsonl", False)),
    ("{other}.jsonl", TWO, ("{other}.rank1.jsonl", True)),
])
def test_trace_path(template: str | None, here: ranks.Rank, expected: tuple[str, bool]) -> None:
    assert ranks.trace_path(template, here, pid=77) == expected


def test_rank_from_environment_and_session_fields() -> None:
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}
    assert ranks.from_environment(env) == ranks.Rank(3, 1, 4)
    assert not ranks.from_environment({}).several
    assert ranks.from_environment({"WORLD_SIZE": "x"}) == ranks.Rank()
    fields = ranks.session_fields(env)
    assert (fields["rank"], fields["local_rank"], fields["world_size"]) == (3, 1, 4)
    assert fields["hostname"]
    assert ranks.session_fields({})["rank"] is None


def test_interpreter_options_keeps_pythons_own_flags_only() -> None:
    assert interpreter_options(["py", "-u", "/bin/backstep", "run", "-u"]) == ["-u"]
    assert interpreter_options(["py", "-X", "dev", "-Wignore", "-m", "backstep", "-u"]) == [
        "-X", "dev", "-Wignore"]
    assert interpreter_options(["py", "/bin/backstep", "run"]) == []
    assert interpreter_options(["py", "-mbackstep"]) == []


class ListSink:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def flush(self) -> None:
        pass


def fake_distributed(initialized: list[bool]) -> types.ModuleType:
    dist = types.ModuleType("torch.distributed")
    dist.is_available = lambda: True  # type: ignore[attr-defined]
    dist.is_initialized = lambda: initialized[0]  # type: ignore[attr-defined]
    dist.get_backend = lambda: "gloo"  # type: ignore[attr-defined]
    dist.get_rank = lambda: 1  # type: ignore[attr-defined]
    dist.get_world_size = lambda: 2  # type: ignore[attr-defined]
    return dist  # no distributed_c10d: the timeout is not known, and says so with None


def test_group_notice_comes_once_before_the_first_pass_under_a_group(monkeypatch) -> None:
    initialized = [False]
    monkeypatch.setitem(sys.modules, "torch.distributed", fake_distributed(initialized))
    sink = ListSink()
    notice = GroupNotice(sink)
    notice.emit({"event": "pass_begin", "pass": 1})  # before init_process_group
    initialized[0] = True
    notice.emit({"event": "node", "pass": 1})
    notice.emit({"event": "pass_begin", "pass": 2})
    notice.emit({"event": "pass_begin", "pass": 3})
    assert [e["event"] for e in sink.events] == [
        "pass_begin", "node", "process_group", "pass_begin", "pass_begin"]
    assert sink.events[2] == {"event": "process_group", "backend": "gloo", "rank": 1,
                              "world_size": 2, "timeout": None}


def test_status_line_says_the_other_ranks_wait(monkeypatch) -> None:
    model = SessionModel()
    events = [
        {"event": "session", "version": 1, "torch": "2.13", "argv": ["t.py"], "pid": 1},
        {"event": "process_group", "backend": "gloo", "rank": 0, "world_size": 2,
         "timeout": 1800.0},
        {"event": "pass_begin", "pass": 1, "api": "backward", "nodes": [
            {"id": 1, "name": "SumBackward0", "next": []}], "roots": [1]},
        {"event": "stopped", "pass": 1, "step": 1, "id": 1, "name": "SumBackward0",
         "reason": "pass_start", "detail": None, "grad_outputs": [], "saved": [], "stop": 1},
    ]
    for event in events:
        model.apply(event)
    line = status_text(model.snapshot(), waiting=False, gone=None, breakpoints=0).plain
    assert "before SumBackward0 #1  under gloo (2 ranks): collectives time out after 30 min" \
        in line
    model.apply({"event": "exit", "code": 0, "traceback": None})
    line = status_text(model.snapshot(), waiting=False, gone=None, breakpoints=0).plain
    assert "gloo" not in line  # only while stopped


PLAIN = textwrap.dedent(
    """\
    import sys
    print("argv", sys.argv, "path0", sys.path[0], "unbuffered", sys.stdout.write_through)
    sys.exit(3)
    """
)


def backstep(tmp_path: Path, *argv: str, rank: int, world: int = 2,
             python: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world)}
    return subprocess.run([sys.executable, *python, "-m", "backstep", *argv], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)


def test_run_on_another_rank_is_plain_python(tmp_path: Path) -> None:
    """Not the UI's rank: the script runs as python would, under python's own flags (torchrun
    gives -u), with no UI even though stdout is no terminal here."""
    (tmp_path / "s.py").write_text(PLAIN)
    plain = subprocess.run([sys.executable, "-u", "s.py", "a"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    other = backstep(tmp_path, "run", "--rank", "0", "s.py", "a", rank=1, python=("-u",))
    assert (other.returncode, other.stdout, other.stderr) == (
        plain.returncode, plain.stdout, plain.stderr) == (3, plain.stdout, "")
    assert "unbuffered True" in plain.stdout


def test_run_trace_others_records_the_other_rank(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(PLAIN)
    other = backstep(tmp_path, "run", "--rank", "1", "--trace-others", "o.jsonl", "s.py",
                     rank=0)
    assert other.returncode == 3 and "argv ['s.py']" in other.stdout
    # rank 0 says once where the files go
    assert other.stderr.count("o.rank0.jsonl") == 1
    events = [expand(json.loads(line)) for line in (tmp_path / "o.rank0.jsonl").read_text().splitlines()]
    assert events[0]["event"] == "session" and events[0]["rank"] == 0
    assert events[0]["world_size"] == 2 and events[-1]["code"] == 3


def test_run_rank_out_of_range_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(PLAIN)
    for rank in (0, 1):
        result = backstep(tmp_path, "run", "--rank", "2", "s.py", rank=rank)
        assert result.returncode == 2 and result.stdout == ""
        assert ("not a rank of this job (0 to 1)" in result.stderr) == (rank == 0)


def test_children_of_ranks_stay_apart() -> None:
    from backstep.commands.trace import child_path

    paths = {child_path(ranks.trace_path("t.jsonl", ranks.Rank(r, r, 2))[0], 5) for r in (0, 1)}
    assert paths == {"t.rank0.5.jsonl", "t.rank1.5.jsonl"}


def test_attach_trace_writes_one_file_per_rank(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text("import backstep\nbackstep.attach(trace='a.jsonl')\n"
                                   "print('done')\n")
    env = {**os.environ, "RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}  # a second node
    result = subprocess.run([sys.executable, "s.py"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (0, "done\n")
    assert "one file each" not in result.stderr  # said by rank 0 only
    session = json.loads((tmp_path / "a.rank1.jsonl").read_text().splitlines()[0])
    assert (session["rank"], session["local_rank"], session["world_size"]) == (1, 0, 2)
    assert not (tmp_path / "a.jsonl").exists()
