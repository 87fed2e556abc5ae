"""``trace --when SPEC --tensors`` (engine/trip_tensors): each trip's node tensors in a file
beside the trace, equal to what plain PyTorch computes at that node; the script's output and
exit code as plain python's; ``show`` names the file and its console offers it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from backstep.engine.trip_tensors import folder_beside
from tests.tui_pilot import pilot

# a NaN in one element of the model's output at steps BAD (one sample's loss term): a few
# hundred steps in; the optimizer skips a step whose gradients are not finite, as AMP does
SCRIPT = textwrap.dedent("""\
    import sys
    import torch

    def model_and_data():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                                    torch.nn.Linear(8, 1))
        return model, torch.randn(16, 4), torch.randn(16, 1)

    def forward(model, x, y, step, bad):
        out = model(x)
        if step in bad:
            mask = torch.ones(16, 1)
            mask[5] = float("nan")
            out = out * mask
        return ((out - y) ** 2).mean()

    if __name__ == "__main__":
        model, x, y = model_and_data()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        steps, bad = int(sys.argv[1]), {int(a) for a in sys.argv[2:]}
        for step in range(steps):
            opt.zero_grad()
            loss = forward(model, x, y, step, bad)
            loss.backward()
            if all(torch.isfinite(p.grad).all() for p in model.parameters()):
                opt.step()
            else:
                print("skipped", step, file=sys.stderr)
            if step % 100 == 0:
                print(step, loss.item())
        print("end", [p.detach().sum().item() for p in model.parameters()])
        sys.exit(3)
""")
STEPS, BAD = 330, (300, 310)


def _run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600)


def _trips(trace: Path) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    return [e for e in events if e["event"] == "trip"]


def _plain_at(tmp_path: Path, steps: int, bad: set[int], node_name: str) -> dict[str, Any]:
    """What plain PyTorch computes at the first ``node_name`` node of pass ``steps + 1``:
    the script's own model and loop, run here without backstep, the node's hooks reading it."""
    spec = importlib.util.spec_from_file_location("trip_tensors_train", tmp_path / "train.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)  # its __name__ is not __main__: only the functions
    model, x, y = train.model_and_data()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        opt.zero_grad()
        train.forward(model, x, y, step, bad).backward()
        if all(torch.isfinite(p.grad).all() for p in model.parameters()):
            opt.step()
    opt.zero_grad()
    loss = train.forward(model, x, y, steps, bad)
    seen: dict[str, Any] = {}
    stack, found = [loss.grad_fn], None
    while stack and found is None:  # the graph's first node of that type, walking from root
        node = stack.pop(0)
        if type(node).__name__ == node_name:
            found = node
        stack.extend(n for n, _ in node.next_functions if n is not None)
    assert found is not None

    def after(grad_inputs: tuple, grad_outputs: tuple) -> None:
        seen["grad_inputs"] = [g.clone() if g is not None else None for g in grad_inputs]
        seen["grad_outputs"] = [g.clone() for g in grad_outputs]
        seen["saved"] = {a[len("_saved_"):]: getattr(found, a).clone() for a in dir(found)
                         if a.startswith("_saved_")
                         and isinstance(getattr(found, a), torch.Tensor)}

    found.register_hook(after)
    loss.backward()
    return seen


def _same(a: list | dict, b: list | dict) -> None:
    items = a.items() if isinstance(a, dict) else enumerate(a)
    assert len(a) == len(b)
    for k, value in items:
        if value is None:
            assert b[k] is None
        else:
            torch.testing.assert_close(value, b[k], rtol=0, atol=0, equal_nan=True)


def test_folder_beside_the_trace() -> None:
    assert folder_beside("run.jsonl") == "run.tensors"
    assert folder_beside("out/run.jsonl.gz") == "out/run.tensors"
    assert folder_beside("out/run.rank1.jsonl") == "out/run.rank1.tensors"
    assert folder_beside("trace") == "trace.tensors"


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    tmp_path = tmp_path_factory.mktemp("trip_tensors")
    (tmp_path / "train.py").write_text(SCRIPT)
    args = ["train.py", str(STEPS), *map(str, BAD)]
    plain = _run(tmp_path, *args)
    traced = _run(tmp_path, "-m", "backstep", "trace", "-o", "run.jsonl", "--when",
                  "nonfinite", "--tensors", *args)
    return tmp_path, plain, traced


def test_a_nan_hundreds_of_passes_in_saves_its_tensors(nan_run: tuple[Path, Any, Any]) -> None:
    """The NaN's passes trip; each trip's file loads with weights_only=True and holds the
    tripping node's gradients and saved tensors as plain PyTorch computes them there."""
    tmp_path, plain, traced = nan_run
    assert (traced.returncode, traced.stdout, traced.stderr) == (
        plain.returncode, plain.stdout, plain.stderr)
    assert plain.returncode == 3 and "skipped 300" in plain.stderr
    trips = _trips(tmp_path / "run.jsonl")
    assert [(t["n"], t["trip"]) for t in trips] == [(301, 1), (311, 2)]
    assert [t["tensors"] for t in trips] == ["run.tensors/trip-1-pass-301.pt",
                                             "run.tensors/trip-2-pass-311.pt"]
    for trip, bad in zip(trips, BAD, strict=True):
        saved = torch.load(tmp_path / trip["tensors"], weights_only=True)
        assert type(saved) is dict
        assert (saved["pass"], saved["trip"], saved["id"], saved["name"], saved["reason"]) == (
            trip["n"], trip["trip"], trip["id"], trip["name"], "nonfinite")
        assert saved["name"] == "PowBackward0"  # the first node to produce the NaN
        want = _plain_at(tmp_path, bad, set(BAD), "PowBackward0")
        _same(saved["grad_outputs"], want["grad_outputs"])
        _same(saved["grad_inputs"], want["grad_inputs"])
        tensors = {k: v for k, v in saved["saved"].items() if isinstance(v, torch.Tensor)}
        assert set(tensors) == set(want["saved"]) == {"self"} and saved["unreadable"] == {}
        _same(tensors, want["saved"])
        assert saved["saved"]["exponent"] == 2  # a saved scalar, as plain data
        assert torch.isnan(saved["grad_inputs"][0]).sum() == 1  # the one bad element
        assert all(g.device.type == "cpu" and not g.requires_grad
                   for g in saved["grad_outputs"])


