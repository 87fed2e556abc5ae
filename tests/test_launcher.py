"""The debuggee's lifecycle (no orphans, no hangs), live output, and a hostile socket peer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from backstep import protocol
from backstep.process import transport
from backstep.process.launcher import Debuggee, debuggee_command, exit_status, module_command
from backstep.tui.messages import ServerError, SnapshotReady
from backstep.tui.runtime.reader import Reader

CONNECT = textwrap.dedent(
    """\
    import os, sys, time
    from backstep.process import transport
    ch = transport.connect(*transport.address_from_environment())
    ch.send({"event": "session", "version": 1, "torch": None, "argv": sys.argv[1:], "pid": os.getpid()})
    """
)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


class Collector:
    def __init__(self) -> None:
        self.chunks: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, text: str, stream: str) -> None:
        with self.lock:
            self.chunks.append((text, stream))

    def text(self, stream: str) -> str:
        with self.lock:
            return "".join(t for t, s in self.chunks if s == stream)

    def wait_for(self, stream: str, needle: str, timeout: float = 20.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if needle in self.text(stream):
                return
            time.sleep(0.02)
        raise AssertionError(f"{needle!r} never arrived on {stream}: {self.text(stream)!r}")


def test_command_line_follows_the_contract() -> None:
    argv = debuggee_command("train.py", ["--lr", "1"], source=False)
    assert argv == [*module_command("backstep.engine.debuggee"), "--no-source", "--",
                    "train.py", "--lr", "1"]
    assert "--no-source" not in debuggee_command("t.py", [])
    assert exit_status(-9) == 137 and exit_status(3) == 3 and exit_status(None) == 1


def test_partial_lines_and_c_level_writes_arrive_live_then_close_kills() -> None:
    out = Collector()
    code = CONNECT + textwrap.dedent(
        """\
        os.write(1, b"partial line, no newline")
        os.write(2, "é".encode()[:1]); time.sleep(0.2); os.write(2, "é".encode()[1:] + b"!")
        time.sleep(600)
        """
    )
    child = Debuggee(python(code), on_output=out)
    child.start()
    channel = child.accept(timeout=20)
    assert channel is not None
    assert channel.receive()["event"] == "session"
    out.wait_for("stdout", "partial line, no newline")  # arrived without a newline
    out.wait_for("stderr", "é!")  # a UTF-8 character split across writes
    directory = child.listener.directory
    pid = child.process.pid
    started = time.monotonic()
    code = child.close(grace=0.5, kill_after=2.0)
    assert time.monotonic() - started < 5
    assert code is not None and not alive(pid)
    assert not os.path.exists(directory)
    assert child.close() == code  # idempotent


def test_sigterm_ignored_means_sigkill_and_grandchildren_die_too(tmp_path: Path) -> None:
    code = CONNECT + textwrap.dedent(
        """\
        import signal, subprocess
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(kid.pid, flush=True)
        time.sleep(600)
        """
    )
    out = Collector()
    child = Debuggee(python(code), on_output=out)
    child.start()
    assert child.accept(timeout=20) is not None
    end = time.monotonic() + 20
    while not out.text("stdout").strip() and time.monotonic() < end:
        time.sleep(0.02)
    grandchild = int(out.text("stdout").split()[0])
    assert alive(grandchild)
    status = child.close(grace=0.2, kill_after=0.5)
    assert status == -9
    time.sleep(0.2)
    assert not alive(grandchild)


def test_a_child_that_dies_before_connecting_is_noticed_quickly() -> None:
    child = Debuggee(python("import sys; print('bye', file=sys.stderr); sys.exit(3)"),
                     on_output=Collector())
    child.start()
    started = time.monotonic()
    assert child.accept(timeout=30) is None
    assert time.monotonic() - started < 10
    assert child.wait(5) == 3
    child.close()


def test_the_script_never_sees_the_socket_when_it_spawns_nothing() -> None:
    """The listener is private: a 0700 directory with a random token."""
    listener = transport.Listener()
    try:
        mode = os.stat(listener.directory).st_mode & 0o777
        assert mode == 0o700
        assert len(listener.token) >= 32
    finally:
        listener.close()
    assert not os.path.exists(listener.directory)


# -- hostile peers --------------------------------------------------------------------------------

def _peer(path: str, payload: bytes, hold: float = 0.0) -> str:
    """Connect, send a payload, report what came back (never raises)."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(path)
        if payload:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        time.sleep(hold)
        try:
            reply = sock.recv(4096)
        except OSError:
            reply = b""
        sock.close()
        return reply.decode(errors="replace")
    except OSError as exc:
        return f"oserror: {exc}"


def test_garbage_wrong_token_and_huge_lines_are_refused_without_hanging() -> None:
    listener = transport.Listener()
    try:
        replies: dict[str, str] = {}
        payloads = {
            "garbage": b"\x00\xff not json at all\n",
            "wrong token": protocol.encode({"event": "hello", "token": "0" * 32}),
            "not hello": protocol.encode({"cmd": "step"}),
            "json array": b"[1, 2, 3]\n",
            "nan": b'{"event": "hello", "token": NaN}\n',
            "huge": b"{" + b" " * (protocol.MAX_LINE + 10),
        }

        def attack() -> None:
            for name, payload in payloads.items():
                replies[name] = _peer(listener.path, payload)
            # finally the real one
            good = transport.connect(listener.path, listener.token)
            good.send({"event": "session", "version": 1})
            replies["good"] = "sent"
            time.sleep(0.5)
            good.close()

        thread = threading.Thread(target=attack, daemon=True)
        thread.start()
        started = time.monotonic()
        channel = listener.accept(timeout=30)
        assert channel is not None, replies
        assert time.monotonic() - started < 30
        assert channel.receive() == {"event": "session", "version": 1}
        thread.join(20)
        assert not thread.is_alive()
        for name in payloads:
            assert "bad or missing token" in replies[name] or replies[name] == "" or \
                replies[name].startswith("oserror"), (name, replies[name])
        channel.close()
    finally:
        listener.close()


