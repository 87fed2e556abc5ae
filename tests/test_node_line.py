"""A node event's fields read from its line without decoding it (``tui/state/node_line``):
whatever the peer sends, a line read that way gives exactly what decoding it in full, putting
the defaults back and checking it give, and anything that could differ is read in full."""

from __future__ import annotations

import io
import json
import random
import socket
from typing import Any

import pytest

from backstep import protocol
from backstep.engine.recorder import JsonlRecorder
from backstep.events.form import expand
from backstep.events.spec import check
from backstep.process.channel import Channel
from backstep.tui.runtime.reader import Reader
from backstep.tui.state import node_line
from backstep.tui.state.node_record import _saved_bytes
from tests.line_channel import Lines
from tests.tui_fixtures import chain_pass, summary

FIELDS = {"event", "pass", "step", "id", "name", "error"}


def node_event(node_id: int, **changes: Any) -> dict[str, Any]:
    event = {"event": "node", "pass": 1, "step": node_id, "id": node_id,
             "name": f"Op{node_id % 7}Backward0",
             "grad_outputs": [summary([0.5 * node_id, -1.0])],
             "grad_inputs": [summary([float(node_id), 2.5e-300, -0.0]), None,
                             summary([1.0] * 20, [4, 5])],
             "saved": [{"name": "self", "status": "alive", "shape": [97, 51],
                        "dtype": "float64", "bytes": 39576 + node_id, "version": None},
                       {"name": "other", "status": "none", "shape": None, "dtype": None,
                        "bytes": 0, "version": None},
                       {"name": "exponent", "status": "scalar", "value": node_id},
                       {"name": "sizes", "status": "scalar", "value": [97, 51]},
                       {"name": "kept", "status": "alive", "shape": [3], "dtype": "int64",
                        "bytes": 24, "version": {"saved": 1, "now": 1}}],
             "error": None}
    event.update(changes)
    return event


def written(event: dict[str, Any]) -> bytes:
    """``event``'s line as the recorder writes it (the form the live stream carries)."""
    out = io.BytesIO()
    JsonlRecorder(out).emit(event)
    return out.getvalue()


def full(line: bytes) -> dict[str, Any] | None:
    """The line read the long way, as the live reader did: decoded, made printable, the
    defaults put back, checked; None where that refuses it."""
    a, b = socket.socketpair()
    try:
        channel = Channel(a)
        channel.shown = True
        try:
            event = channel.parse(line)
        except protocol.ProtocolError:
            return None
    finally:
        a.close()
        b.close()
    event = expand(event)
    return event if check(event) is None else None


def agrees(line: bytes) -> bool:
    """Whether the short read of ``line`` took it (True) or left it (False); fails the test
    where it took it and gave anything but what the long read gives."""
    fast = node_line.read(line)
    if fast is None:
        return False
    slow = full(line)
    assert slow is not None, line
    assert set(fast) == FIELDS
    for key in FIELDS:
        assert type(fast[key]) is type(slow[key]) and fast[key] == slow[key], (key, line)
    assert fast.saved_bytes == _saved_bytes(slow.get("saved")), line
    return True


BASE = written(node_event(201))


def test_the_recorders_form_is_read_short_and_agrees() -> None:
    assert BASE.startswith(b'{"event":"node","pass":1,"step":201,"id":201,"name":"Op5Backward0",')
    assert agrees(BASE)
    assert agrees(BASE.rstrip(b"\n"))
    fast = node_line.read(BASE)
    assert fast is not None and fast.saved_bytes == 39576 + 201 + 24
    for event in (node_event(7, grad_inputs=None), node_event(8, grad_outputs=None),
                  node_event(9, saved=[]), node_event(10, saved=None),
                  node_event(11, grad_outputs=[None]), node_event(12, step=0)):
        assert agrees(written(event)), event


