"""The script's output in a trace: ``backstep trace`` records it as ``output`` events without
changing a byte of what the script prints, and ``backstep show`` plays it in the console up to
the step shown."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from backstep.events.form import expand
from backstep.traces.index import TraceIndex
from backstep.traces.output import Tee, _Budget, recording
from backstep.tui.app import BackstepApp
from backstep.tui.panels.console import ConsolePanel
from tests.replay_traces import ENV
from tests.tui_fixtures import replay_app
from tests.tui_pilot import pilot

SCRIPT = """\
import sys
import torch

print("héllo before", "any pass")
w = torch.ones(2, requires_grad=True)
for epoch in range(2):
    (w * 3).sum().backward()
    print(f"epoch {epoch} done", flush=True)
    sys.stderr.write("warn: " + str(epoch) + "\\n")
print("partial", end="")
sys.stdout.write(" line\\n" + "x" * 10)
print()
sys.exit(3)
"""


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess,
                                                             subprocess.CompletedProcess]:
    d = tmp_path_factory.mktemp("output")
    script = d / "prints.py"
    script.write_text(SCRIPT, encoding="utf-8")
    out = d / "prints.jsonl"
    plain = subprocess.run([sys.executable, str(script)], cwd=d, env=ENV, capture_output=True,
                           timeout=120)
    trace = subprocess.run([sys.executable, "-m", "backstep", "trace", "-o", str(out),
                            str(script)], cwd=d, env=ENV, capture_output=True, timeout=180)
    return out, plain, trace


def test_output_bytes_are_unchanged_under_trace(traced) -> None:
    _, plain, trace = traced
    assert trace.stdout == plain.stdout and b"h\xc3\xa9llo" in plain.stdout
    assert trace.stderr == plain.stderr
    assert trace.returncode == plain.returncode == 3


def test_output_is_recorded_in_order_with_the_passes(traced) -> None:
    path, plain, _ = traced
    events = [expand(json.loads(line)) for line in path.read_text().splitlines()]
    order = [(e["event"], e.get("pass"), e.get("text")) for e in events
             if e["event"] in ("pass_begin", "output", "exit")]
    assert order[:4] == [("output", None, "héllo before any pass\n"), ("pass_begin", 1, None),
                         ("output", None, "epoch 0 done\n"), ("output", None, "warn: 0\n")]
    assert order[-1][0] == "exit"
    stdout = "".join(e["text"] for e in events
                     if e["event"] == "output" and e["stream"] == "stdout")
    assert stdout.encode() == plain.stdout
    with TraceIndex(path) as index:
        assert index.note() is None and index.numbers() == [1, 2]
        assert [s for s, _ in index.output(10)] == ["stdout", "stdout", "stderr", "stdout",
                                                    "stderr", "stdout", "stdout"]


def test_the_tee_keeps_to_its_cap_and_says_so() -> None:
    stream, events = io.StringIO(), []
    tee = Tee(stream, "stdout", events.append, _Budget(10))
    for _ in range(4):
        tee.write("abcdef\n")
    tee.settle()
    assert stream.getvalue() == "abcdef\n" * 4  # the script's own stream gets everything
    assert [e["text"] for e in events] == ["abcdef\n", "abc"]  # the cut marked once
    assert [e.get("truncated") for e in events] == [None, True]
    full = Tee(io.StringIO(), "stderr", events.append, _Budget(7))
    full.write("abcdef\n")  # fits exactly: the next write is the one cut, and says so
    full.write("more\n")
    full.write("more\n")
    assert events[2:] == [{"event": "output", "stream": "stderr", "text": "abcdef\n"},
                          {"event": "output", "stream": "stderr", "text": "",
                           "truncated": True}]


def test_recording_puts_the_streams_back() -> None:
    before = sys.stdout, sys.stderr
    events: list[dict] = []
    with recording(events.append):
        assert isinstance(sys.stdout, Tee)
        print("seen")
    assert (sys.stdout, sys.stderr) == before
    assert events == [{"event": "output", "stream": "stdout", "text": "seen\n"}]


def console(app: BackstepApp) -> str:
    return app.query_one(ConsolePanel).text


@pilot
async def test_show_plays_the_output_up_to_the_step_shown(traced) -> None:
    path = traced[0]
    with TraceIndex(path) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            text = console(app)
            assert "héllo before any pass" in text and "epoch 0 done" not in text
            await pilot.press("right_square_bracket")  # pass 2: the first epoch is over
            await pilot.pause()
            text = console(app)
            assert "epoch 0 done" in text and "warn: 0" in text and "epoch 1" not in text
            await pilot.press("left_square_bracket")  # back to pass 1: redrawn without it
            await pilot.pause()
            text = console(app)
            assert "héllo before any pass" in text and "epoch 0 done" not in text
            assert "replaying" in text  # backstep's own lines stay
            await pilot.press("right_square_bracket", "n", "n", "n")  # pass 2's end: all
            await pilot.pause()
            text = console(app)
            assert "epoch 1 done" in text and "partial line" in text and "x" * 10 in text


def test_a_line_that_never_ends_is_recorded_in_pieces() -> None:
    from backstep.traces.output import PARTIAL

    events: list[dict] = []
    tee = Tee(io.StringIO(), "stderr", events.append, _Budget(10 * PARTIAL))
    for _ in range(3 * PARTIAL // 100):
        tee.write("\r" + "#" * 99)  # a progress bar that never flushes nor ends its line
    assert len(events) == 2 and all(len(e["text"]) >= PARTIAL for e in events)


def test_closing_the_tee_records_the_partial_line_then_closes_the_stream() -> None:
    real = io.StringIO()
    events: list[dict] = []
    tee = Tee(real, "stdout", events.append, _Budget(100))
    with tee:
        tee.write("no newline yet")
    assert real.closed
    assert [e["text"] for e in events] == ["no newline yet"]
    tee.close()  # closing again is a no-op, as for the real stream