def test_a_node_spec_trips_before_the_node_and_still_saves_what_it_produced(
        tmp_path: Path) -> None:
    """A node spec trips before its node runs: the file gets the outgoing gradients once it
    has (a post-hook of its own, removed with the pass's)."""
    (tmp_path / "train.py").write_text(SCRIPT)
    args = ["train.py", "4"]
    plain = _run(tmp_path, *args)
    traced = _run(tmp_path, "-m", "backstep", "trace", "-o", "run.jsonl", "--when",
                  "TanhBackward0", "--trips", "2", "--after", "0", "--tensors", *args)
    assert (traced.returncode, traced.stdout, traced.stderr) == (
        plain.returncode, plain.stdout, plain.stderr)
    trips = _trips(tmp_path / "run.jsonl")
    assert [(t["n"], t["reason"]) for t in trips] == [(1, "breakpoint"), (2, "breakpoint")]
    for trip in trips:
        saved = torch.load(tmp_path / trip["tensors"], weights_only=True)
        want = _plain_at(tmp_path, trip["n"] - 1, set(), "TanhBackward0")
        _same(saved["grad_outputs"], want["grad_outputs"])
        _same(saved["grad_inputs"], want["grad_inputs"])
        _same({k: v for k, v in saved["saved"].items() if isinstance(v, torch.Tensor)},
              want["saved"])


def test_a_folder_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "run.tensors").write_text("in the way\n")  # a file where the folder goes
    args = ["train.py", "6", "2", "4"]
    plain = _run(tmp_path, *args)
    traced = _run(tmp_path, "-m", "backstep", "trace", "-o", "run.jsonl", "--when",
                  "nonfinite", "--tensors", *args)
    assert (traced.returncode, traced.stdout) == (plain.returncode, plain.stdout)
    extra = [line for line in traced.stderr.splitlines()
             if line not in plain.stderr.splitlines()]
    assert len(extra) == 1 and extra[0].startswith("backstep: --tensors: cannot write ")
    assert "tracing goes on" in extra[0]
    trips = _trips(tmp_path / "run.jsonl")
    assert [t["n"] for t in trips] == [3, 5] and [t["tensors"] for t in trips] == [None, None]


