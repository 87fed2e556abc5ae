"""``backstep export --svg`` runs Graphviz under a time limit, and says why it failed: too big,
the signal that ended it, what it wrote on stderr (made printable: it may echo the trace)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from backstep.cli import main
from backstep.commands import export as export_command
from tests.synthetic_traces import write_transformer_trace


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    write_transformer_trace(path, passes=1, nodes=20)
    return path


def fake_dot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    dot = tmp_path / "dot"
    dot.write_text(f"#!/bin/sh\n{body}\n")
    dot.chmod(0o755)
    monkeypatch.setattr("shutil.which", lambda name: str(dot) if name == "dot" else None)


def export(capsysbinary: pytest.CaptureFixture[bytes], *argv: str | Path) -> tuple[int, str, str]:
    code = main(["export", *map(str, argv)])
    out, err = capsysbinary.readouterr()
    return code, out.decode(), err.decode()


def test_graphviz_is_stopped_after_the_time_limit(trace, tmp_path, monkeypatch,
                                                  capsysbinary) -> None:
    fake_dot(tmp_path, monkeypatch, "exec sleep 60")
    began = time.monotonic()
    code, out, err = export(capsysbinary, trace, "--svg", "--dot-timeout", "0.5")
    assert time.monotonic() - began < 30
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith("backstep export: Graphviz did not finish pass 1 (")
    assert "in 0.5 s: too big for dot; --dot writes the DOT text at once" in err


def test_a_big_pass_is_announced_before_graphviz_runs(trace, tmp_path, monkeypatch,
                                                      capsysbinary) -> None:
    fake_dot(tmp_path, monkeypatch, "cat >/dev/null; echo '<svg/>'")
    monkeypatch.setattr(export_command, "BIG", 10)
    code, out, err = export(capsysbinary, trace, "--svg")
    assert (code, out) == (0, "<svg/>\n") and err.count("\n") == 1
    assert "backstep export: pass 1 has " in err and " nodes: Graphviz may take minutes " in err


@pytest.mark.parametrize("body, said", [
    ("kill -9 $$", "dot failed (killed by SIGKILL)\n"),
    ("printf 'Error: syntax\\n\\033]52;c;aGk=\\007 near x\\n' >&2; exit 1",
     "dot failed (exit status 1): Error: syntax | \\x1b]52;c;aGk=\\x07 near x\n"),
])
def test_a_failure_says_how_graphviz_ended_and_what_it_said(trace, tmp_path, monkeypatch,
                                                            capsysbinary, body, said) -> None:
    fake_dot(tmp_path, monkeypatch, "cat >/dev/null; " + body)
    code, out, err = export(capsysbinary, trace, "--svg")
    assert (code, out, err) == (2, "", "backstep export: " + said)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_the_time_limit_is_a_positive_number(trace, capsysbinary, value) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["export", str(trace), "--svg", "--dot-timeout", value])
    assert ended.value.code == 2
    assert "expected a number of seconds above 0" in capsysbinary.readouterr().err.decode()
