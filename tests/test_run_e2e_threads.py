"""End to end with two threads that each call backward: ``backstep run`` in a pseudo-terminal
steps both passes in turn with n, c and q, and ``backstep trace`` keeps each pass's events apart."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from backstep.events.form import expand
from tests.pty_session import Pty, alive, children_of, pytestmark  # noqa: F401 - same skips

TWO_THREADS = textwrap.dedent(
    """\
    import threading
    import torch

    def work(seed, out):
        g = torch.Generator().manual_seed(seed)
        w1 = torch.randn(8, 8, generator=g, requires_grad=True)
        w2 = torch.randn(8, 8, generator=g, requires_grad=True)
        x = torch.randn(4, 8, generator=g)
        torch.tanh(torch.tanh(x @ w1) @ w2).sum().backward()
        out[seed] = (w1.grad.sum().item(), w2.grad.sum().item())

    out = {}
    threads = [threading.Thread(target=work, args=(s, out), name=f"worker-{s}") for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in sorted(out):
        print("grads", s, repr(out[s]))
    """
)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "two.py"
    path.write_text(TWO_THREADS)
    return path


def plain_output(script: Path) -> str:
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=script.parent).stdout


def shown_worker(screen: str) -> str:
    match = re.search(r"stopped: .* on (worker-\d) \(cpu\)", screen)
    assert match, screen
    return match.group(1)


def test_two_threads_step_in_turn_and_the_script_ends_as_plain(script: Path) -> None:
    expected = plain_output(script)
    assert expected.count("grads") == 2
    ui = Pty(["-m", "backstep", "run", script.name], script.parent)
    try:
        # both threads reach their first node: one is shown, the other waits in line
        screen = ui.expect(r"stopped: start of pass before SumBackward0 #\d+ on worker-\d.*"
                           r"1 pass waiting", timeout=90)
        first = shown_worker(screen)
        ui.expect(r"1 pass waiting \(#\d on worker-\d\)")  # (the screen may be mid-redraw)
        ui.expect(r"#1 (stopped|waiting) · #2 (stopped|waiting)")
        ui.press("n")  # the shown pass steps; the waiting one is shown, the stepped one waits
        screen = ui.expect(rf"start of pass before SumBackward0 #\d+ on (?!{first})worker-\d \(cpu\)")
        second = shown_worker(screen)
        assert second != first
        screen = ui.expect(r"1 pass waiting")
        ui.press("c")  # the second pass runs to its end; the first one's next stop is shown
        screen = ui.expect(rf"stopped: step before TanhBackward0 #\d+ on {first}")
        ui.press("c")
        screen = ui.expect(r"script exited with code 0")
        for line in expected.splitlines():
            ui.expect(re.escape(line))  # the script's own prints, unchanged
        ui.press("q")
        assert ui.wait() == 0
    finally:
        ui.kill()


def test_quit_with_two_passes_paused_releases_both_and_leaves_no_orphan(script: Path) -> None:
    ui = Pty(["-m", "backstep", "run", script.name], script.parent)
    try:
        ui.expect(r"1 pass waiting", timeout=90)
        debuggees = children_of(ui.pid)
        ui.press("q")
        assert ui.wait() is not None
        time.sleep(0.2)
        assert debuggees and not any(alive(pid) for pid in debuggees)
    finally:
        ui.kill()


def test_trace_of_two_threads_keeps_each_pass_apart(script: Path) -> None:
    out = script.parent / "run.jsonl"
    result = subprocess.run([sys.executable, "-m", "backstep", "trace", "-o", str(out),
                             script.name], capture_output=True, text=True, timeout=120,
                            cwd=script.parent)
    assert result.returncode == 0 and result.stdout == plain_output(script)
    events = [expand(json.loads(line)) for line in out.read_text().splitlines()]
    begins = [k for k, e in enumerate(events) if e["event"] == "pass_begin"]
    assert len(begins) == 2
    threads = set()
    for k in begins:
        number, nodes = events[k]["pass"], events[k]["nodes"]
        threads.add(events[k]["thread"])
        mine = [j for j, e in enumerate(events) if e.get("pass") == number
                and e["event"] in ("node", "accumulate", "pass_end")]
        (end,) = [j for j in mine if events[j]["event"] == "pass_end"]
        steps = [events[j]["step"] for j in mine if events[j]["event"] == "node"]
        assert steps == list(range(1, len(nodes) + 1))
        assert all(k < j <= end for j in mine)
    assert threads == {"worker-1", "worker-2"}