@pytest.mark.parametrize("options", [["--tensors"], ["--tensors", "--every", "3"]])
def test_tensors_without_when_is_one_line_and_exit_2(tmp_path: Path,
                                                     options: list[str]) -> None:
    (tmp_path / "train.py").write_text("print('ran')\n")
    result = _run(tmp_path, "-m", "backstep", "trace", "-o", "t.jsonl", *options, "train.py")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "backstep trace: --tensors saves the tensors of a --when trip: give --when SPEC too"]
    assert not (tmp_path / "t.jsonl").exists()


def test_attach_takes_tensors(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "attached.py").write_text(textwrap.dedent("""\
        import runpy, sys
        import backstep
        try:
            backstep.attach(trace="x.jsonl", tensors=True)
        except ValueError as exc:
            print("refused:", exc)
        backstep.attach(trace="run.jsonl", when=["nonfinite"], tensors=True)
        sys.argv = ["train.py", "5", "2"]
        runpy.run_path("train.py", run_name="__main__")
    """))
    result = _run(tmp_path, "attached.py")
    assert result.returncode == 3
    assert result.stdout.startswith("refused: --tensors saves the tensors of a --when trip")
    trips = _trips(tmp_path / "run.jsonl")
    assert [t["tensors"] for t in trips] == ["run.tensors/trip-1-pass-3.pt"]
    saved = torch.load(tmp_path / "run.tensors" / "trip-1-pass-3.pt", weights_only=True)
    assert saved["name"] == "PowBackward0" and os.path.getsize(
        tmp_path / "run.tensors" / "trip-1-pass-3.pt") > 0


def _console_text(app: Any) -> str:
    from backstep.tui.panels.console import ConsolePanel

    return "\n".join(app.query_one(ConsolePanel).log_view.lines)


@pilot
async def test_show_names_the_file_and_its_console_loads_it(
        nan_run: tuple[Path, Any, Any]) -> None:
    """At a tripped pass ``show`` says where the trip's tensors are, once, in the console; the
    status line marks the trip; ``trip_tensors`` in its console is the file, for torch.load."""
    from backstep.traces.index import TraceIndex
    from backstep.tui.panels.console import ConsolePanel
    from tests.tui_fixtures import replay_app

    tmp_path = nan_run[0]
    path = str(tmp_path / "run.tensors" / "trip-1-pass-301.pt")
    with TraceIndex(tmp_path / "run.jsonl") as index:
        app = replay_app(index)
        async with app.run_test(size=(160, 42)) as pilot:
            await pilot.pause()  # the trace holds passes 301, 302, 311, 312 in full: at 301
            assert app.snapshot.pass_.number == 301
            assert " trip 1" in str(app.query_one("#status").render())
            text = _console_text(app)
            assert "[backstep] pass 301: --when trip 1 at PowBackward0 #" in text
            assert f"[backstep] its tensors: {path}\n" in text
            assert "[backstep] in the console: import torch; t = torch.load(trip_tensors, " \
                "weights_only=True), then t['grad_inputs']" in text
            line = app.query_one(ConsolePanel).expression_line
            want = "('PowBackward0', 301, 1)"
            for source in ("import torch; t = torch.load(trip_tensors, weights_only=True)",
                           "t['name'], t['pass'], int(t['grad_inputs'][0].isnan().sum())"):
                if not line.display:
                    await pilot.press("colon")
                line.value = source
                await pilot.press("enter")
                for _ in range(500):
                    await pilot.pause(0.02)
                    if source in _console_text(app) and not app.evaluating:
                        break
            for _ in range(200):
                if want in _console_text(app):
                    break
                await pilot.pause(0.02)
            assert want in _console_text(app), _console_text(app)
            app.driver.replay.jump(302)  # the pass after: recorded in full, no trip of its own
            app.driver.post()
            await pilot.pause()
            assert " trip " not in str(app.query_one("#status").render())
            assert app.driver.trip_names(302) == {"trip_tensors": None}
            app.driver.replay.jump(311)
            app.driver.post()
            await pilot.pause()
            assert " trip 2" in str(app.query_one("#status").render())
            assert "trip-2-pass-311.pt\n" in _console_text(app)
            assert app.driver.trip_names(301) == {"trip_tensors": path}


