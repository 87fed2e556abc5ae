"""Every demo runs under ``backstep trace``, and what its narration states is checked against the
recorded events: values, which pass errors, which node fails, skipped nodes, .grad before/after.
Every ``[[stop]]`` must match a real stop, so the narration cannot drift from what PyTorch does.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import re
import subprocess
import sys
import types
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from backstep.commands import demo as demo_command
from backstep.demo import catalog as demos
from backstep.demo import narration
from backstep.events.form import expand

REPO = Path(__file__).resolve().parent.parent
DEMOS = demos.all_demos(REPO / "demos")
NAMES = [d.name for d in DEMOS]


@dataclass
class Trace:
    """One demo's recorded run: its events and what it printed."""

    events: list[dict[str, Any]]
    stdout: str
    stderr: str
    returncode: int

    def of(self, kind: str, pass_: int | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e["event"] == kind and (pass_ is None or e.get("pass") == pass_)
        ]

    def passes(self) -> list[int]:
        return [e["pass"] for e in self.of("pass_begin")]

    def begin(self, pass_: int) -> dict[str, Any]:
        (event,) = self.of("pass_begin", pass_)
        return event

    def end(self, pass_: int) -> dict[str, Any]:
        (event,) = self.of("pass_end", pass_)
        return event

    def steps(self, pass_: int) -> list[dict[str, Any]]:
        return sorted(self.of("node", pass_), key=lambda e: e["step"])

    def step(self, pass_: int, step: int) -> dict[str, Any]:
        (event,) = [e for e in self.of("node", pass_) if e["step"] == step]
        return event

    def names(self, pass_: int) -> list[str]:
        return [e["name"] for e in self.steps(pass_)]

    def leaf_id(self, pass_: int, leaf: str) -> int:
        (node,) = [n for n in self.begin(pass_)["nodes"] if n["leaf"] == leaf]
        return node["id"]

    def acc(self, pass_: int, leaf: str) -> dict[str, Any]:
        (event,) = [e for e in self.of("accumulate", pass_) if e["leaf"] == leaf]
        return event

    def failed(self, pass_: int) -> dict[str, Any]:
        """The node event that raised in this pass."""
        (event,) = [e for e in self.of("node", pass_) if e["error"]]
        return event

    def exit_code(self) -> int:
        (event,) = self.of("exit")
        return event["code"]


def values(summary: dict[str, Any] | None) -> list[float] | None:
    """A summary's values as floats (non-finite strings back to floats)."""
    if summary is None:
        return None
    return [float(v) for v in summary["values"]]


def close(a: list[float] | None, b: list[float], tol: float = 1e-6) -> bool:
    return (
        a is not None
        and len(a) == len(b)
        and all(math.isclose(x, y, abs_tol=tol) for x, y in zip(a, b, strict=True))
    )


def saved(event: dict[str, Any], name: str) -> dict[str, Any]:
    (entry,) = [s for s in event["saved"] if s["name"] == name]
    return entry


def _trace(name: str, out: Path) -> Trace:
    path = out / f"{name}.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "backstep", "trace", "-o", str(path), f"demos/{name}.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    events = [expand(json.loads(line)) for line in path.read_text().splitlines()] if path.exists() else []
    return Trace(events, proc.stdout, proc.stderr, proc.returncode)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Trace]:
    out = tmp_path_factory.mktemp("traces")
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(NAMES, pool.map(lambda n: _trace(n, out), NAMES), strict=True))


@dataclass
class Plain:
    """One demo run by plain python: what it printed, and where in that output each backward
    pass began (so a narrated value can be shown to exist before the stop that quotes it)."""

    stdout: str
    pass_starts: list[int]


