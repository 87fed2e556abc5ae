"""Issue 29: ``connect`` talks to whoever answers on that port. A fake server on 127.0.0.1
that refuses with an ``error`` line full of escapes and markup, before any token is checked,
or answers with garbage, gets one plain line on stderr and exit status 2; a peer that gets
through (it knew the token) and sends hostile events and errors can crash nothing and write
nothing to the terminal."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from backstep import protocol
from backstep.commands.connect import RemoteLink
from backstep.process import auth
from backstep.process.channel import Channel
from tests.hostile_traces import CONTROL, EVIL, hostile_events
from tests.tui_fixtures import live_app, upto_stop
from tests.tui_pilot import pilot, screen_text

CHALLENGE = protocol.encode({"event": "challenge", "scheme": auth.SCHEME, "nonce": "00" * auth.NONCE_BYTES})
ERROR = protocol.encode({"event": "error", "message": f"refused: {EVIL}"})


@contextlib.contextmanager
def fake_server(*answers: bytes) -> Iterator[int]:
    """A port on 127.0.0.1 that answers each connection with ``answers``, one line after each
    line it reads (the first at once), then hangs up."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with contextlib.suppress(OSError):
            sock, _ = listener.accept()
            with sock, sock.makefile("rb") as incoming:
                for i, answer in enumerate(answers):
                    if i:
                        incoming.readline(1 << 16)
                    sock.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        thread.join(5)


def connect(port: int) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "backstep", "connect", f"127.0.0.1:{port}", "--token", "t0ken",
         "--timeout", "5"], stdin=subprocess.DEVNULL, capture_output=True, timeout=60)


def one_plain_line(done: subprocess.CompletedProcess[bytes]) -> str:
    err = done.stderr.decode("utf-8")  # strict: a lone surrogate would not even encode
    assert done.returncode == 2 and done.stdout == b"", done
    assert err.count("\n") == 1 and err.startswith("backstep connect: 127.0.0.1:"), err
    assert not CONTROL.search(err), repr(err)
    return err


@pytest.mark.parametrize("moment", ["before the challenge", "after the hello"])
def test_a_refusal_full_of_escapes_and_markup_is_one_plain_line(moment: str) -> None:
    answers = (ERROR,) if moment == "before the challenge" else (CHALLENGE, ERROR)
    with fake_server(*answers) as port:
        err = one_plain_line(connect(port))
    assert "refused: \\x1b]52;c;ZXZpbA==\\x1b\\\\x1b]0;pwned\\x07" in err  # shown, not obeyed
    assert "[/][bold]x[/bold][@click=app.quit]q[/][link=http://x]y[/link]" in err


@pytest.mark.parametrize("answer", [
    protocol.encode({"event": "error", "message": EVIL * 6}),  # long: cut to one short line
    protocol.encode({"event": "error", "message": [EVIL, {"x": EVIL}]}),  # not a string
    b"\x1b]0;pwned\x07\x9b2J\xff\xfe[/]\n",  # not JSON, not UTF-8
    protocol.encode({"event": "challenge", "scheme": EVIL, "nonce": EVIL}),
    json.dumps({"event": "error", "message": "x" * 100}).encode()[:-2] + b"\x1b",  # no newline
], ids=["long", "not a string", "garbage", "bad challenge", "cut"])
def test_garbage_from_the_port_is_one_plain_line(answer: bytes) -> None:
    with fake_server(answer) as port:
        err = one_plain_line(connect(port))
    assert len(err) < 300


@pilot
async def test_a_peer_past_the_handshake_sends_hostile_events_and_errors() -> None:
    ui_end, peer_end = socket.socketpair()
    events = upto_stop(3, hostile_events(stops=True))
    events.insert(1, {"event": "output", "stream": "stdout", "text": f"printed {EVIL}\n"})
    events.append({"event": "error", "message": f"bad command {EVIL}"})

    def peer() -> None:
        with contextlib.suppress(OSError), peer_end.makefile("rb") as incoming:
            incoming.readline()  # the UI's start
            peer_end.sendall(b"".join(protocol.encode(e) for e in events))
            while incoming.readline():  # commands, until the UI detaches
                pass

    thread = threading.Thread(target=peer, daemon=True)
    thread.start()
    app = live_app(RemoteLink(Channel(ui_end)))
    seen = []
    async with app.run_test(size=(200, 50)) as pilot:
        for _ in range(50):
            await pilot.pause(0.05)
            if app.snapshot.stop is not None and "bad command" in screen_text(app):
                break
        for key in ["m", "m", "F", "escape", "d", "slash", "[", "/", "]", "enter", "escape"]:
            seen.append(screen_text(app))
            await pilot.press(key)
            await pilot.pause()
        seen.append(screen_text(app))
    peer_end.close()
    thread.join(5)
    assert app.snapshot.stop is not None and app.snapshot.stop.step == 3
    assert app.control_guard.caught == 0
    text = "\n".join(seen)
    assert not CONTROL.search(text)
    assert "bad command \\x1b]52;c;ZXZpbA==" in text  # the error, as a notification
    assert "printed \\x1b]52" in text and "[link=http://x]y[/link]" in text  # the console
    assert "enc.[/].lin" in text  # the module view
