"""Every pass in brief (``history`` events, engine/history) and ``trace --every / --when``
(engine/planned): a NaN seeded thousands of passes in is found, written in full, and the script
prints and exits exactly as under plain python; ``backstep history`` reads the run back."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from backstep.engine.graph import Graph, gradient_edge
from backstep.engine.history import (
    History,
    encode_floats,
    graph_leaves,
    graph_leaves_in,
    ranges,
)
from backstep.engine.recorder import JsonlRecorder
from backstep.traces.history_file import decode_floats, parse_ranges

SCRIPT = textwrap.dedent("""\
    import sys
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    steps, bad = int(sys.argv[1]), int(sys.argv[2])
    for step in range(steps):
        opt.zero_grad()
        out = model(x)
        if step == bad:
            out = out * torch.tensor(float("nan"))
        loss = ((out - y) ** 2).mean()
        loss.backward()
        opt.step()
        if step % 500 == 0 or step == bad - 1:
            print(step, loss.item(), [p.grad.sum().item() for p in model.parameters()])
    print("end", [p.detach().sum().item() for p in model.parameters()])
    sys.exit(3)
""")


def _run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600)


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_history_values_are_the_gradients_norms() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2))
    loss = model(torch.randn(4, 3)).pow(2).mean()
    history = History()
    leaves = history.before(loss)
    loss.backward()
    events = history.after(1, loss, leaves, sys._getframe())
    declared, event = events
    assert declared["event"] == "leaves" and declared["first"] == 0
    assert sorted(declared["names"]) == ["model.0.bias", "model.0.weight", "model.1.bias",
                                         "model.1.weight"]
    params = {f"model.{k}": p for k, p in model.named_parameters()}
    ids = parse_ranges(event["ids"])
    norms, maxes = decode_floats(event["norm"]), decode_floats(event["max"])
    assert ids == [0, 1, 2, 3] and "nonfinite" not in event
    for n, norm, biggest in zip(ids, norms, maxes, strict=True):
        grad = params[declared["names"][n]].grad
        assert norm == pytest.approx(grad.norm().item(), rel=1e-6)
        assert biggest == grad.abs().max().item()
    assert event["loss"] == loss.item()
    # the same leaves next pass: numbered as before, declared no more
    loss = model(torch.randn(4, 3)).sum()
    leaves = history.before(loss)
    loss.backward()
    again = history.after(2, loss, leaves, sys._getframe())
    assert [e["event"] for e in again] == ["history"] and again[0]["ids"] == "0-3"


def test_nonfinite_counts_are_exact_and_sparse() -> None:
    a = torch.zeros(10, requires_grad=True)
    b = torch.zeros(3, requires_grad=True)
    loss = (a * torch.tensor([1.0] * 7 + [math.nan, math.inf, 1.0])).sum() + b.sum()
    history = History()
    leaves = history.before(loss)
    loss.backward()
    declared, event = history.after(1, loss, leaves, sys._getframe())
    a_number = declared["names"].index("a")
    position = parse_ranges(event["ids"]).index(a_number)
    assert event["nonfinite"] == [[position, 2]]  # b's gradient is finite: not listed
    assert event["loss"] == "nan"
    assert math.isnan(decode_floats(event["norm"])[position])


def test_history_is_at_most_16_bytes_per_leaf_per_pass() -> None:
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(75)])  # 150 leaves
    history, out = History(), io.BytesIO()
    recorder = JsonlRecorder(out)
    x = torch.randn(2, 4)
    sizes = []
    for n in range(1, 6):
        loss = model(x).square().mean()
        leaves = history.before(loss)
        loss.backward()
        events = history.after(n, loss, leaves, sys._getframe())
        before = out.tell()
        recorder.emit(events[-1])
        sizes.append(out.tell() - before)
    assert len(leaves) == 150
    per_leaf = sum(sizes) / len(sizes) / 150
    assert per_leaf <= 16, per_leaf


def test_the_leaves_of_a_hooked_pass_are_those_of_the_history_walk() -> None:
    """A pass the capture hooks gives the history its leaves from the graph it built: the same
    leaves in the same order (their numbers, the file's columns), roots repeated, a leaf as a
    root and shared parameters included."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    w = torch.randn(2, requires_grad=True)
    x = torch.randn(3, 4)
    a = (model(x) * w).sum()
    b = (model(x).exp() + model[0].weight.sum()).sum()
    for outputs in [(a,), (a, b), (b, a, a), (w, a)]:
        edges = [gradient_edge(t) for t in outputs]
        graph = Graph([e[0] for e in edges if e is not None])
        walked = graph_leaves([e[0] for e in edges if e is not None])
        assert walked and [id(t) for t in graph_leaves_in(graph)] == [
            id(t) for t in walked]


def test_encoding_round_trips() -> None:
    values = [0.0, 1.5, -2.25, math.inf, 2.0 ** 100]
    assert list(decode_floats(encode_floats(values))) == values
    assert ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8" and parse_ranges("0-2,5,7-8") == [
        0, 1, 2, 5, 7, 8]
    assert ranges([]) == "" and parse_ranges("") == []