@pytest.fixture(scope="module")
def plain_runs() -> dict[str, Plain]:
    """Each demo run by plain python (one interpreter for all: torch imports once). Every
    torch.autograd.backward / grad call (each is one backstep pass) notes the output's length."""
    code = (
        "import contextlib, io, json, runpy, sys\n"
        "import torch\n"
        "out = {}\n"
        "marks = []\n"
        "buf = io.StringIO()\n"
        "def marking(fn):\n"
        "    def wrapper(*args, **kwargs):\n"
        "        marks.append(len(buf.getvalue()))\n"
        "        return fn(*args, **kwargs)\n"
        "    return wrapper\n"
        "torch.autograd.backward = marking(torch.autograd.backward)\n"
        "torch.autograd.grad = marking(torch.autograd.grad)\n"
        "for name in sys.argv[1:]:\n"
        "    buf = io.StringIO()\n"
        "    marks = []\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(buf):\n"
        "            runpy.run_path(f'demos/{name}.py', run_name='__main__')\n"
        "    except SystemExit as exc:\n"
        "        buf.write(f'SystemExit: {exc.code}')\n"
        "    out[name] = [buf.getvalue(), marks]\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *NAMES], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    raw = json.loads(proc.stdout.splitlines()[-1])
    return {name: Plain(stdout, marks) for name, (stdout, marks) in raw.items()}


@pytest.fixture(scope="module")
def plain_stdout(plain_runs: dict[str, Plain]) -> dict[str, str]:
    return {name: run.stdout for name, run in plain_runs.items()}


# -- the set of demos and the CLI ---------------------------------------------------------------


def test_the_ten_demos_are_there_in_teaching_order() -> None:
    assert NAMES == list(demos.CURRICULUM)
    for demo in DEMOS:
        n = narration.load(demo.narration)
        assert n.title and n.intro and n.outro, demo.name
        assert n.stops, f"{demo.name} has no keyed narration"


def test_discovery_prefers_installed_demos_and_ignores_scripts_without_narration(
    tmp_path: Path,
) -> None:
    (tmp_path / "zeta.py").write_text("print(1)\n")
    (tmp_path / "zeta.toml").write_text('title = "Zeta"\nintro = "i"\n')
    (tmp_path / "alpha.py").write_text("print(1)\n")
    (tmp_path / "alpha.toml").write_text('title = "Alpha"\nintro = "i"\n')
    (tmp_path / "graph_basics.py").write_text("print(1)\n")
    (tmp_path / "graph_basics.toml").write_text('title = "GB"\nintro = "i"\n')
    (tmp_path / "helper.py").write_text("print(1)\n")  # no narration: not a demo
    found = demos.all_demos(tmp_path)
    assert [d.name for d in found] == ["graph_basics", "alpha", "zeta"]
    assert demos.find("alpha", tmp_path).title == "Alpha"
    assert demos.find("helper", tmp_path) is None
    assert demos.demos_dir() == REPO / "demos"  # a source checkout has no backstep/_demos


def test_installed_demos_win_over_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "backstep"
    (package / "_demos").mkdir(parents=True)
    (tmp_path / "demos").mkdir()
    monkeypatch.setattr(demos, "__file__", str(package / "demo" / "catalog.py"))
    assert demos.demos_dir() == package / "_demos"
    (package / "_demos").rmdir()
    assert demos.demos_dir() == tmp_path / "demos"
    (tmp_path / "demos").rmdir()
    assert demos.demos_dir() is None and demos.all_demos() == []


def _demo_args(
    name: str | None = None, script: bool = False, list_: bool = False
) -> argparse.Namespace:
    return argparse.Namespace(name=name, script=script, list=list_)


def test_backstep_demo_lists_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo_command.main(_demo_args()) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == NAMES
    assert lines[0].endswith(narration.load(DEMOS[0].narration).title)


def test_backstep_demo_list_lists_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo_command.main(_demo_args()) == 0
    bare = capsys.readouterr().out
    assert demo_command.main(_demo_args(list_=True)) == 0
    assert capsys.readouterr().out == bare
    assert demo_command.main(_demo_args("nan_where", list_=True)) == 2
    assert "--list takes no NAME" in capsys.readouterr().err


def test_backstep_demo_list_from_the_command_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "backstep", "demo", "--list"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()] == NAMES


def test_backstep_demo_script_prints_the_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo_command.main(_demo_args("nan_where", script=True)) == 0
    assert Path(capsys.readouterr().out.strip()) == REPO / "demos" / "nan_where.py"


def test_unknown_demo_is_one_line_listing_the_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo_command.main(_demo_args("nope")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'nope'" in err and all(n in err for n in NAMES)


def test_backstep_demo_name_launches_the_ui_with_the_narration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[Any, ...]] = []
    fake = types.ModuleType("backstep.commands.run")

    def launch(script: str, script_args: list[str], **kwargs: Any) -> int:
        calls.append((script, script_args, kwargs))
        return 7

    fake.launch = launch  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "backstep.commands.run", fake)
    assert demo_command.main(_demo_args("graph_basics")) == 7
    assert calls == [
        (
            str(REPO / "demos" / "graph_basics.py"),
            [],
            {"narration": str(REPO / "demos" / "graph_basics.toml")},
        )
    ]


