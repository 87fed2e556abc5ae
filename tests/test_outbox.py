"""The debuggee's events leave on a thread of their own (``process.outbox``): a script recording
a big pass never waits for a UI that has fallen behind, everything still arrives in order, and
``flush`` (the session's end) waits until it has."""

from __future__ import annotations

import socket
import threading
import time

from backstep.engine.debuggee import ChannelSink
from backstep.process.channel import Channel
from backstep.process.outbox import Outbox

BIG = 4 << 20  # a 6,380-node pass is 4.4 MB of node events; a socket buffers a few hundred KB


def _lines(count: int, width: int) -> list[bytes]:
    return [f'{{"event":"output","stream":"stdout","text":"{i:08d}{"x" * width}"}}\n'.encode()
            for i in range(count)]


def _read_all(sock: socket.socket, into: list[dict]) -> threading.Thread:
    def read() -> None:
        into.extend(Channel(sock).incoming())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_a_ui_that_reads_nothing_yet_does_not_hold_the_script_up() -> None:
    a, b = socket.socketpair()
    try:
        sink = ChannelSink(Channel(a), queued=True)
        lines = _lines(BIG // 1000, 990)
        started = time.monotonic()
        for line in lines:  # nobody reads b meanwhile: a plain send would block past its buffer
            assert sink._send(line)
        assert time.monotonic() - started < 30  # it returned at all: nothing waited on b
        got: list[dict] = []
        reader = _read_all(b, got)
        sink.flush()  # waits until everything is out
        assert sink.outbox is not None and sink.outbox._queued == 0
        a.shutdown(socket.SHUT_WR)
        reader.join(30)
        assert [event["text"][:8] for event in got] == [f"{i:08d}" for i in range(len(lines))]
    finally:
        a.close()
        b.close()


def test_past_its_limit_a_writer_waits_for_the_reader() -> None:
    a, b = socket.socketpair()
    try:
        outbox = Outbox(Channel(a), limit=64 << 10)
        done = threading.Event()

        def write() -> None:
            for line in _lines(4000, 990):  # 4 MB against a 64 KB limit and an unread socket
                outbox.put(line)
            done.set()

        threading.Thread(target=write, daemon=True).start()
        assert not done.wait(1.0), "the queue grew without bound"
        assert outbox._queued <= (64 << 10) + 1000 + 1
        got: list[dict] = []
        reader = _read_all(b, got)
        assert done.wait(30)
        assert outbox.drain(30)
        a.shutdown(socket.SHUT_WR)
        reader.join(30)
        assert len(got) == 4000
    finally:
        a.close()
        b.close()


def test_a_lost_ui_ends_the_queue_and_drain_returns() -> None:
    a, b = socket.socketpair()
    channel = Channel(a)
    outbox = Outbox(channel)
    b.close()
    for line in _lines(2000, 990):
        if not outbox.put(line):
            break
    assert outbox.drain(30)
    assert channel.closed and not outbox.put(b"{}\n")
    a.close()
