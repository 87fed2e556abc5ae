"""Running a script under plain python and under ``backstep trace`` side by side: same output,
same exit code, and the trace's events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from backstep.events.form import expand

ENV = {**os.environ, "PYTHONWARNINGS": "ignore::UserWarning"}


def start(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env=env)


def compare(tmp_path: Path, target: str, *args: str,
            env: dict[str, str] = ENV) -> tuple[subprocess.CompletedProcess, list]:
    """Run plain python and backstep trace side by side; return the trace's result + events."""
    out = tmp_path / "run.jsonl"
    plain = start([sys.executable, target, *args], tmp_path, env)
    traced = start([sys.executable, "-m", "backstep", "trace", "-o", str(out), target, *args],
                   tmp_path, env)
    p_out, p_err = plain.communicate(timeout=120)
    t_out, t_err = traced.communicate(timeout=120)
    assert t_out == p_out
    assert _same_words(t_err) == _same_words(p_err)
    assert traced.returncode == plain.returncode
    events = [expand(json.loads(line)) for line in out.read_text().splitlines()]
    assert events[0]["event"] == "session", "every trace starts with its session"
    result = subprocess.CompletedProcess(traced.args, traced.returncode, t_out, t_err)
    return result, events


def _same_words(stderr: str) -> str:
    """python names itself by its own argv[0] before "can't open file"; compare the rest."""
    return "\n".join(
        line.split(": ", 1)[1] if ": can't " in line else line for line in stderr.splitlines()
    )


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in events]
