"""The commands a UI sends the debuggee while it runs or is paused, and their check.

Every command is one JSON object on one line with ``"cmd"``:

  start       breakpoints, stop_at_pass_start   (sent once, after hello, before the script runs)
  step | continue | finish | abort   stop (optional): the stop it is meant for; a command for a
              stop that is no longer shown is answered with an error and does nothing
  detach | interrupt
  break       breakpoints: replaces the whole list (``events.breakpoints``)
  options     stop_at_pass_start
  tensor      req, pass, node, slot ("grad_outputs" | "grad_inputs"), index, offset, limit
  eval        req, source, stop (optional): run a line of Python in the paused thread (the
              expression console); answered by ``evaluated``. It is code execution in the
              script's process, by design: whoever holds the UI's connection may run anything
  cancel      interrupt the ``eval`` running now (KeyboardInterrupt in the evaluating thread)
  stdin       data: a line typed for the script ("" = end of input). Under ``attach()`` only,
              where the UI holds the terminal; it is taken before validation and never reaches
              the controller. Under ``backstep run`` the script's stdin is a pipe from the UI.

Stdlib only.
"""

from __future__ import annotations

from typing import Any

from backstep.events.breakpoints import validate_breakpoints
from backstep.protocol import MAX_INT, ProtocolError, quote

COMMANDS = frozenset(
    {
        "start",
        "step",
        "continue",
        "finish",
        "abort",
        "detach",
        "interrupt",
        "break",
        "options",
        "tensor",
        "eval",
        "cancel",
    }
)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_INT <= value <= MAX_INT


def validate_command(message: Any) -> dict[str, Any]:
    """Check a command's name and fields; return it, or raise ProtocolError (never anything
    else, whatever the message holds)."""
    if not isinstance(message, dict):
        raise ProtocolError("a command must be a JSON object")
    cmd = message.get("cmd")
    if not isinstance(cmd, str) or cmd not in COMMANDS:
        raise ProtocolError(f"unknown command {quote(cmd)}")
    if cmd in ("start", "break") and "breakpoints" in message:
        validate_breakpoints(message["breakpoints"])
    if cmd in ("start", "options") and "stop_at_pass_start" in message:
        if not isinstance(message["stop_at_pass_start"], bool):
            raise ProtocolError("stop_at_pass_start must be true or false")
    if "stop" in message and cmd in ("step", "continue", "finish", "abort", "tensor", "eval"):
        stop = message["stop"]
        if not isinstance(stop, int) or isinstance(stop, bool):
            raise ProtocolError(f"{cmd}: stop must be an integer")
    if cmd == "tensor":
        for key in ("req", "pass", "node", "index"):
            if not is_int(message.get(key)):
                raise ProtocolError(f"tensor: {key} must be an integer")
        if message.get("slot") not in ("grad_outputs", "grad_inputs"):
            raise ProtocolError("tensor: slot must be grad_outputs or grad_inputs")
        for key in ("offset", "limit"):
            value = message.get(key, 0)
            if not is_int(value) or value < 0:
                raise ProtocolError(f"tensor: {key} must be a non-negative integer")
    if cmd == "eval":
        if not is_int(message.get("req")):
            raise ProtocolError("eval: req must be an integer")
        if not isinstance(message.get("source"), str):
            raise ProtocolError("eval: source must be a string")
    return message