def test_the_cli_knows_the_demo_subcommand_and_loads_neither_torch_nor_textual() -> None:
    code = (
        "import sys\n"
        "from backstep.cli import main\n"
        "code = main(['demo', 'accumulation', '--script'])\n"
        "print(code, 'torch' in sys.modules, 'textual' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    path, status = proc.stdout.splitlines()
    assert path.endswith("accumulation.py") and status == "0 False False", proc.stderr


# -- every demo, under backstep trace and plain python ----------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_demo_checks_all_pass_under_trace(name: str, traces: dict[str, Trace]) -> None:
    trace = traces[name]
    assert "FACT FAILED" not in trace.stdout + trace.stderr, trace.stdout + trace.stderr
    assert trace.returncode == 0 and trace.exit_code() == 0, trace.stderr
    assert "checked:" in trace.stdout


@pytest.mark.parametrize("name", NAMES)
def test_demo_runs_as_a_plain_script(name: str, plain_stdout: dict[str, str]) -> None:
    out = plain_stdout[name]
    assert "FACT FAILED" not in out and "SystemExit" not in out, out
    assert out.count("checked:") >= 3


@pytest.mark.parametrize("name", NAMES)
def test_demo_prints_the_same_under_backstep(
    name: str, traces: dict[str, Trace], plain_stdout: dict[str, str]
) -> None:
    assert traces[name].stdout == plain_stdout[name]


@pytest.mark.parametrize("name", NAMES)
def test_every_keyed_stop_is_a_real_stop(name: str, traces: dict[str, Trace]) -> None:
    trace = traces[name]
    stops = [(e["pass"], e["step"], e["name"]) for e in trace.of("node")]
    demo = demos.find(name, REPO / "demos")
    for stop in narration.load(demo.narration).stops:
        matches = [s for s in stops if stop.matches(*s)]
        assert matches, f"{name}: [[stop]] pass={stop.pass_} step={stop.step} node={stop.node}"
        # The text shown at that stop is this entry's (no more specific entry hides it).
        shown = narration.load(demo.narration)
        assert any(shown.text_for(*s) == stop.text for s in matches), (name, stop)


# -- the facts each narration states ----------------------------------------------------------


def test_graph_basics(traces: dict[str, Trace]) -> None:
    t = traces["graph_basics"]
    assert t.passes() == [1]
    assert t.names(1) == [
        "PowBackward0",
        "AddBackward0",
        "MulBackward0",
        "AccumulateGrad",
        "AccumulateGrad",
    ]
    pow_, add, mul, acc_x, acc_y = t.steps(1)
    assert values(pow_["grad_outputs"][0]) == [1.0] and values(pow_["grad_inputs"][0]) == [16.0]
    assert saved(pow_, "self")["status"] == "alive"
    assert [values(g) for g in add["grad_inputs"]] == [[16.0], [16.0]]
    assert all(s["status"] == "scalar" for s in add["saved"])  # AddBackward0 saves no tensor
    assert [values(g) for g in mul["grad_inputs"]] == [[48.0], [32.0]]
    assert {saved(mul, "self")["status"], saved(mul, "other")["status"]} == {"alive"}
    x, y = t.leaf_id(1, "x"), t.leaf_id(1, "y")
    assert (acc_x["id"], acc_y["id"]) == (x, y)
    assert values(acc_x["grad_outputs"][0]) == [64.0]  # 16 + 48, summed before the node runs
    edges_to_x = sum(n["next"].count(x) for n in t.begin(1)["nodes"])
    assert edges_to_x == 2  # one node, reached twice
    assert t.acc(1, "x")["before"] is None and values(t.acc(1, "x")["after"]) == [64.0]
    assert values(t.acc(1, "y")["after"]) == [32.0]
    sources = {n["name"]: n["source"] for n in t.begin(1)["nodes"]}
    assert sources["PowBackward0"]["code"].startswith("out = w**2")


def test_backward_twice(traces: dict[str, Trace]) -> None:
    t = traces["backward_twice"]
    assert t.passes() == [1, 2, 3, 4, 5, 6, 7]  # retain_variables=True never starts a pass
    assert saved(t.step(1, 1), "self")["status"] == "alive"
    assert values(t.acc(1, "x")["after"]) == [12.0]
    # Pass 2 fails at its very first node: the same PowBackward0, its saved x freed.
    assert t.end(2)["status"] == "error" and "second time" in t.end(2)["error"]
    fail = t.failed(2)
    assert (fail["step"], fail["name"], fail["id"]) == (1, "PowBackward0", t.step(1, 1)["id"])
    assert saved(fail, "self")["status"] == "freed"
    assert t.of("accumulate", 2) == []
    # Pass 4: head_b's branch runs and writes .grad, then the encoder's AddmmBackward0 fails.
    fail = t.failed(4)
    assert (fail["step"], fail["name"]) == (6, "AddmmBackward0")
    assert fail["id"] == t.step(3, 6)["id"]  # the encoder node pass 3 ran at step 6
    assert t.end(4)["status"] == "error" and "second time" in t.end(4)["error"]
    # Pass 5: loss_a alone on a fresh graph (the reference the encoder's .grad is compared with).
    assert t.begin(5)["api"] == "grad" and t.end(5)["status"] == "ok"
    assert {e["id"] for e in t.of("node", 5)}.isdisjoint(e["id"] for e in t.of("node", 3))
    assert saved(fail, "mat1")["status"] == "freed"
    assert {e["leaf"] for e in t.of("accumulate", 4)} == {"head_b.bias", "head_b.weight"}
    assert {t.leaf_id(4, "encoder.weight"), t.leaf_id(4, "encoder.bias")} <= set(
        t.end(4)["skipped"]
    )
    # x + 1 saved nothing: walked twice, both passes succeed.
    assert t.end(6)["status"] == t.end(7)["status"] == "ok"
    assert t.names(7) == ["AddBackward0", "AccumulateGrad"]
    assert t.step(7, 1)["id"] == t.step(6, 1)["id"]
    assert values(t.acc(7, "x")["before"]) == [1.0] and values(t.acc(7, "x")["after"]) == [2.0]


def test_retain_graph(traces: dict[str, Trace]) -> None:
    t = traces["retain_graph"]
    assert t.passes() == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert [t.begin(p)["retain_graph"] for p in (1, 2, 3, 4, 5, 6, 7)] == [
        True,
        False,
        False,
        True,
        False,
        True,
        False,
    ]
    # Pass 2 walks the encoder nodes of pass 1 again (same ids), saved tensors still alive.
    enc = t.step(2, 7)
    assert enc["name"] == "AddmmBackward0" and enc["id"] == t.step(1, 6)["id"]
    assert {saved(enc, "mat1")["status"], saved(enc, "mat2")["status"]} == {"alive"}
    assert t.acc(2, "encoder.2.bias")["before"] is not None  # adds to loss_a's gradient
    # Pass 3: the sum; one pass, each node once, same encoder gradients up to rounding.
    assert t.step(3, 1)["name"] == "AddBackward0"
    ids = [e["id"] for e in t.of("node", 3)]
    assert len(ids) == len(set(ids))
    for leaf in ("encoder.0.bias", "encoder.0.weight", "encoder.2.bias", "encoder.2.weight"):
        assert close(values(t.acc(3, leaf)["after"]), values(t.acc(2, leaf)["after"]))
    # Pass 5: optimizer.step() modified a saved weight; the error comes at step 7.
    assert t.end(5)["status"] == "error"
    fail = t.failed(5)
    assert (fail["step"], fail["name"]) == (7, "AddmmBackward0")
    mat2 = saved(fail, "mat2")
    assert mat2["status"] == "modified" and mat2["version"] == {"saved": 1, "now": 2}
    assert "is at version 2; expected version 1" in fail["error"]
    assert [e["name"] for e in t.steps(5)[:6]] == [
        "MeanBackward0",
        "PowBackward0",
        "AddmmBackward0",
        "AccumulateGrad",
        "TBackward0",
        "AccumulateGrad",
    ]
    # Part D: the article's Example 1 runs; the weight was never saved, only the data.
    assert t.step(6, 1)["name"] == "MseLossBackward0"
    linear = t.step(7, 4)
    assert linear["name"] == "AddmmBackward0" and linear["id"] == t.step(6, 2)["id"]
    assert saved(linear, "mat1")["status"] == "alive"
    assert saved(linear, "mat2")["status"] == "none" and saved(linear, "mat2")["bytes"] == 0
    assert all(t.end(p)["status"] == "ok" for p in (6, 7, 8))
    assert close(
        values(t.acc(7, "model.weight")["after"]),
        values(t.acc(8, "before_step.weight")["after"]),
        tol=0,
    )
    # The narrated numbers are this run's: the printed difference and versions.
    measured = narration.measured(t.stdout)
    assert f"{measured['max_diff']:.1e}" in t.stdout
    assert (measured["version_before"], measured["version_after"]) == (1, 2)
    # Part E: loss_a alone; head_b is not in the graph at all, so its .grad stays None.
    leaves = {n["leaf"] for n in t.begin(9)["nodes"] if n["leaf"]}
    assert leaves and not any(leaf.startswith("head_b") for leaf in leaves)
    assert measured["head_b_grad"] is None


def test_higher_order(traces: dict[str, Trace]) -> None:
    t = traces["higher_order"]
    assert t.passes() == list(range(1, 15))
    first = t.begin(1)
    assert (first["api"], first["create_graph"], first["retain_graph"]) == ("grad", True, True)
    assert t.names(1) == ["PowBackward0"] and values(t.step(1, 1)["grad_inputs"][0]) == [27.0]
    assert t.leaf_id(1, "x") in t.end(1)["skipped"] and t.of("accumulate", 1) == []
    # Pass 2 walks the graph pass 1 built: new nodes, only x's AccumulateGrad is shared.
    assert t.names(2) == ["MulBackward0", "MulBackward1", "PowBackward0"]
    new = {n["id"] for n in t.begin(2)["nodes"]} - {n["id"] for n in first["nodes"]}
    assert new == {e["id"] for e in t.of("node", 2)}
    assert values(t.step(2, 3)["grad_inputs"][0]) == [18.0]
    assert t.of("accumulate", 2) == []
    # The article's version: a second backward after a plain one fails at PowBackward0.
    assert print_values(t, 3) == [2.0]
    assert t.begin(4)["retain_graph"] is True and t.end(4)["status"] == "error"
    fail = t.failed(4)
    assert (fail["step"], fail["name"]) == (1, "PowBackward0")
    assert saved(fail, "self")["status"] == "freed"
    # x.grad.backward(): nothing to walk.
    assert t.of("node", 5) == [] and "does not require grad" in t.end(5)["error"]
    # backward(create_graph=True), then through x.grad: 27 + 18 = 45; reset first: 18.
    assert values(t.acc(6, "x")["after"]) == [27.0]
    assert values(t.acc(7, "x")["before"]) == [27.0] and values(t.acc(7, "x")["after"]) == [45.0]
    assert t.acc(8, "x")["before"] is None and values(t.acc(8, "x")["after"]) == [18.0]
    # Part D: create_graph=True, retain_graph=False, then a second derivative.
    for first in (9, 11, 13):
        assert (t.begin(first)["create_graph"], t.begin(first)["retain_graph"]) == (True, False)
    assert t.names(10) == ["MulBackward0", "MulBackward1", "PowBackward0"]  # all new nodes
    assert t.end(10)["status"] == "ok" and t.step(9, 1)["id"] not in {e["id"] for e in t.of("node", 10)}
    for first, second, name in ((11, 12, "ExpBackward0"), (13, 14, "TanhBackward0")):
        fail = t.failed(second)
        assert (fail["step"], fail["name"]) == (2, name)
        assert fail["id"] == t.step(first, 1)["id"]  # y's own node, reused by the gradient's graph
        assert saved(fail, "result")["status"] == "freed" and "second time" in fail["error"]
    measured = narration.measured(t.stdout)
    assert measured["graph_exp"] == t.names(12) and measured["graph_tanh"] == t.names(14)
    assert measured["graph_pow3"] == t.names(10)


def print_values(t: Trace, pass_: int) -> list[float] | None:
    return values(t.acc(pass_, "x")["after"])


def test_retain_grad(traces: dict[str, Trace]) -> None:
    t = traces["retain_grad"]
    assert t.passes() == [1, 2, 3, 4, 5, 6, 7, 8]
    for p in (1, 2):  # before z and after z: both keep y's gradient
        y = [e for e in t.of("accumulate", p) if e["retained"]]
        assert [e["leaf"] for e in y] == ["y"] and close(values(y[0]["after"]), [0.1] * 10)
        assert t.step(p, 3)["name"] == "MulBackward0"
        assert close(values(t.step(p, 3)["grad_outputs"][0]), [0.1] * 10)
    for p in (3, 4):  # without retain_grad (or too late) nothing is kept
        assert [e for e in t.of("accumulate", p) if e["retained"]] == []
    assert close(values(t.acc(4, "x")["after"]), [0.8] * 10)  # x.grad kept accumulating
    assert values(t.acc(5, "y")["after"]) == [4.5]
    assert t.end(6)["status"] == "error"
    fail = t.failed(6)
    assert (fail["step"], fail["name"]) == (1, "PowBackward0") and "second time" in fail["error"]
    # y.grad is written before y's own node (MulBackward0, step 3) runs; backstep reports the
    # retained entry with that node's id when the pass ends.
    measured = narration.measured(t.stdout)
    assert (measured["y_grad_after_add"], measured["y_grad_before_mul"]) == (False, True)
    (retained,) = [e for e in t.of("accumulate", 1) if e["retained"]]
    assert retained["id"] == t.step(1, 3)["id"]
    # Part F: y in two branches; its node receives the SUM, with or without retain_grad.
    for p in (7, 8):
        y_node = t.step(p, 6)
        assert y_node["name"] == "MulBackward0" and values(y_node["grad_outputs"][0]) == [7.0, 11.0]
        assert values(t.acc(p, "x")["after"]) == [14.0, 22.0]
    assert values(t.acc(7, "y")["after"]) == measured["two_branch_y_grad"] == [7.0, 11.0]


def test_detach_no_grad(traces: dict[str, Trace]) -> None:
    t = traces["detach_no_grad"]
    assert t.passes() == [1, 2, 3]
    leaves_1 = {n["leaf"] for n in t.begin(1)["nodes"] if n["leaf"]}
    assert leaves_1 == {"decoder.bias", "decoder.weight"}  # no encoder node in the graph
    dec = t.step(1, 4)
    assert dec["name"] == "AddmmBackward0" and dec["grad_inputs"][1] is None
    (dec_node,) = [n for n in t.begin(1)["nodes"] if n["id"] == dec["id"]]
    assert dec_node["next"][1] is None  # the cut
    assert {n["leaf"] for n in t.begin(2)["nodes"] if n["leaf"]} == {
        "decoder.bias",
        "decoder.weight",
        "encoder.bias",
        "encoder.weight",
    }
    assert t.step(2, 4)["grad_inputs"][1]["shape"] == [4, 5]
    enc = t.step(2, 8)
    assert enc["name"] == "AddmmBackward0" and enc["grad_inputs"][1] is None  # x: plain data
    assert t.acc(2, "encoder.bias")["after"] is not None
    assert t.of("node", 3) == [] and "does not require grad" in t.end(3)["error"]
    # Pass 2's decoder node is a new node: the narration quotes both ids, and they differ.
    assert t.step(2, 4)["id"] != t.step(1, 4)["id"]
    assert t.step(2, 4)["id"] not in {n["id"] for n in t.begin(1)["nodes"]}


def test_accumulation(traces: dict[str, Trace]) -> None:
    t = traces["accumulation"]
    assert t.passes() == [1, 2, 3, 4, 5, 6, 7, 8]
    acc = [t.acc(p, "x") for p in (1, 2, 3)]
    assert [values(a["before"]) for a in acc] == [None, [1.0], [3.0]]
    assert [values(a["after"]) for a in acc] == [[1.0], [3.0], [6.0]]
    assert len({a["id"] for a in acc}) == 1  # one leaf, one AccumulateGrad node
    assert t.step(5, 1)["name"] == "DivBackward0"
    assert values(t.step(5, 1)["grad_inputs"][0]) == [0.5]
    full = values(t.acc(4, "model.bias")["after"])
    assert t.step(6, 6)["id"] == t.leaf_id(6, "model.bias")
    assert close(values(t.acc(6, "model.bias")["before"]), values(t.acc(5, "model.bias")["after"]))
    assert close(values(t.acc(6, "model.bias")["after"]), full)
    assert t.step(8, 5)["id"] == t.leaf_id(8, "model.bias")
    assert close(values(t.acc(8, "model.bias")["after"]), [2 * v for v in full], tol=1e-5)


def test_retain_graph_loop(traces: dict[str, Trace]) -> None:
    t = traces["retain_graph_loop"]
    assert t.passes() == list(range(1, 13))
    assert [t.begin(p)["retain_graph"] for p in range(1, 13)] == [True] * 3 + [False] * 3 + [
        True
    ] * 3 + [False] * 3
    for p in range(2, 13):  # every iteration builds a new graph: only leaves' nodes repeat
        before = {e["id"] for e in t.of("node", p - 1) if e["name"] != "AccumulateGrad"}
        now = {e["id"] for e in t.of("node", p) if e["name"] != "AccumulateGrad"}
        assert before.isdisjoint(now), p
    measured = narration.measured(t.stdout)
    for p in (1, 4, 9):
        pow_ = t.step(p, 2)
        assert pow_["name"] == "PowBackward0"
        assert saved(pow_, "self")["status"] == "alive"
        assert saved(pow_, "self")["bytes"] == measured["extra_bytes"]
    assert saved(t.step(1, 4), "mat1")["bytes"] == measured["x_bytes"]  # AddmmBackward0 saved x
    # backstep's graph_released event: every retained graph, with the bytes the script measured.
    released = t.of("graph_released")
    assert sorted(e["pass"] for e in released) == [1, 2, 3, 7, 8, 9]
    assert {e["bytes"] for e in released} == {measured["graph_bytes"]}
    # Pass 1's graph is released before pass 2 begins: one graph at a time, not a pile.
    kinds = [(e["event"], e.get("pass")) for e in t.events]
    assert kinds.index(("graph_released", 1)) < kinds.index(("pass_begin", 2))
    assert kinds.index(("graph_released", 7)) > kinds.index(("pass_end", 9))


def test_inplace_error(traces: dict[str, Trace]) -> None:
    t = traces["inplace_error"]
    assert t.passes() == [1, 2]
    assert t.end(1)["status"] == "error"
    assert t.names(1) == ["SumBackward0", "MulBackward0", "ClampBackward1", "SigmoidBackward0"]
    assert t.step(1, 3)["error"] is None
    fail = t.failed(1)
    assert (fail["step"], fail["name"]) == (4, "SigmoidBackward0")
    result = saved(fail, "result")
    assert result["status"] == "modified" and result["version"] == {"saved": 0, "now": 1}
    assert "[torch.FloatTensor [3]]" in fail["error"]
    assert "is at version 1; expected version 0" in fail["error"]
    (node,) = [n for n in t.begin(1)["nodes"] if n["id"] == fail["id"]]
    assert node["source"]["code"].startswith("h = torch.sigmoid(x * w)")
    assert t.leaf_id(1, "w") in t.end(1)["skipped"] and t.of("accumulate", 1) == []
    fixed = t.step(2, 4)
    assert fixed["name"] == "SigmoidBackward0" and saved(fixed, "result")["status"] == "alive"
    assert values(fixed["grad_outputs"][0]) == [3.0, 3.0, 0.0]
    assert t.end(2)["status"] == "ok"


def test_nan_where(traces: dict[str, Trace]) -> None:
    t = traces["nan_where"]
    assert t.passes() == [1, 2]
    where, sqrt = t.step(1, 2), t.step(1, 3)
    assert where["name"] == "WhereBackward0" and sqrt["name"] == "SqrtBackward0"
    assert values(where["grad_inputs"][0]) == [0.0, 0.0, 1.0]
    assert sqrt["grad_outputs"][0]["nonfinite"] == 0
    assert sqrt["grad_inputs"][0]["nonfinite"] == 2
    assert sqrt["grad_inputs"][0]["values"] == ["nan", "nan", 0.25]
    born = [e for e in t.steps(1) if any(g and g["nonfinite"] for g in e["grad_inputs"] or [])]
    assert born[0]["name"] == "SqrtBackward0"  # the first node that makes a NaN
    assert t.acc(1, "x")["after"]["values"] == ["nan", "nan", 0.25]
    assert t.names(2) == [
        "SumBackward0",
        "WhereBackward0",
        "SqrtBackward0",
        "WhereBackward0",
        "AccumulateGrad",
    ]
    assert values(t.step(2, 3)["grad_inputs"][0]) == [0.0, 0.0, 0.25]
    assert not any(g and g["nonfinite"] for e in t.steps(2) for g in (e["grad_inputs"] or []))


# -- narration filled from the run, numbers that exist in the run ----------------------------

NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])")


