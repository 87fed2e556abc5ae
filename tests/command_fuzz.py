"""Seeded random commands for fuzzing a paused debuggee: junk values, breakpoint-like dicts, and
commands that never resume the pass."""

from __future__ import annotations

import json
import random
from typing import Any

from backstep import protocol
from backstep.events.breakpoints import KINDS as BREAKPOINT_KINDS
from backstep.events.commands import COMMANDS

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
