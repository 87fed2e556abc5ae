"""``safe_text``: what a trace's or a peer's strings become before a terminal, a widget or a
DOT file sees them; the UI's control guard; the channel that cleans what the UI reads."""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest
from rich.segment import Segment
from textual.color import Color

from backstep import protocol, safe_text
from backstep.process.channel import Channel
from backstep.tui.panels.source import source_lines
from backstep.tui.text.shown import ControlGuard


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b]52;c;ZXZpbA==\x1b\\", "\\x1b]52;c;ZXZpbA==\\x1b\\"),
    ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
    ("a\nb\tc\rd", "a\\nb\\tc\\rd"),
    ("\x9b2J\x85\x7f\x00", "\\x9b2J\\x85\\x7f\\x00"),
    ("\u202eevil\u2066", "\\u202eevil\\u2066"),
    ("lone \ud800", "lone \\ud800"),
    ("train[v2].py é 日本 😀", "train[v2].py é 日本 😀"),
])
def test_printable_shows_every_control_as_its_escape(raw: str, shown: str) -> None:
    assert safe_text.printable(raw) == shown
    assert safe_text.printable(shown) == shown  # and is done once


def test_lines_keep_newlines_and_tabs_only() -> None:
    assert safe_text.lines("a\n\tb\r\x1b") == "a\n\tb\\r\\x1b"


def test_script_output_drops_csi_and_shows_the_rest() -> None:
    text = "\x1b[1;31mred\x1b[0m \x1b[2K\x1b[1Aup \x9b2Jc1 \x1b]0;title\x07 \x1b\\ done\r\n"
    assert safe_text.script_output(text) == "red up c1 \\x1b]0;title\\x07 \\x1b\\ done\r\n"


def test_clean_walks_events_and_copies_only_what_changes() -> None:
    plain = {"event": "node", "name": "MulBackward0", "saved": [{"name": "self"}], "n": 1.5}
    assert safe_text.clean(plain) is plain
    event = {"event": "pass_end", "error": "a\nb\x1b", "nodes": [{"name": "x\ny", "id": 1},
                                                               {"name": "ok"}],
             "text": "\x1b[31mred\x1b[0m\n"}
    cleaned = safe_text.clean(event)
    assert cleaned == {"event": "pass_end", "error": "a\nb\\x1b",
                       "nodes": [{"name": "x\\ny", "id": 1}, {"name": "ok"}], "text": "red\n"}
    assert cleaned["nodes"][1] is event["nodes"][1] and event["error"] == "a\nb\x1b"


@pytest.mark.parametrize("value", ["\x1b", "\x9b", "\x7f", "\u202e", "\ud800", "\x07"])
def test_suspect_finds_every_line_clean_would_change(value: str) -> None:
    for ensure_ascii in (True, False):
        raw = '{"event": "x", "name": "' + value + '"}\n'
        line = protocol.encode({"event": "x", "name": value}) if ensure_ascii else \
            raw.encode("utf-8", "surrogatepass")
        assert safe_text.suspect(line)
    assert not safe_text.suspect(b'{"event": "node", "name": "MulBackward0", "x": "a\\"b"}\n')
    for accents in ({"file": "/home/jos\u00e9/a\u00b7b.py"}, {"n": "\u2026 \u65e5"}):
        assert not safe_text.suspect(protocol.encode(accents))
        assert not safe_text.suspect(json.dumps(accents, ensure_ascii=False).encode() + b"\n")


def test_dot_strings_and_ids() -> None:
    assert safe_text.dot_string('a"b\\N\nc\x1b') == '"a\\"b\\\\N\\nc\\\\x1b"'
    assert safe_text.dot_id(7) == 7
    for bad in ['1 [URL="javascript:alert(1)"]; n9', True, 1.0, None, [1]]:
        with pytest.raises(safe_text.DotIdError):
            safe_text.dot_id(bad)


def test_the_control_guard_drops_and_counts() -> None:
    guard = ControlGuard()
    segments = [Segment("ok"), Segment("a\x1b]0;t\x07b"), Segment("\x9bc")]
    assert [s.text for s in guard.apply(segments, Color(0, 0, 0))] == ["ok", "a]0;tb", "c"]
    assert guard.caught == 2
    clean = [Segment("fine")]
    assert guard.apply(clean, Color(0, 0, 0)) is clean


def test_a_channel_the_ui_reads_cleans_what_a_debuggee_sends() -> None:
    ui, peer = socket.socketpair()
    with ui, peer:
        channel = Channel(ui)
        channel.shown = True
        peer.sendall(protocol.encode({"event": "error", "message": "x\x1b]0;t\x07\n[/]"}))
        peer.sendall(protocol.encode({"event": "output", "text": "\x1b[31mred\x1b[0m\n"}))
        assert channel.receive() == {"event": "error", "message": "x\\x1b]0;t\\x07\n[/]"}
        assert channel.receive() == {"event": "output", "text": "red\n"}
        debuggee = Channel(peer)  # the debuggee reads its commands as sent
        ui.sendall(protocol.encode({"cmd": "input", "text": "\x1b"}))
        assert debuggee.receive() == {"cmd": "input", "text": "\x1b"}


def test_the_source_panel_reads_only_regular_files(tmp_path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    found: list[list[str]] = []
    reader = threading.Thread(target=lambda: found.append(source_lines(str(fifo))),
                              daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # unblock the reader the old code left waiting on the FIFO
        with open(fifo, "w"):
            pass
    assert found == [[]]
    assert source_lines("/dev/zero") == []
    script = tmp_path / "s.py"
    script.write_text("x = 1\n")
    assert source_lines(str(script)) == ["x = 1\n"]
