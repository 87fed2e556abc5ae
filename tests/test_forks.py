"""Forked and spawned children of a debugged script (DataLoader workers, multiprocessing, a bare
``os.fork()``) run as they would without backstep: they never announce the script's exit, never
pause, never touch the parent's channel or trace, and compute the same gradients."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from backstep.events.form import expand
from tests.pty_session import Pty, alive
from tests.trace_runs import ENV, compare, kinds

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs fork")

LOADER = textwrap.dedent(
    """\
    import sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset


    def main() -> None:
        data = TensorDataset(torch.arange(12.0).reshape(6, 2), torch.arange(6.0))
        # spawned workers persist across epochs: two interpreter starts instead of four
        loader = DataLoader(data, batch_size=2, num_workers=2,
                            multiprocessing_context=sys.argv[1],
                            persistent_workers=sys.argv[1] == "spawn")
        w = torch.ones(2, requires_grad=True)
        for epoch in range(2):
            for x, y in loader:
                loss = ((x @ w - y) ** 2).mean()
                loss.backward()
                print(f"epoch {epoch} loss {loss.item():.4f} grad {w.grad.tolist()}", flush=True)
        print("done", w.grad.tolist())


    if __name__ == "__main__":
        main()
    """
)

# children that run a backward of their own: the fork's gradients are printed and compared
FORKS = textwrap.dedent(
    """\
    import multiprocessing, os, sys
    import torch


    def grad(k):
        x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        (x.sin() * k).sum().backward()
        return x.grad.tolist()


    if __name__ == "__main__":
        print("parent", grad(1.0), flush=True)
        if sys.argv[1] == "pool":
            with multiprocessing.get_context("fork").Pool(2) as pool:
                print("pool", pool.map(grad, [2.0, 3.0]), flush=True)
        else:
            pid = os.fork()
            if pid == 0:
                print("child", grad(5.0), flush=True)
                sys.exit(0)  # a normal end: atexit, flushes, the trace file's finalizer
            os.waitpid(pid, 0)
        print("parent again", grad(7.0), flush=True)
    """
)


def raw_has(ui: Pty, text: bytes, timeout: float = 30.0) -> bool:
    """Whether ``text`` reaches the terminal: the screen model misses some in-place redraws."""
    end = time.monotonic() + timeout
    while text not in ui.raw and time.monotonic() < end:
        ui.pump(0.1)
    return text in ui.raw


def loader_script(tmp_path: Path) -> str:
    (tmp_path / "loader.py").write_text(LOADER)
    return "loader.py"


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_trace_of_a_dataloader_loop_has_one_exit_and_plain_output(tmp_path: Path,
                                                                   method: str) -> None:
    result, events = compare(tmp_path, loader_script(tmp_path), method)
    assert result.returncode == 0 and result.stdout.count("epoch") == 6
    assert kinds(events).count("exit") == 1 and events[-1]["event"] == "exit"
    assert [e["pass"] for e in events if e["event"] == "pass_begin"] == [1, 2, 3, 4, 5, 6]
    assert not list(tmp_path.glob("run.*.jsonl")), "children recorded without --children"


@pytest.mark.parametrize("kind", ["pool", "fork"])
def test_children_that_run_backward_compute_as_without_backstep(tmp_path: Path,
                                                                 kind: str) -> None:
    (tmp_path / "forks.py").write_text(FORKS)
    result, events = compare(tmp_path, "forks.py", kind)  # stdout identical, gradients included
    assert "parent again" in result.stdout
    assert kinds(events).count("exit") == 1
    assert [e["pass"] for e in events if e["event"] == "pass_begin"] == [1, 2]


def test_trace_children_records_each_fork_to_its_own_file(tmp_path: Path) -> None:
    (tmp_path / "forks.py").write_text(FORKS)
    out = tmp_path / "run.jsonl"
    subprocess.run([sys.executable, "-m", "backstep", "trace", "--children", "-o", str(out),
                    "forks.py", "fork"], cwd=tmp_path, env=ENV, check=True, timeout=120,
                   capture_output=True)
    main = [expand(json.loads(line)) for line in out.read_text().splitlines()]
    assert kinds(main).count("exit") == 1
    children = list(tmp_path.glob("run.*.jsonl"))
    assert len(children) == 1
    pid = int(children[0].name.split(".")[1])
    events = [expand(json.loads(line)) for line in children[0].read_text().splitlines()]
    assert events[0]["event"] == "session" and events[0]["pid"] == pid
    assert events[0]["parent"] == main[0]["pid"]
    # the parent's plan (every pass in full, and its history line), as the parent's own file
    assert kinds(events) == ["session", "pass_begin", "memory", *["node"] * 4, "accumulate",
                             "memory_end", "pass_end", "leaves", "history", "output", "exit"]
    assert events[-2]["text"].startswith("child ")  # its print, in its own file
    assert events[1]["pass"] == 1 and events[-1]["code"] == 0


def test_trace_children_with_dataloader_workers(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    subprocess.run([sys.executable, "-m", "backstep", "trace", "--children", "-o", str(out),
                    loader_script(tmp_path), "fork"], cwd=tmp_path, env=ENV, check=True,
                   timeout=120, capture_output=True)
    children = sorted(tmp_path.glob("run.*.jsonl"))
    assert len(children) == 4  # two workers per epoch
    for child in children:
        events = [expand(json.loads(line)) for line in child.read_text().splitlines()]
        assert kinds(events) == ["session", "exit"]


ATTACHED = "import backstep\nbackstep.attach()  # at the top level: spawned workers import it\n"


@pytest.mark.parametrize("body, arg, passes", [(LOADER, "fork", 6), (LOADER, "spawn", 6),
                                               (FORKS, "pool", 2), (FORKS, "fork", 2)],
                         ids=["loader-fork", "loader-spawn", "pool", "bare-fork"])
def test_attach_trace_with_children(tmp_path: Path, body: str, arg: str, passes: int) -> None:
    (tmp_path / "plain.py").write_text(body)
    (tmp_path / "attached.py").write_text(ATTACHED + body)
    out = tmp_path / "attached.jsonl"
    plain = subprocess.run([sys.executable, "plain.py", arg], cwd=tmp_path,
                           env=ENV, capture_output=True, text=True, timeout=120)
    traced = subprocess.run([sys.executable, "attached.py", arg], cwd=tmp_path,
                            capture_output=True, env={**ENV, "BACKSTEP_TRACE": str(out)},
                            text=True, timeout=120)
    assert traced.returncode == plain.returncode == 0
    assert traced.stdout == plain.stdout and traced.stderr == plain.stderr
    events = [expand(json.loads(line)) for line in out.read_text().splitlines()]
    assert kinds(events).count("pass_begin") == passes
    assert kinds(events).count("session") == 1


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_run_steps_a_two_epoch_dataloader_loop_end_to_end(tmp_path: Path, method: str) -> None:
    """The loop a new user tries first: each ``c`` reaches the next of the 6 passes; the status
    never says the script exited while it runs; it ends once, with code 0."""
    ui = Pty(["-m", "backstep", "run", loader_script(tmp_path), method], tmp_path)
    try:
        for number in range(1, 7):
            screen = ui.expect(rf"pass {number} .*stopped: start of pass", timeout=90)
            assert "exited" not in screen and "[backstep]" not in screen, screen
            ui.press("c")
        screen = ui.expect(r"script exited with code 0", timeout=60)
        assert "pass 6" in screen and "[backstep]" not in screen
        ui.press("q")
        assert ui.wait() == 0
        # the script's last lines, printed whole once the UI has closed (in the small console
        # a redraw may send only the cells that changed from the line above)
        assert raw_has(ui, b"done [720.0, 822.0]")
    finally:
        ui.kill()


@pytest.mark.parametrize("kind", ["fork", "pool"])
def test_run_fork_that_runs_backward_never_pauses_and_q_ends_the_group(tmp_path: Path,
                                                                      kind: str) -> None:
    """Children compute and end unseen (only the parent's two passes stop); a fork left
    sleeping is gone after ``q``, even when the debuggee itself has already ended."""
    (tmp_path / "forks.py").write_text(FORKS + textwrap.dedent(
        """\
            if os.fork() == 0:
                print("sleeper", os.getpid(), flush=True)
                import time
                time.sleep(600)
                os._exit(0)
        """))
    ui = Pty(["-m", "backstep", "run", "forks.py", kind], tmp_path)
    try:
        for number in (1, 2):
            screen = ui.expect(rf"pass {number} .*stopped: start of pass", timeout=90)
            assert "exited" not in screen and "[backstep]" not in screen, screen
            ui.press("c")
        screen = ui.expect(r"script exited with code 0", timeout=90)
        assert "pass 2" in screen
        screen = ui.expect(r"sleeper \d+")
        expected = "child [2.70" if kind == "fork" else "pool [[1.08"
        assert expected in screen and "parent again" in screen
        sleeper = int(screen.split("sleeper ")[1].split()[0])
        assert alive(sleeper)
        ui.press("q")
        assert ui.wait() == 0
        assert not alive(sleeper), "a fork outlived the session"
    finally:
        ui.kill()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_attach_ui_steps_a_dataloader_loop_and_the_workers_stay_out(tmp_path: Path,
                                                                    method: str) -> None:
    (tmp_path / "attached.py").write_text(ATTACHED + LOADER)
    ui = Pty(["attached.py", method], tmp_path)
    try:
        for number in range(1, 7):
            screen = ui.expect(rf"pass {number} .*stopped: start of pass", timeout=90)
            assert "exited" not in screen and "[backstep]" not in screen, screen
            ui.press("c")
        ui.expect(r"script exited with code 0", timeout=60)
        ui.press("q")
        assert ui.wait(60) == 0
        ui.pump(0.5)
        assert "done [720.0, 822.0]" in ui.raw.decode(errors="replace")
    finally:
        ui.kill()


ABANDON = textwrap.dedent(
    """\
    import os, socket, sys, threading, time
    from backstep.process import transport

    ours, peer = socket.socketpair()
    channel = transport.Channel(ours)
    got = []
    reader = threading.Thread(target=lambda: got.append(channel.receive()), daemon=True)
    reader.start()
    time.sleep(0.3)  # the reader now holds its buffered file's lock, blocked in readline
    pid = os.fork()
    if pid == 0:
        channel.abandon()
        channel.close()  # a no-op now: no shutdown of the parent's connection
        del channel
        sys.exit(0)  # a normal end: finalizers run, the held lock must not be waited on
    _, status = os.waitpid(pid, 0)
    peer.sendall(b'{"event": "still here"}\\n')
    reader.join(10)
    print(os.waitstatus_to_exitcode(status), got)
    """
)


def test_a_fork_lets_go_of_the_channel_without_shutdown_or_deadlock(tmp_path: Path) -> None:
    (tmp_path / "abandon.py").write_text(ABANDON)
    result = subprocess.run([sys.executable, "abandon.py"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.stdout.strip() == "0 [{'event': 'still here'}]", result.stderr


# a fork that trains on its own: its third pass makes an Inf (sqrt's gradient at 0)
PLANNED = textwrap.dedent(
    """\
    import os
    import torch


    def train(passes, bad):
        w = torch.ones(4, requires_grad=True)
        for n in range(1, passes + 1):
            x = torch.full((4,), 0.0 if n == bad else 2.0)
            (w * x).sqrt().sum().backward()
        return w.grad.tolist()


    if __name__ == "__main__":
        print("parent", train(2, 0), flush=True)
        pid = os.fork()
        if pid == 0:
            print("child", train(5, 3), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        print("parent again", train(1, 0), flush=True)
    """
)


def test_trace_children_follow_the_plan(tmp_path: Path) -> None:
    """``--when``/``--after``/``--trips`` reached the parent only: a child's trace recorded
    every pass in full, without a history line. Each child follows the plan from its own
    first pass, with trips of its own."""
    (tmp_path / "planned.py").write_text(PLANNED)
    plain = subprocess.run([sys.executable, "planned.py"], cwd=tmp_path, env=ENV,
                           capture_output=True, text=True, timeout=120)
    out = tmp_path / "run.jsonl"
    traced = subprocess.run([sys.executable, "-m", "backstep", "trace", "--children", "-o",
                             str(out), "--when", "nonfinite", "--after", "1", "planned.py"],
                            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert (traced.returncode, traced.stdout) == (plain.returncode, plain.stdout)
    main = [expand(json.loads(line)) for line in out.read_text().splitlines()]
    assert [e["n"] for e in main if e["event"] == "history"] == [1, 2, 3]
    assert not [e for e in main if e["event"] in ("pass_begin", "trip")]  # nothing tripped
    (child,) = tmp_path.glob("run.*.jsonl")
    events = [expand(json.loads(line)) for line in child.read_text().splitlines()]
    assert [e["n"] for e in events if e["event"] == "history"] == [1, 2, 3, 4, 5]
    (trip,) = [e for e in events if e["event"] == "trip"]
    assert (trip["n"], trip["trip"], trip["reason"], trip["name"]) == (
        3, 1, "nonfinite", "SqrtBackward0")
    # the tripping pass from its birth node on, and the one after it: no others in full
    assert sorted({e["pass"] for e in events if e["event"] == "pass_begin"}) == [3, 4]
    assert events[-1]["event"] == "exit" and events[-1]["code"] == 0
