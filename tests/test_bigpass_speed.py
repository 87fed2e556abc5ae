"""Big passes cost what recording them costs (issue 30): counted, never timed.

While the person has resumed (``f``, ``c``), the UI draws the running pass seldom; the debuggee
sends a recorded pass's node events a batch at a time; ``q`` ends processes without waiting on
the interpreter's teardown.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from typing import Any

from backstep import protocol
from backstep.engine.debuggee import ChannelSink
from backstep.engine.recorder import emit_all
from backstep.events.form import expand
from backstep.process.channel import Channel
from backstep.tui.messages import SnapshotReady
from backstep.tui.runtime import reader as reader_module
from backstep.tui.runtime.reader import Reader
from backstep.tui.state.node_line import NodeFields
from tests.tui_fixtures import summary, transformer_pass

NODES = 6_000


class Clock:
    """A monotonic clock that moves 1 ms a read: a node every few ms, as a real pass runs."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def node_events(begin: dict[str, Any], count: int) -> list[dict[str, Any]]:
    grads = [summary([0.5, -1.0, 2.0], [3])]
    return [{"event": "node", "pass": 1, "step": step, "id": node["id"], "name": node["name"],
             "grad_outputs": grads, "grad_inputs": [grads[0] for _ in node["next"]],
             "saved": [], "error": None}
            for step, node in enumerate(begin["nodes"][:count], start=1)]


