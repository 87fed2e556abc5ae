"""``--eager`` / ``attach(eager=True)``: torch.compile is off for the whole script, every node
of the compiled model is a stop with its module, and the status line says so throughout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from backstep.traces.index import TraceIndex
from backstep.tui.panels.status import status_text
from backstep.tui.state.model import SessionModel
from tests.tui_fixtures import replay_app
from tests.tui_pilot import pilot

ENV = {k: v for k, v in os.environ.items()
       if k not in ("PYTHONWARNINGS", "BACKSTEP_EAGER", "TORCH_COMPILE_DISABLE",
                    "TORCHDYNAMO_DISABLE")}

SCRIPT = textwrap.dedent("""\
    import os
    import torch
    from torch import nn

    if os.environ.get("USE_ATTACH"):
        import backstep

        backstep.attach(trace="run.jsonl", eager=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    compiled = torch.compile(model, backend="aot_eager")
    compiled(torch.randn(3, 4)).pow(2).mean().backward()
    print([p.grad.sum().item() for p in model.parameters()])
""")


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _run(args: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env={**ENV, **extra})


def _check_eager(events: list[dict]) -> None:
    assert events[0]["event"] == "session" and events[0]["eager"] is True
    nodes = next(e for e in events if e["event"] == "pass_begin")["nodes"]
    names = {n["name"] for n in nodes}
    assert "CompiledFunctionBackward" not in names
    assert {"AddmmBackward0", "TanhBackward0", "PowBackward0"} <= names
    modules = {n.get("module") for n in nodes}
    assert "model.0" in modules and "model.2" in modules


def test_trace_eager_runs_the_model_uncompiled(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    eager = _run([sys.executable, "train.py"], tmp_path, TORCHDYNAMO_DISABLE="1")
    traced = _run([sys.executable, "-m", "backstep", "trace", "--eager", "-o", "run.jsonl",
                   "train.py"], tmp_path)
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == eager.stdout  # the gradients of the eager model
    _check_eager(_events(tmp_path / "run.jsonl"))


def test_without_eager_the_region_stays_compiled(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    traced = _run([sys.executable, "-m", "backstep", "trace", "-o", "run.jsonl", "train.py"],
                  tmp_path)
    assert traced.returncode == 0, traced.stderr
    events = _events(tmp_path / "run.jsonl")
    assert "eager" not in events[0]
    nodes = next(e for e in events if e["event"] == "pass_begin")["nodes"]
    assert "CompiledFunctionBackward" in {n["name"] for n in nodes}


def test_attach_eager_turns_compile_off(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    result = _run([sys.executable, "train.py"], tmp_path, USE_ATTACH="1")
    assert result.returncode == 0, result.stderr
    _check_eager(_events(tmp_path / "run.jsonl"))


def test_the_status_line_says_compile_is_disabled_throughout() -> None:
    model = SessionModel()
    model.apply({"event": "session", "version": 2, "torch": "2.13", "argv": ["t.py"], "pid": 1,
                 "eager": True})
    lines = [status_text(model.snapshot(), waiting=False, gone=None, breakpoints=0).plain]
    model.apply({"event": "pass_begin", "pass": 1, "api": "backward", "roots": [1],
                 "nodes": [{"id": 1, "name": "SumBackward0", "next": []}]})
    model.apply({"event": "stopped", "pass": 1, "step": 1, "id": 1, "name": "SumBackward0",
                 "reason": "pass_start", "detail": None, "grad_outputs": [], "saved": [],
                 "stop": 1})
    lines.append(status_text(model.snapshot(), waiting=False, gone=None, breakpoints=0,
                             width=100).plain)
    model.apply({"event": "exit", "code": 0, "traceback": None})
    lines.append(status_text(model.snapshot(), waiting=False, gone=None, breakpoints=0).plain)
    assert all("compile disabled by --eager" in line for line in lines), lines
    plain = SessionModel()
    plain.apply({"event": "session", "version": 2, "torch": "2.13", "argv": ["t.py"], "pid": 1})
    assert "eager" not in status_text(plain.snapshot(), waiting=False, gone=None,
                                      breakpoints=0).plain


@pilot
async def test_a_replay_of_an_eager_trace_says_so(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    events = [{"event": "session", "version": 2, "torch": "2.13", "argv": ["t.py"], "pid": 1,
               "eager": True},
              {"event": "pass_begin", "pass": 1, "api": "backward", "roots": [1],
               "nodes": [{"id": 1, "name": "SumBackward0", "next": []}]},
              {"event": "node", "pass": 1, "step": 1, "id": 1, "name": "SumBackward0",
               "grad_outputs": [], "grad_inputs": [], "saved": [], "error": None},
              {"event": "pass_end", "pass": 1, "status": "ok", "error": None, "skipped": []}]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    with TraceIndex(path) as index:
        app = replay_app(index)
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.pause()
            assert "compile disabled by --eager" in str(app.query_one("#status").render())