def test_a_silent_peer_does_not_block_the_launcher_forever() -> None:
    child = Debuggee(python(CONNECT + "time.sleep(600)\n"), on_output=Collector())
    child.start()
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(child.listener.path)  # connects first, never says hello
    try:
        channel = child.accept(timeout=30)
        assert channel is not None
        assert channel.receive()["event"] == "session"
    finally:
        silent.close()
        child.close(grace=0.2, kill_after=1.0)


class Lines:
    """An event source that yields raw lines through a real Channel."""

    def __init__(self, lines: list[bytes]) -> None:
        a, b = socket.socketpair()
        self.channel = transport.Channel(a)
        self.writer = b
        self.lines = lines

    def feed(self) -> None:
        for line in self.lines:
            self.writer.sendall(line)
        self.writer.close()


def test_the_ui_reader_survives_garbage_from_an_authenticated_peer() -> None:
    posted: list[Any] = []
    reader = Reader(posted.append)
    good = protocol.encode({"event": "session", "version": 1, "argv": ["x"], "pid": 1})
    source = Lines([
        b"garbage\n",
        b"\xff\xfe\n",
        b"[1]\n",
        b'{"event": "node", "pass": "x"}\n',
        b'{"event": "stopped"}\n',
        b"{" + b"a" * (protocol.MAX_LINE + 5) + b"\n",
        good,
    ])
    feeder = threading.Thread(target=source.feed, daemon=True)
    feeder.start()
    done = threading.Event()
    threading.Thread(target=lambda: (reader.run(source.channel), done.set()), daemon=True).start()
    assert done.wait(30), "the reader hung"
    errors = [m for m in posted if isinstance(m, ServerError)]
    snaps = [m for m in posted if isinstance(m, SnapshotReady)]
    assert len(errors) >= 4
    assert snaps and snaps[-1].snapshot.session is not None


def test_the_real_debuggee_survives_garbage_commands(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("print('ran to the end')\n")
    out = Collector()
    child = Debuggee(debuggee_command(str(script), []), on_output=out, cwd=str(tmp_path))
    child.start()
    try:
        channel = child.accept(timeout=60)
        assert channel is not None
        assert channel.receive()["event"] == "session"
        channel.sock.sendall(b"garbage\n")
        channel.sock.sendall(b'{"cmd": "launch_missiles"}\n')
        channel.sock.sendall(b'{"cmd": "tensor", "req": "x"}\n')
        channel.sock.sendall(b"{" + b" " * (protocol.MAX_LINE + 5) + b"\n")
        channel.send({"cmd": "start", "breakpoints": [], "stop_at_pass_start": True})
        events = []
        while (event := channel.receive()) is not None:
            events.append(event)
        kinds = [e["event"] for e in events]
        assert kinds.count("error") >= 3
        assert kinds[-1] == "exit" and events[-1]["code"] == 0
        out.wait_for("stdout", "ran to the end")
        assert child.wait(20) == 0
    finally:
        child.close()


def test_ui_modules_never_import_torch() -> None:
    code = textwrap.dedent(
        """\
        import sys
        import backstep.tui, backstep.tui.app, backstep.tui.runtime.replay_driver, backstep.tui.runtime.live_link, backstep.process.launcher
        import backstep.commands.run, backstep.cli
        backstep.cli.build_parser()
        from backstep.tui.app import BackstepApp
        from backstep.tui.runtime.live_driver import LiveDriver
        BackstepApp(LiveDriver(None))
        bad = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
        assert not bad, bad
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_debuggee_imports_nothing_from_the_working_directory(tmp_path: Path) -> None:
    """``python -m`` put the working directory first on sys.path while the debuggee started:
    a ``secrets.py`` there ran, where ``python /abs/script.py`` never looks. The script still
    sees python's sys.path: its own directory first."""
    work, code = tmp_path / "work", tmp_path / "code"
    work.mkdir()
    code.mkdir()
    for name in ("secrets", "json", "socket", "selectors", "argparse", "backstep"):
        (work / f"{name}.py").write_text(f"open({str(tmp_path / 'planted')!r}, 'a').write("
                                         f"{name!r})\nfrom random import *\n")
    script = code / "s.py"
    script.write_text("import sys\nprint(sys.path[0], sys.argv)\n")
    out = Collector()
    child = Debuggee(debuggee_command(str(script), ["a"]), on_output=out, cwd=str(work))
    child.start()
    try:
        channel = child.accept(timeout=60)
        assert channel is not None and channel.receive()["event"] == "session"
        channel.send({"cmd": "start", "breakpoints": [], "stop_at_pass_start": True})
        while channel.receive() is not None:
            pass
        out.wait_for("stdout", f"{code} ['{script}', 'a']")
        assert child.wait(20) == 0
    finally:
        child.close()
    assert not (tmp_path / "planted").exists()