def test_a_nan_thousands_of_passes_in(tmp_path: Path) -> None:
    """``--when nonfinite``: history for every pass, the NaN's pass in full from its birth node
    and one pass after it, for three trips; output and exit code as plain python's."""
    (tmp_path / "train.py").write_text(SCRIPT)
    plain = _run(tmp_path, "train.py", "3200", "3000")
    trace = tmp_path / "run.jsonl"
    traced = _run(tmp_path, "-m", "backstep", "trace", "-o", str(trace), "--when", "nonfinite",
                  "train.py", "3200", "3000")
    assert (traced.returncode, traced.stdout, traced.stderr) == (
        plain.returncode, plain.stdout, plain.stderr)
    assert plain.returncode == 3
    events = _events(trace)
    history = [e for e in events if e["event"] == "history"]
    assert [e["n"] for e in history] == list(range(1, 3201))
    assert all("nonfinite" not in e for e in history[:3000])
    assert history[3000]["nonfinite"] and history[3000]["loss"] == "nan"
    trips = [e for e in events if e["event"] == "trip"]
    assert [t["n"] for t in trips] == [3001, 3002, 3003]  # three trips, then only history
    assert trips[0]["reason"] == "nonfinite" and trips[0]["name"] == "PowBackward0"
    assert "NaN/Inf" in trips[0]["detail"]
    full = sorted({e["pass"] for e in events if e["event"] == "pass_begin"})
    assert full == [3001, 3002, 3003, 3004]  # each trip's pass, and the one after the last
    # the tripping pass is written from the tripping node on, with its gradients
    node = next(e for e in events if e["event"] == "node" and e["pass"] == 3001
                and e["id"] == trips[0]["id"])
    assert node["grad_inputs"][0]["nonfinite"] == 16

    shown = _run(tmp_path, "-m", "backstep", "history", str(trace))
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    assert "<- first non-finite" in lines[3001] and lines[3001].split()[0] == "3001"
    assert lines[-1].startswith("first non-finite gradient: pass 3001 (")
    table = _run(tmp_path, "-m", "backstep", "history", "--csv", "--module", "model.0",
                 str(trace))
    rows = list(csv.reader(io.StringIO(table.stdout)))
    assert rows[0] == ["pass", "loss", "model.0", "nonfinite"]
    assert rows[3001][:3] == ["3001", "nan", "nan"] and int(rows[3001][3]) > 0
    assert float(rows[1][1]) == pytest.approx(float(plain.stdout.split()[1]), rel=1e-6)


def test_every_k_writes_one_pass_in_k(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    trace = tmp_path / "run.jsonl"
    traced = _run(tmp_path, "-m", "backstep", "trace", "-o", str(trace), "--every", "3",
                  "train.py", "8", "-1")
    assert traced.returncode == 3
    events = _events(trace)
    assert sorted({e["pass"] for e in events if e["event"] == "pass_begin"}) == [1, 4, 7]
    assert [e["n"] for e in events if e["event"] == "history"] == list(range(1, 9))


@pytest.mark.parametrize("options", [["--every", "0"], ["--every", "x"], ["--when", "bogus:1"],
                                     ["--when", "norm:abc"], ["--trips", "0"]])
def test_bad_options_say_one_line_and_exit_2(tmp_path: Path, options: list[str]) -> None:
    (tmp_path / "train.py").write_text("print('ran')\n")
    result = _run(tmp_path, "-m", "backstep", "trace", "-o", str(tmp_path / "t.jsonl"),
                  *options, "train.py")
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("backstep trace:")


def test_history_of_a_bad_file_exits_2(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_text("not json\n")
    result = _run(tmp_path, "-m", "backstep", "history", str(tmp_path / "x.jsonl"))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    result = _run(tmp_path, "-m", "backstep", "history", str(tmp_path / "missing.jsonl"))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1


def test_history_command_never_imports_torch(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"event":"session","version":2}\n'
                     '{"event":"leaves","first":0,"names":["w"],"modules":[null]}\n'
                     '{"event":"history","n":1,"loss":2.0,"ids":"0","norm":"AACAPw==",'
                     '"max":"AACAPw=="}\n')
    code = ("import io, sys\nfrom backstep import cli\nout = sys.stdout\n"
            "sys.stdout = io.StringIO()\ncode = cli.main(['history', sys.argv[1]])\n"
            "text = sys.stdout.getvalue()\nsys.stdout = out\n"
            "print(code, 'torch' in sys.modules, text.splitlines()[1].split())")
    result = _run(tmp_path, "-c", code, str(trace))
    assert result.stdout.strip() == "0 False ['1', '2', '1', '0']", result.stderr