def test_a_resumed_pass_is_drawn_a_few_times_not_every_50_ms(monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr(reader_module.time, "monotonic", clock)
    posted: list[Any] = []
    reader = Reader(posted.append)
    begin = transformer_pass(NODES)
    nodes = node_events(begin, NODES)
    reader.feed({"event": "session", "version": 1, "torch": "t", "argv": ["x"], "pid": 1})
    reader.feed(begin)
    reader.feed({"event": "stopped", "pass": 1, "step": 1, "id": nodes[0]["id"],
                 "name": nodes[0]["name"], "reason": "pass_start", "detail": None,
                 "grad_outputs": nodes[0]["grad_outputs"], "saved": []})
    before = len(posted)
    reader.resumed()  # f: the pass runs through its nodes, nobody looking at each
    for k, event in enumerate(nodes):
        reader.feed(event)
        if k % 50 == 0:
            reader.flush()  # the app's timer, every 0.1 s
    reader.feed({"event": "pass_end", "pass": 1, "status": "ok", "error": None, "skipped": []})
    drawn = [m for m in posted[before:] if isinstance(m, SnapshotReady)]
    # about 12 s of the fake clock: a snapshot a second, then pass_end's at once
    assert len(drawn) <= 20, len(drawn)
    assert drawn[-1].snapshot.pass_ is not None and drawn[-1].snapshot.pass_.done == len(nodes)


def test_at_a_stop_the_next_events_are_drawn_at_once(monkeypatch) -> None:
    monkeypatch.setattr(reader_module.time, "monotonic", Clock())
    posted: list[Any] = []
    reader = Reader(posted.append)
    begin = transformer_pass(50)
    node = node_events(begin, 1)[0]
    reader.feed({"event": "session", "version": 1, "torch": "t", "argv": ["x"], "pid": 1})
    reader.feed(begin)
    reader.resumed()
    reader.feed({"event": "stopped", "pass": 1, "step": 1, "id": node["id"], "name": node["name"],
                 "reason": "pass_start", "detail": None, "grad_outputs": [], "saved": []})
    shown = len(posted)
    reader.feed({"event": "waiting", "stops": []})  # read after the stop: drawn on the next tick
    reader.flush()
    assert len(posted) == shown + 1


def _two_passes(reader: Reader, through: bool) -> list[SnapshotReady]:
    """Pass 1 stopped at its start, resumed (``through``: f or c; else n), runs to its end and
    pass 2 begins, all within the running interval, then stops: the snapshots drawn meanwhile."""
    posted: list[Any] = []
    reader.post = posted.append
    begin = transformer_pass(30)
    nodes = node_events(begin, 30)
    stop = {"event": "stopped", "pass": 1, "step": 1, "id": nodes[0]["id"],
            "name": nodes[0]["name"], "reason": "pass_start", "detail": None,
            "grad_outputs": nodes[0]["grad_outputs"], "saved": []}
    reader.feed({"event": "session", "version": 1, "torch": "t", "argv": ["x"], "pid": 1})
    reader.feed(begin)
    reader.feed(stop)
    before = len(posted)
    reader.resumed(through=through)
    for event in nodes:
        reader.feed(event)
    reader.feed({"event": "pass_end", "pass": 1, "status": "ok", "error": None, "skipped": []})
    reader.feed(dict(begin, **{"pass": 2}))
    reader.feed(dict(stop, **{"pass": 2}))
    return [m for m in posted[before:] if isinstance(m, SnapshotReady)]


def test_f_and_c_draw_a_pass_end_and_the_next_start_with_the_stop_that_follows(
        monkeypatch) -> None:
    monkeypatch.setattr(reader_module.time, "monotonic", Clock())
    reader = Reader(lambda message: None)
    drawn = _two_passes(reader, through=True)
    assert len(drawn) == 1  # the stop, with pass 1's end and pass 2's start in it
    snap = drawn[0].snapshot
    assert snap.stop is not None and snap.stop.pass_ == 2
    assert snap.pass_ is not None and snap.pass_.number == 2
    assert [view.number for view in reader.model.ended] == [1]
    assert reader.model.ended[0].ended
    # a step (n) that ends a pass still shows its end at once
    monkeypatch.setattr(reader_module.time, "monotonic", Clock())
    assert len(_two_passes(Reader(lambda message: None), through=False)) == 3


class Writes:
    """A channel that counts its writes and keeps what they carried."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def send(self, message: dict[str, Any]) -> bool:
        return self.send_lines(protocol.encode(message))

    def send_lines(self, data: bytes) -> bool:
        self.writes.append(data)
        return True


def test_a_batch_of_node_events_is_one_write_the_ui_reads_back_as_sent() -> None:
    begin = transformer_pass(300)
    events = node_events(begin, 256)
    channel = Writes()
    sink = ChannelSink(channel)  # type: ignore[arg-type]
    emit_all(sink, events)
    assert len(channel.writes) == 1
    lines = channel.writes[0].splitlines()
    assert [expand(json.loads(line)) for line in lines] == events  # the file form, put back


def test_the_batch_arrives_over_a_socket_as_separate_messages() -> None:
    a, b = socket.socketpair()
    begin = transformer_pass(20)
    events = node_events(begin, 10)
    emit_all(ChannelSink(Channel(a)), events)
    a.close()
    got = list(Channel(b).incoming())
    assert [expand(event) for event in got] == events


def test_the_reader_puts_back_what_a_batch_leaves_out() -> None:
    """A batch is written as a trace file has it (defaults left out, ``events.form``): the
    reader gives the panels whole events, a saved tensor's status and a summary's device
    included (a node event read short, ``node_line``, when its record reads its line)."""
    a, b = socket.socketpair()
    begin = transformer_pass(20)
    events = node_events(begin, 3)
    events[0]["saved"] = [{"name": "self", "status": "alive", "shape": [3], "dtype": "float32",
                           "bytes": 12, "version": None}]
    emit_all(ChannelSink(Channel(a)), [dict(event) for event in events])
    a.close()
    fed: list[tuple[dict[str, Any], bytes | None]] = []
    reader = Reader(lambda message: None)
    reader.feed = lambda event, line=None: fed.append((event, line))  # type: ignore[method-assign]
    reader.run(Channel(b))
    reread = reader.model.reread
    assert reread is not None
    short = [line for event, line in fed if type(event) is NodeFields]
    assert len(short) == len(events) and all(line for line in short)
    assert [reread(line) for line in short] == events
    assert all(event.items() <= whole.items() for (event, _), whole in zip(fed, events, strict=True))


def test_a_pass_begin_goes_out_as_its_listing_text_and_reads_back_whole() -> None:
    """The engine writes a pass_begin's text from its listing (sources once, defaults left out,
    as a trace file has it): the live stream sends that text, not ``json.dumps`` of the whole
    event again, and the reader gets every node back with its source."""
    from backstep.events.form import compact_event
    from backstep.events.text import Encoded

    begin = transformer_pass(40)
    for k, node in enumerate(begin["nodes"]):
        node["source"] = {"file": "model.py", "line": 10 + k % 3, "code": "y = f(x)"}
    event = Encoded(begin)
    event.text = json.dumps(compact_event(begin), separators=(",", ":")) + "\n"
    channel = Writes()
    ChannelSink(channel).emit(event)  # type: ignore[arg-type]
    assert channel.writes == [event.text.encode()]
    assert expand(json.loads(channel.writes[0])) == begin


def test_a_lost_ui_makes_batches_no_ops() -> None:
    a, b = socket.socketpair()
    b.close()
    channel = Channel(a)
    sink = ChannelSink(channel)
    events = node_events(transformer_pass(20), 10)
    for _ in range(50):  # never raises, however many batches follow
        emit_all(sink, events)
    assert channel.closed


def test_end_process_runs_atexit_and_skips_the_teardown(tmp_path) -> None:
    script = textwrap.dedent("""
        import atexit, sys
        from backstep.process.quick_exit import end_process

        class Big:
            def __del__(self):
                print("teardown", flush=True)

        keep = Big()
        atexit.register(lambda: print("atexit ran"))
        print("unflushed", end="")
        end_process(3)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 3
    assert result.stdout == "unflushedatexit ran\n"