def test_a_trace_that_names_a_file_outside_its_folder_is_not_followed(tmp_path: Path) -> None:
    from backstep.traces.trips import tensors_path, trip_words

    (tmp_path / "run.tensors").mkdir()
    (tmp_path / "run.tensors" / "trip-1-pass-3.pt").write_bytes(b"x")
    trace = str(tmp_path / "run.jsonl")
    assert tensors_path(trace, "run.tensors/trip-1-pass-3.pt") == (
        str(tmp_path / "run.tensors" / "trip-1-pass-3.pt"), None)
    for hostile in ("/etc/passwd", "../x.pt", "run.tensors/../../x.pt"):
        assert tensors_path(trace, hostile)[0] is None
    assert tensors_path(trace, None) == (None, None)
    words = trip_words({"n": 4, "trip": 2, "id": 7, "name": "MulBackward0", "detail": "NaN",
                        "tensors": "run.tensors/trip-2-pass-4.pt"}, trace)
    assert words[0] == "pass 4: --when trip 2 at MulBackward0 #7 (NaN)"
    assert words[1].startswith("its tensors file ") and words[1].endswith(
        "is not there (moved or deleted?)") and len(words) == 2
    words = trip_words({"n": 4, "trip": 2, "id": 7, "tensors": "/etc/passwd"}, trace)
    assert words == ["pass 4: --when trip 2 at ? #7",
                     "its tensors file is outside the trace's folder (not read)"]


def test_a_gzip_trace_of_a_script_that_changes_folder(tmp_path: Path) -> None:
    """The folder goes beside the trace wherever the script goes (``os.chdir``), for a gzip
    trace too, and ``show``'s index finds the file from the trace it reads."""
    from backstep.traces.index import TraceIndex
    from backstep.traces.trips import tensors_path

    (tmp_path / "train.py").write_text(SCRIPT.replace(
        'if __name__ == "__main__":\n', 'if __name__ == "__main__":\n'
        '    import os\n    os.makedirs("elsewhere", exist_ok=True)\n    os.chdir("elsewhere")\n'))
    args = ["train.py", "4", "2"]
    plain = _run(tmp_path, *args)
    traced = _run(tmp_path, "-m", "backstep", "trace", "-o", "run.jsonl.gz", "--when",
                  "nonfinite", "--tensors", *args)
    assert (traced.returncode, traced.stdout, traced.stderr) == (
        plain.returncode, plain.stdout, plain.stderr)
    assert sorted(os.listdir(tmp_path / "run.tensors")) == ["trip-1-pass-3.pt"]
    assert not (tmp_path / "elsewhere" / "run.tensors").exists()
    with TraceIndex(tmp_path / "run.jsonl.gz") as index:
        assert list(index.trips) == [3]
        assert tensors_path(index.path, index.trips[3]["tensors"]) == (
            str(tmp_path / "run.tensors" / "trip-1-pass-3.pt"), None)


def test_a_torch_func_transform_s_tensors_are_named_unreadable(tmp_path: Path) -> None:
    """Inside ``torch.func.grad`` the tensors wrap others and have no storage torch.save can
    write: each is named unreadable with why, the file is still written, and the next trip's
    (an ordinary pass) has its values. Before, one such tensor lost the file and every later
    trip's."""
    (tmp_path / "func.py").write_text(textwrap.dedent("""\
        import torch
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 2)
        x = torch.randn(4, 3)
        def loss(x):
            return torch.tanh(lin(x)).sum()
        g = torch.func.grad(loss)(x)
        print(g.sum().item())
        loss(x).backward()
        print(lin.weight.grad.sum().item())
    """))
    plain = _run(tmp_path, "func.py")
    traced = _run(tmp_path, "-m", "backstep", "trace", "-o", "run.jsonl", "--when",
                  "TanhBackward0", "--after", "0", "--tensors", "func.py")
    assert (traced.returncode, traced.stdout, traced.stderr) == (
        plain.returncode, plain.stdout, plain.stderr)
    trips = _trips(tmp_path / "run.jsonl")
    assert [t["tensors"] for t in trips] == ["run.tensors/trip-1-pass-1.pt",
                                             "run.tensors/trip-2-pass-2.pt"]
    wrapped = torch.load(tmp_path / trips[0]["tensors"], weights_only=True)
    assert wrapped["grad_outputs"] == [None] and wrapped["grad_inputs"] == [None]
    assert set(wrapped["unreadable"]) == {"grad_outputs[0]", "grad_inputs[0]", "result"}
    assert all("no storage of its own" in why for why in wrapped["unreadable"].values())
    ordinary = torch.load(tmp_path / trips[1]["tensors"], weights_only=True)
    assert ordinary["unreadable"] == {} and ordinary["grad_outputs"][0].shape == (4, 2)
    torch.testing.assert_close(ordinary["grad_outputs"][0], torch.ones(4, 2))
