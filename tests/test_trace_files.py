"""Trace files that change or are not files: a trace cut while open, pipes and FIFOs, lines
longer than the index's read block. Never a signal, a hang or an untrue message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import pytest

from backstep.traces import filebytes, long_output
from backstep.traces.index import TraceIndex
from backstep.traces.passes import TraceError
from tests.synthetic_traces import write_transformer_trace
from tests.tui_fixtures import replay_app
from tests.tui_pilot import pilot

CUT_WHILE_OPEN = """\
    import os, sys
    from backstep.traces.index import TraceIndex
    path = sys.argv[1]
    index = TraceIndex(path, partial=True)
    first = index.numbers()[0]
    os.truncate(path, os.path.getsize(path) // 3)  # as `backstep trace -o same.jsonl` does
    index.scan()
    read = [len(index.read(n).events) for n in index.numbers()]
    print(index.cut, len(read), sum(read) > 0, index.note())
"""


def test_a_trace_cut_while_open_is_read_without_a_signal(tmp_path: Path) -> None:
    """The index used to map the file: a page past the new end killed the reader (SIGBUS)."""
    trace = tmp_path / "same.jsonl"
    write_transformer_trace(trace, passes=20, nodes=300)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(CUT_WHILE_OPEN), str(trace)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    cut, passes, some, note = done.stdout.strip().split(" ", 3)
    assert (cut, some) == ("True", "True") and 0 < int(passes) < 20
    assert note.startswith("same.jsonl: ") and "the file was cut to " in note
    assert "while open" in note


def test_a_pass_read_after_the_cut_keeps_what_it_has(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    write_transformer_trace(trace, passes=4, nodes=50)
    with TraceIndex(trace) as index:
        whole = index.read(1).events
        os.truncate(trace, index.pass_lines(1).ends[5])  # its begin and first 5 nodes
        kept = index.read(4).events + index.read(1).events
        assert index.cut and "the file was cut to " in (index.note() or "")
        assert len(kept) == 5 and kept == whole[:5]


@pytest.mark.parametrize("block", [97, 300, 4096])
def test_lines_longer_than_a_block_or_across_blocks_index_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    trace = tmp_path / "t.jsonl"
    write_transformer_trace(trace, passes=3, nodes=40, norms=True)
    with trace.open("a") as handle:
        handle.write(json.dumps({"event": "output", "stream": "stdout", "text": "x" * 5000})
                     + "\n" + json.dumps({"event": "exit", "code": 0}))  # no final newline

    def everything() -> tuple:
        with TraceIndex(trace) as index:
            return (index.numbers(), index.lines, index.exit, index.output(5), index.note(),
                    [index.read(n) for n in index.numbers()])

    expected = everything()
    monkeypatch.setattr(filebytes, "BLOCK", block)
    assert everything() == expected


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    for command in (["show", str(fifo)], ["export", str(fifo)],
                    ["diff", str(fifo), str(fifo)]):
        done = subprocess.run([sys.executable, "-m", "backstep", *command],
                              capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 2
        assert done.stderr.endswith(f"{fifo} is a pipe: backstep reads trace files; save it to "
                                    "a file first\n"), done.stderr
        assert done.stderr.count("\n") == 1


def test_a_piped_stdin_is_named_a_pipe_not_an_empty_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    write_transformer_trace(trace, passes=1, nodes=5)
    done = subprocess.run([sys.executable, "-m", "backstep", "export", "/dev/stdin"],
                          input=trace.read_text(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "is a pipe" in done.stderr and "empty" not in done.stderr
    with trace.open() as handle:  # a file redirected to stdin is a file
        done = subprocess.run([sys.executable, "-m", "backstep", "export", "/dev/stdin"],
                              stdin=handle, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("digraph")


def test_a_device_is_refused() -> None:
    with pytest.raises(TraceError, match="is a device"):
        TraceIndex("/dev/null")


@pilot
async def test_show_says_in_one_notification_that_the_trace_was_cut(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    write_transformer_trace(trace, passes=4, nodes=30)
    with TraceIndex(trace) as index:
        app = replay_app(index, settle_memory=False)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            os.truncate(trace, index.passes[2].first)
            for key in "]]]":
                await pilot.press(key)
                await pilot.pause()
            told = [n.message for n in app._notifications if "cut" in n.message]
            assert len(told) == 1 and told[0].startswith("t.jsonl: the file was cut to ")


def with_output(path: Path, text: str, **extra: object) -> Path:
    write_transformer_trace(path, passes=1, nodes=5)
    with path.open("a") as handle:
        handle.write(json.dumps({"event": "output", "stream": "stderr", "text": text, **extra})
                     + "\n")
    return path


def test_one_huge_output_event_shows_its_two_ends_without_being_read_whole(
    tmp_path: Path,
) -> None:
    """A 40 MB event (escapes and non-ASCII throughout): only its ends are read and decoded."""
    text = "".join(f'line {i} é "quoted" \\ ü\n' for i in range(1_400_000))
    trace = with_output(tmp_path / "t.jsonl", text, truncated=True)
    with TraceIndex(trace) as index:
        tracemalloc.start()
        [(stream, shown)] = index.output(1)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert stream == "stderr" and peak < 4 * long_output.SHOWN * 6 * 4
    head, hidden, tail = shown.split("\n… ")[0], shown.split("\n… ")[1], shown
    assert head == text[:long_output.SHOWN]
    assert tail.endswith(text[-long_output.SHOWN:] + "\n[output truncated]\n")
    assert hidden.startswith("about ") and " bytes not shown …\n" in hidden
    assert len(shown) < 3 * long_output.SHOWN


def test_a_long_output_event_shows_its_two_ends(tmp_path: Path) -> None:
    text = "".join(f"{i}\n" for i in range(20_000))
    with TraceIndex(with_output(tmp_path / "t.jsonl", text)) as index:
        [(_, shown)] = index.output(1)
    hidden = len(text) - 2 * long_output.SHOWN
    assert shown == (f"{text[:long_output.SHOWN]}\n… {hidden:,} characters not shown …\n"
                     f"{text[-long_output.SHOWN:]}")


def test_a_huge_line_that_is_not_an_output_event_as_written_is_named(tmp_path: Path) -> None:
    trace = with_output(tmp_path / "t.jsonl", "x" * (2 << 20), extra="after the text")
    with TraceIndex(trace) as index:
        assert index.output(1) == [("stdout", f"[an output event of "
                                    f"{trace.stat().st_size - index.output_starts[0]:,} "
                                    "bytes, not shown]\n")]


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")
def test_show_outlives_its_trace_being_cut_and_gives_the_terminal_back(tmp_path: Path) -> None:
    """As ``backstep trace -o same.jsonl`` does to the file ``show`` has open. The index used
    to map the file: show died by SIGBUS in the alternate screen, mouse mode on."""
    from tests.pty_session import LEAVE_ALTERNATE_SCREEN, Pty

    trace = tmp_path / "same.jsonl"
    write_transformer_trace(trace, passes=40, nodes=400)
    ui = Pty(["-m", "backstep", "show", str(trace)], tmp_path)
    try:
        ui.expect(r"pass 1/")
        os.truncate(trace, 4096)
        for _ in range(5):
            ui.press("]")
            ui.pump(0.2)
        ui.expect(r"the file was cut to 4096 bytes while open")
        ui.press("q")
        assert ui.wait() == 0
        assert LEAVE_ALTERNATE_SCREEN in ui.raw
    finally:
        ui.kill()
