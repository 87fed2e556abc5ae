"""Fuzz: a fixed, seeded stream of random commands at a paused debuggee. Whatever arrives, it
answers every one, keeps serving the pause, and once released finishes the pass with exactly
the gradients plain PyTorch computes."""

from __future__ import annotations

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
from backstep.process import transport
from backstep.process.launcher import Debuggee, debuggee_command
from tests.command_fuzz import fuzz_command

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