def _stop_values(t: Trace, run: Plain, pass_: int, step: int) -> dict[str, Any]:
    """The values a template at this stop can use: what the script printed before the pass
    began, node ids, and the stop's saved-tensor bytes."""
    values = narration.measured(run.stdout[: run.pass_starts[pass_ - 1]])
    values["id"] = narration.node_ids((e["pass"], e["step"], e["id"]) for e in t.of("node"))
    values["saved"] = {s["name"]: s.get("bytes", 0) for s in t.step(pass_, step)["saved"]}
    return values


def _final_values(t: Trace) -> dict[str, Any]:
    values = narration.measured(t.stdout)
    values["id"] = narration.node_ids((e["pass"], e["step"], e["id"]) for e in t.of("node"))
    return values


def rendered(name: str, t: Trace, run: Plain) -> list[tuple[str, str]]:
    """Every text the demo can show, as the run fills it: (where, text)."""
    story = narration.load(demos.find(name, REPO / "demos").narration)
    out = [("intro", narration.render(story.intro, {}))]
    for e in t.of("node"):
        text = story.text_for(e["pass"], e["step"], e["name"])
        if text is not None:
            where = f"pass {e['pass']} step {e['step']}"
            out.append((where, narration.render(text, _stop_values(t, run, e["pass"], e["step"]))))
    if story.outro is not None:
        out.append(("outro", narration.render(story.outro, _final_values(t))))
    return out


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, str):
        return [float(m) for m in NUMBER.findall(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []


def _shown_as(token: str, value: float) -> bool:
    """Whether ``value`` reads as ``token`` at the precision the token is written with."""
    mantissa, _, _ = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    if "e" in token.lower():
        return float(f"{value:.{decimals}e}") == float(token)
    return round(value, decimals) == float(token)


def test_run_positions_match_the_passes(
    traces: dict[str, Trace], plain_runs: dict[str, Plain]
) -> None:
    for name in NAMES:
        assert len(plain_runs[name].pass_starts) == len(traces[name].passes()), name


@pytest.mark.parametrize("name", NAMES)
def test_every_narrated_field_is_filled_by_the_run(
    name: str, traces: dict[str, Trace], plain_runs: dict[str, Plain]
) -> None:
    story = narration.load(demos.find(name, REPO / "demos").narration)
    assert narration.fields(story.intro) == [], "the intro shows before the run measures anything"
    for where, text in rendered(name, traces[name], plain_runs[name]):
        assert narration.MISSING not in text, f"{name} {where}: {text}"


@pytest.mark.parametrize("name", NAMES)
def test_every_narrated_number_is_in_the_run(
    name: str, traces: dict[str, Trace], plain_runs: dict[str, Plain]
) -> None:
    t = traces[name]
    source = (REPO / "demos" / f"{name}.py").read_text()
    known = _numbers(t.stdout) + _numbers(t.events) + _numbers(source)
    for where, text in rendered(name, t, plain_runs[name]):
        for token in NUMBER.findall(text):
            assert any(_shown_as(token, v) for v in known), f"{name} {where}: {token!r} not in run"


def test_a_typed_in_number_fails_the_number_check(
    traces: dict[str, Trace], plain_runs: dict[str, Plain]
) -> None:
    t = traces["retain_graph"]
    known = _numbers(t.stdout) + _numbers(t.events)
    assert not any(_shown_as("12345.6789", v) for v in known)  # a number typed in by hand
    assert any(_shown_as(f"{narration.measured(t.stdout)['max_diff']:.1e}", v) for v in known)


# -- every narrated claim is backed by a check that would fail ------------------------------

# (a phrase the narration states, the start of the check that proves it in this run)
CLAIMS: dict[str, list[tuple[str, str]]] = {
    "graph_basics": [
        ("x's AccumulateGrad is ONE node", "x's AccumulateGrad is ONE node reached twice"),
        ("x.grad = 64", "x.grad == 2*(x*y+x)*(y+1) == 64"),
        ("y.grad = 32", "y.grad == 2*(x*y+x)*x == 32"),
        ("print(x.grad) prints tensor(64.)", "f'{x.grad}' prints '64.0'"),
    ],
    "backward_twice": [
        ("fails on its second backward", "the second backward raises 'Trying to backward"),
        ("but the graph is not deleted", "the graph is not deleted: out.grad_fn is still"),
        ("a failed backward is\npartial", "yet head_b.weight.grad was written before the failure"),
        ("It is neither quietly: it is an\nerror", "the second backward raises an error"),
        ("The encoder's .grad keeps exactly loss_a's", "the encoder got only loss_a's gradient"),
        ("can be walked twice", "backward twice through x + 1 works"),
        ("rejected outright by torch 2.x", "retain_variables is gone in torch 2.x"),
    ],
    "retain_graph": [
        ("A and B give the same encoder gradients", "A and B give the same encoder gradients"),
        ("backward() left the\nweight's version unchanged", "backward() never changes a parameter"),
        ("optimizer.step() bumped it", "optimizer.step() bumped the weight's version"),
        ("loss2.backward() ran", "loss2.backward() runs"),
        ("computed from the pre-step output", "loss2 is computed from the pre-step output"),
        ("exactly the gradient at the OLD weights", "loss2's gradient is exactly the gradient"),
        ("head_b.weight.grad stays None, not\nzero", "after loss_a.backward(), head_b.weight.grad"),
        ("left a parameter of ones whose .grad is\nNone", "SGD(weight_decay=0.1) leaves"),
    ],
    "retain_graph_loop": [
        ("bit-identical weights", "without retain_graph the loop runs and ends with bit-identical"),
        ("the extra memory is", "one graph saved (pred - y) and x"),
        ("not a growing pile", "retain_graph=True holds ONE graph"),
        ("each\nkept loss holds its whole graph", "every kept loss keeps its whole graph"),
        ("their saved tensors were freed", "without retain_graph, kept losses hold the nodes"),
    ],
    "higher_order": [
        ("dy/dx = 3x**2 = 27", "dy/dx == 3*x**2 == 27"),
        ("d2y/dx2 = 6x = 18", "d2y/dx2 == 6*x == 18"),
        ("autograd.grad sets retain_graph to the value of create_graph",
         "create_graph=True also kept y's graph"),
        ("y's own PowBackward0 is not in it", "x**3: the gradient's graph is all new"),
        ("had its saved x freed", "pow3: without retain_graph, pass 1 freed what y's own node"),
        ("its saved\nresult reads FREED", "exp: without retain_graph, pass 1 freed"),
        ("that ExpBackward0 is y's\n  own node", "exp: the gradient's graph contains y's own"),
        ("TanhBackward0, y's own node again", "tanh: the gradient's graph contains y's own"),
        ("it prints tensor([2.])", "print(x.grad) shows tensor([2.])"),
        ("the second call fails", "y.backward(retain_graph=True) after a plain backward fails"),
        ("x.grad.backward() fails because", "x.grad.backward() fails"),
        ("27 + 18 = 45, not 18", "x.grad.backward() ADDS 18 to x.grad"),
        ("reset x.grad to None first to read 18", "reset x.grad to None first"),
    ],
    "retain_grad": [
        ("y.grad ALREADY holds it", "y.grad is still None after AddBackward0 ran"),
        ("both give y.grad = 0.1", "no error, and y.grad == 0.1 everywhere"),
        ("y.grad is None with a UserWarning", "y.grad is None, with a UserWarning"),
        ("too late (None)", "y.grad is None: retain_grad only affects later"),
        ("fails on its second z.backward() WITH retain_grad", "the second z.backward() fails"),
        ("the sum of both branches", "y.grad is the SUM of both branches' gradients"),
        ("(bit-identical)", "x.grad is bit-identical with and without retain_grad"),
    ],
    "detach_no_grad": [
        ("None in its input slot", "the decoder's input slot in next_functions is None"),
        ("same data_ptr, no copy", "detach() shares storage with the original"),
        ("encoder.bias.grad is None (pass 1", "decoder.bias.grad is set, encoder.bias.grad"),
        ("This is a NEW decoder AddmmBackward0", "the second forward built a NEW decoder node"),
        ("out.grad_fn is None", "under no_grad the output has requires_grad False"),
        ("before any node runs", "backward on a no_grad result fails before any node runs"),
        ("no_grad() still allocates its outputs", "no_grad still allocates its output"),
        ("_is_view() is False", "detach() makes a new tensor object that is NOT a view"),
        ("shares the storage AND the version\ncounter", "detach() shares the version counter"),
    ],
    "accumulation": [
        ("x.grad reads", "x.grad reads 1, 3, 6"),
        ("accumulate to the full-batch gradient", "the accumulated micro-batch gradient equals"),
        ("twice as large", "without the / 2 the accumulated gradient is twice"),
    ],
    "inplace_error": [
        ('"is at version 1; expected version 0"', "backward fails naming the tensor's shape"),
        ("w.grad stays None", "w.grad stays None: the failing node sits"),
        ("the clamped element gets zero gradient", "backward succeeds; the clamped element"),
    ],
    "nan_where": [
        ("x.grad = [nan, nan, 0.25]", "x.grad is [nan, nan, 0.25]"),
        ("0 / (2 * sqrt(-1)) = nan", "0 / (2 * sqrt(-1)) and 0 / (2 * sqrt(0)) are both NaN"),
        ("gives x.grad = [0, 0, 0.25]", "same forward result, and x.grad is [0, 0, 0.25]"),
    ],
}


def _all_text(name: str) -> str:
    story = narration.load(demos.find(name, REPO / "demos").narration)
    return "\n".join([story.intro, *(s.text for s in story.stops), story.outro or ""])


@pytest.mark.parametrize("name", NAMES)
def test_every_narrated_claim_has_a_check_that_passed(name: str, traces: dict[str, Trace]) -> None:
    text = _all_text(name)
    checked = [line.strip()[len("checked: "):] for line in traces[name].stdout.splitlines()
               if line.strip().startswith("checked: ")]
    for claim, fact in CLAIMS[name]:
        assert claim in text, f"{name}: the narration no longer says {claim!r}"
        assert any(c.startswith(fact) for c in checked), f"{name}: no check {fact!r} for {claim!r}"


@pytest.mark.parametrize("name", NAMES)
def test_every_check_tests_something_the_run_computed(name: str) -> None:
    """A check whose condition is a constant, or names nothing, can never fail."""
    tree = ast.parse((REPO / "demos" / f"{name}.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id == "check"]
    assert len(calls) >= 3, name
    for call in calls:
        condition = call.args[1]
        names = [n for n in ast.walk(condition) if isinstance(n, ast.Name | ast.Attribute)]
        assert names and not isinstance(condition, ast.Constant), ast.unparse(call)


def test_backstep_demo_stays_callable_once_a_demo_module_is_imported() -> None:
    """Importing ``backstep.demo.catalog`` binds the package to ``backstep.demo``: the call a
    notebook makes must still work after it, in either import order."""
    code = ("import backstep.demo.catalog, backstep\n"
            "try:\n    backstep.demo('no_such_demo')\n"
            "except ValueError as exc:\n    print('graph_basics' in str(exc))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout == "True\n", result.stderr


def test_a_demo_scripts_first_output_is_not_torchs_missing_numpy_warning(tmp_path) -> None:
    """Issue 44: the first Console line of every demo was torch's cut "Failed to initialize
    NumPy" warning (the install brings no numpy)."""
    import importlib.util
    import os
    import subprocess
    import sys

    from backstep.commands.demo import NUMPY_WARNING, quiet_numpy

    assert quiet_numpy(None) == NUMPY_WARNING
    assert quiet_numpy("error::DeprecationWarning") == f"error::DeprecationWarning,{NUMPY_WARNING}"
    code = "import torch; print('ok')"
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "PYTHONWARNINGS": ""})
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "PYTHONWARNINGS": quiet_numpy(None)})
    if importlib.util.find_spec("numpy") is None:
        assert "Failed to initialize NumPy" in plain.stderr  # the test is not vacuous
    assert quiet.stdout == "ok\n" and "NumPy" not in quiet.stderr, quiet.stderr


def test_a_narration_that_cites_an_article_names_it() -> None:
    """Issue 44: graph_basics cited "the article" and never said which."""
    import re
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parent.parent / "demos").glob("*.toml")):
        text = path.read_text(encoding="utf-8")
        if re.search(r"\barticles?\b", text):  # some mention gives its title, in quotes
            assert re.search(r'\barticles?\b[^"]{0,60}"[^"]{20,}"', text), path.name