HOSTILE = [
    # another value for a field read short, later in the line: JSON keeps the last one
    BASE[:-2] + b',"pass":2}\n',
    BASE[:-2] + b',"name":"\\u001b]0;pwned\\u0007"}\n',
    BASE[:-2] + b',"p\\u0061ss":2}\n',  # the same key, spelled with an escape
    BASE[:-2] + b',"error":"boom"}\n',
    BASE[:-2] + b',"thread":"t"}\n',  # an extra key
    BASE.replace(b'"step":201,"id":201', b'"id":201,"step":201'),  # reordered
    BASE.replace(b'"name":"Op5Backward0"', b'"name":"Op5\\u0042ackward0"'),  # an escape
    BASE.replace(b'"name":"Op5Backward0"', b'"name":"Op5\x1b[2JBackward0"'),  # raw control
    BASE.replace(b'"name":"Op5Backward0"', b'"name":"Op5\\u001b[2J"'),
    BASE.replace(b'"name":"Op5Backward0"', b'"name":"\xc3\xa9t\xc3\xa9"'),  # unicode
    BASE.replace(b'"name":"Op5Backward0"', b'"name":"Op\xe2\x80\xaeBackward"'),  # bidi
    BASE.replace(b'"name":"Op5Backward0"', b'"name":"Op5\xff"'),  # not UTF-8
    BASE.replace(b'"name":"Op5Backward0"', b'"name":"' + b"A" * 300 + b'"'),
    BASE.replace(b'"dtype":"float64"', b'"dtype":"\\u001b]52;c;x\\u0007"'),
    BASE.replace(b'"dtype":"float64"', b'"dtype":"float64","dtype":"x"'),
    BASE.replace(b'"bytes":24', b'"bytes":24,"bytes":10000'),  # a saved size said twice
    BASE.replace(b'"bytes":24', b'"bytes":true'),
    BASE.replace(b'"bytes":24', b'"bytes":-24'),
    BASE.replace(b'"bytes":24', b'"bytes":024'),  # JSON has no leading zeros
    BASE.replace(b'"bytes":24', b'"bytes":2.4e1'),
    BASE.replace(b'"id":201', b'"id":0201'),
    BASE.replace(b'"id":201', b'"id":201.0'),
    BASE.replace(b'"id":201', b'"id":-201'),
    BASE.replace(b'"id":201', b'"id":true'),
    BASE.replace(b'"id":201', b'"id":"201"'),
    BASE.replace(b'"id":201', b'"id":%d' % (2**53 + 1)),
    BASE.replace(b'"id":201', b'"id":' + b"9" * 16),
    BASE.replace(b'"pass":1', b'"pass":null'),
    BASE.replace(b'"step":201', b'"step":null'),
    BASE.replace(b'"event":"node"', b'"event":"nod\\u0065"'),
    BASE.replace(b'"event":"node"', b'"event":"stopped"'),
    BASE.replace(b'"min":', b'"min":NaN,"x":', 1),
    BASE.replace(b'"min":', b'"min":Infinity,"x":', 1),
    BASE.replace(b'"min":', b'"min":1.,"x":', 1),
    BASE.replace(b'"min":', b'"min":' + b"1" * 25 + b',"x":', 1),  # an int past 2**64
    BASE.replace(b'"values":[', b'"values":[{"a":1},', 1),
    BASE.replace(b'"shape":[', b'"shape":[1.5,', 1),
    BASE.replace(b'"shape":[', b'"shape":[-1,', 1),
    BASE.replace(b',"grad_inputs":', b', "grad_inputs" : '),  # spaces: read in full
    BASE.replace(b'"saved":[', b'"saved":[1,'),
    BASE.replace(b'"saved":[', b'"saved":[{"status":"alive"},'),  # a saved tensor has a name
    BASE.replace(b'"saved":[', b'"saved":{"x":['),
    BASE[:-1] + b"\r\n",
    BASE[:-1] + b" \n",
    BASE[:-1] + b"{}\n",
    BASE[:-1] + b"\n\n",
    b"\xef\xbb\xbf" + BASE,  # a byte-order mark
    b" " + BASE,
    b"[" + BASE[:-1] + b"]\n",
    BASE.replace(b'{"event":"node",', b'{"event":"node","event":"node",'),
    b'{"event":"node","pass":1,"step":1,"id":1,"name":"x","grad_outputs":[],'
    b'"grad_inputs":[],"saved":[]}' + b"]" * 10 + b"\n",
]


@pytest.mark.parametrize("line", HOSTILE)
def test_a_line_that_could_read_otherwise_is_read_in_full(line: bytes) -> None:
    assert not agrees(line)


def test_every_cut_of_a_line_is_read_in_full() -> None:
    for end in range(len(BASE) - 1):
        assert not agrees(BASE[:end])


