"""Fuzz: a fixed, seeded stream of random commands at a paused debuggee. Whatever arrives, it
answers every one, keeps serving the pause, and once released finishes the pass with exactly
the gradients plain PyTorch computes."""

from __future__ import annotations

import json
import queue
import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from backstep import protocol
from backstep.events.breakpoints import KINDS as BREAKPOINT_KINDS
from backstep.events.commands import COMMANDS
from backstep.process import transport
from backstep.process.launcher import Debuggee, debuggee_command

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Unix sockets")

SEED = 20261123
COUNT = 400
PROBE_EVERY = 50

SCRIPT = textwrap.dedent("""\
    import torch
    torch.manual_seed(0)
    w = torch.randn(4, 3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    x = torch.randn(5, 4)
    loss = torch.tanh(x @ w + b).pow(2).sum()
    loss.backward()
    print("grads", [v.hex() for v in w.grad.flatten().tolist()],
          [v.hex() for v in b.grad.tolist()])
""")

# Commands that would legitimately end the pause or the pass: they only ever appear mangled.
RESUMING = ("step", "continue", "finish", "abort", "detach")
HARMLESS = sorted(COMMANDS - set(RESUMING))


def junk(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON value: wrong types, extreme numbers, odd and huge strings, nested junk."""
    kind = rng.randrange(12 if depth < 4 else 8)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31, 2**53 + 1, 2**63, -(2**64), 10**30, 10**300])
    if kind == 3:
        return rng.choice([0.5, -0.0, 1e308, -1e308, 5e-324, 1e-300, 3.0])
    if kind == 4:
        return rng.choice(["", "x", "é" * 40, "\ud800", "\x00", "nan", "inf", "-inf",
                           "MulBackward0", "model.*", "grad_inputs", "../../etc/passwd"])
    if kind == 5:
        return rng.choice(["a", "é", "\u202e"]) * rng.choice([1000, 100_000])
    if kind == 6:
        return rng.choice([[], {}])
    if kind == 7:
        return rng.choice([*BREAKPOINT_KINDS, "launch"])
    if kind < 10:
        return [junk(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["kind", "pattern", "name", "above", "req", "cmd", "x"]):
            junk(rng, depth + 1) for _ in range(rng.randrange(4))}


def breakpoint_like(rng: random.Random) -> Any:
    if rng.random() < 0.3:
        return junk(rng)
    kind = rng.choice([*BREAKPOINT_KINDS, "nope", None, []])
    bp: dict[str, Any] = {"kind": kind}
    for key in ("pattern", "name", "above"):
        if rng.random() < 0.5:
            bp[key] = rng.choice([junk(rng), "*", 1e3, float("inf"), 10**400, -5])
    return bp


def fuzz_command(rng: random.Random, stop: dict[str, Any]) -> bytes:
    """One line: raw garbage now and then, otherwise a structured command, valid or not."""
    roll = rng.random()
    if roll < 0.08:
        return rng.choice([
            b"garbage\n", b"\xff\xfe\x00\n", b"[1, 2, 3]\n", b"42\n", b'"cmd"\n', b"\n",
            b'{"cmd": "tensor", "req": NaN}\n', b'{"cmd": "options", "x": Infinity}\n',
            b'{"cmd": "break", "breakpoints": [{"kind": "norm", "above": 1e400}]}\n',
            b'{"cmd": "tensor", "req": 1e400, "pass": 1, "node": 1, "slot": "grad_inputs", '
            b'"index": 0}\n',
            b'{"cmd": "tensor", "req": ' + b"9" * 5000 + b"}\n",
            b"[" * 100_000 + b"]" * 100_000 + b"\n",
            b'{"cmd": "' + b"x" * (protocol.MAX_COMMAND_LINE + 10) + b'"}\n',
        ])
    if roll < 0.15:
        cmd: Any = rng.choice([["continue"], "Continue", "continue ", "abort\x00", {"cmd": "step"},
                               None, 1, junk(rng)])
    else:
        cmd = rng.choice(HARMLESS + ["launch", ""])
    message: dict[str, Any] = {"cmd": cmd}
    if cmd in ("break", "start") or rng.random() < 0.1:
        message["breakpoints"] = rng.choice([
            [breakpoint_like(rng) for _ in range(rng.randrange(5))], junk(rng)])
    if cmd in ("options", "start") or rng.random() < 0.1:
        message["stop_at_pass_start"] = rng.choice([True, False, junk(rng)])
    if cmd == "tensor" or rng.random() < 0.1:
        message.update({
            "req": rng.choice([rng.randrange(1000), junk(rng)]),
            "pass": rng.choice([stop["pass"], junk(rng)]),
            "node": rng.choice([stop["id"], junk(rng)]),
            "slot": rng.choice(["grad_outputs", "grad_inputs", junk(rng)]),
            "index": rng.choice([0, 1, -1, 10**18, junk(rng)]),
        })
        for key in ("offset", "limit"):
            if rng.random() < 0.5:
                message[key] = rng.choice([0, 5, 10**15, -3, junk(rng)])
    for _ in range(rng.randrange(3)):
        message[rng.choice(["x", "req", "extra", "é"])] = junk(rng)
    return json.dumps(message).encode() + b"\n"


class Events:
    """Everything the debuggee says, read on a thread so it never blocks on a full socket."""

    def __init__(self, channel: transport.Channel) -> None:
        self.queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, args=(channel,), daemon=True).start()

    def _read(self, channel: transport.Channel) -> None:
        while (event := channel.receive()) is not None:
            self.queue.put(event)
        self.queue.put(None)

    def until(self, accept: Any, timeout: float = 60.0) -> dict[str, Any]:
        end = time.monotonic() + timeout
        while True:
            try:
                event = self.queue.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError("the debuggee stopped answering") from None
            assert event is not None, "the debuggee hung up"
            self.seen.append(event)
            if accept(event):
                return event


def test_random_commands_never_break_a_paused_debuggee(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    output: list[str] = []
    child = Debuggee(debuggee_command(str(script), []), cwd=str(tmp_path),
                     on_output=lambda text, stream: output.append(text) if stream == "stdout"
                     else None)
    child.start()
    try:
        channel = child.accept(timeout=60)
        assert channel is not None
        channel.sock.settimeout(60)  # a debuggee that stops reading fails the test, not hangs it
        events = Events(channel)
        events.until(lambda e: e["event"] == "session")
        channel.send({"cmd": "start", "breakpoints": [], "stop_at_pass_start": True})
        stop = events.until(lambda e: e["event"] == "stopped", timeout=120)

        rng = random.Random(SEED)
        for k in range(COUNT):
            channel.sock.sendall(fuzz_command(rng, stop))
            if k % PROBE_EVERY == PROBE_EVERY - 1:  # still serving the pause?
                req = 10**6 + k
                channel.send({"cmd": "tensor", "req": req, "pass": stop["pass"],
                              "node": stop["id"], "slot": "grad_outputs", "index": 0})
                answer = events.until(lambda e, req=req: e.get("req") == req)
                assert answer["event"] == "tensor", answer
        replies = [e for e in events.seen if e["event"] == "error"]
        assert len(replies) > COUNT // 2
        assert max(len(protocol.encode(e)) for e in replies) < 1000  # nothing echoed back

        # release: whatever breakpoints and interrupts the fuzz left set, continue to the end
        channel.send({"cmd": "break", "breakpoints": []})
        channel.send({"cmd": "options", "stop_at_pass_start": False})
        channel.send({"cmd": "continue"})
        for _ in range(100):
            event = events.until(lambda e: e["event"] in ("stopped", "exit"))
            if event["event"] == "exit":
                break
            channel.send({"cmd": "continue"})
        assert event["event"] == "exit" and event["code"] == 0, event
        ends = [e for e in events.seen if e["event"] == "pass_end"]
        assert [e["status"] for e in ends] == ["ok"]
        assert child.wait(60) == 0
        child.wait_output(5)
        assert "".join(output) == plain.stdout  # the very same gradients, bit for bit
    finally:
        child.close()