def test_random_damage_never_makes_the_short_read_differ() -> None:
    """Bytes inserted, deleted, replaced and duplicated in written lines, thousands of
    times: where the short read still takes a line, it agrees with the long one."""
    rng = random.Random(30)
    pieces = [b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b"0", b"7", b"-", b".", b"e",
              b"\n", b" ", b"\x1b", b"\xc3\xa9", b"null", b"true", b'"pass":9,', b'"bytes":9,',
              b'"name":"y",', b"\\u0070", b'"nan"', b"1e400"]
    lines = [written(node_event(i)) for i in range(1, 12)]
    taken = 0
    for _ in range(4000):
        line = bytearray(rng.choice(lines))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(line))
            how = rng.randrange(4)
            if how == 0:
                line[at:at] = rng.choice(pieces)
            elif how == 1:
                del line[at:at + rng.randint(1, 4)]
            elif how == 2:
                line[at:at + 1] = rng.choice(pieces)
            else:
                end = min(len(line), at + rng.randint(1, 40))
                line[at:at] = line[at:end]
        taken += agrees(bytes(line))
    assert taken > 100  # some damage (a digit for a digit) leaves a line of the same form


class Fed(Lines):
    """A channel's reading side over fixed lines, counting the lines read in full."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = list(lines)
        self.last_line = b""
        self.parsed = 0

    def parse(self, line: bytes) -> Any:
        self.parsed += 1
        return super().parse(line)


class FedLines(Fed):
    """The same with ``receive_line``, as ``Channel`` has it."""

    def receive_line(self) -> bytes | None:
        return self.lines.pop(0) if self.lines else None


NODES = 40


def stream(nodes: list[bytes]) -> list[bytes]:
    start = [{"event": "session", "version": 2, "torch": "t", "argv": ["x.py"], "pid": 1},
             chain_pass(NODES)]
    return [protocol.encode(e) for e in start] + nodes


def run(source: Fed) -> Reader:
    reader = Reader(lambda message: None)
    reader.resumed(through=True)
    reader.run(source)
    return reader


def test_the_reader_reads_node_lines_short_and_the_model_holds_what_it_held() -> None:
    nodes = [written(node_event(i)) for i in range(1, NODES + 1)]
    nodes[5] = nodes[5][:-2] + b',"pass":2}\n'  # read in full: a pass that never began
    nodes[6] = nodes[6][:-2] + b',"error":"it \\u001b[31mfailed"}\n'
    nodes[7] = nodes[7].replace(b'"dtype":"float64"', b'"dtype":7')  # malformed: skipped
    short, long = FedLines(stream(nodes)), Fed(stream(nodes))
    got, want = run(short).model.snapshot().pass_, run(long).model.snapshot().pass_
    assert short.parsed == 2 + 3  # the session, the pass and the three odd lines
    assert long.parsed == 2 + NODES
    assert got is not None and want is not None
    assert got.executed() == want.executed() and 6 not in got.executed()
    assert 8 not in got.executed()
    assert got.saved_totals() == want.saved_totals() != (0, 0)
    for node_id in want.executed():
        a, b = got.record(node_id), want.record(node_id)
        assert a is not None and b is not None
        assert (a.index, a.step, a.id, a.name, a.error, a.saved_bytes) == \
            (b.index, b.step, b.id, b.name, b.error, b.saved_bytes)
        assert (a.grad_outputs, a.grad_inputs, a.saved) == (b.grad_outputs, b.grad_inputs,
                                                              b.saved)
    record = got.record(7)
    assert record is not None and record.error == "it \x1b[31mfailed"  # parsed as before


def test_the_channel_hands_over_lines_and_reads_them_as_receive_does() -> None:
    a, b = socket.socketpair()
    try:
        channel = Channel(a)
        b.sendall(BASE + b"x" * 20 + b"\n")
        assert channel.receive_line() == BASE
        with pytest.raises(protocol.ProtocolError):
            channel.parse(channel.receive_line() or b"")
        b.close()
        assert channel.receive_line() is None and channel.closed
    finally:
        a.close()


def test_a_long_line_is_refused_before_it_is_read() -> None:
    a, b = socket.socketpair()
    try:
        channel = Channel(a, max_line=100)
        b.sendall(b"x" * 300 + b"\n" + BASE[:90] + b"}\n")
        with pytest.raises(protocol.ProtocolError):
            channel.receive_line()
        assert channel.receive_line() == BASE[:90] + b"}\n"
    finally:
        a.close()
        b.close()


def test_a_record_read_short_keeps_its_line_and_reads_it_in_full_when_wanted() -> None:
    line = written(node_event(3))
    reader = run(FedLines(stream([line])))
    view = reader.model.snapshot().pass_
    assert view is not None
    record = view.record(3)
    assert record is not None and "_raw" not in record.__dict__
    event = json.loads(line)
    assert record.grad_inputs is not None and len(record.grad_inputs) == 3
    assert record.saved[0].bytes == event["saved"][0]["bytes"]
