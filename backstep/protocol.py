"""The event and command schema both sides share: stdlib only, JSON only.

Events flow from the debuggee (the process running the user's script) to whoever consumes them: a
trace file, the live UI, a test. Commands flow from the UI to the debuggee while it is paused.

Every message is one JSON object on one line. Events carry ``"event"``, commands ``"cmd"``.
Floats that are not finite (NaN, +-Inf) are written as the strings ``"nan"``, ``"inf"``,
``"-inf"`` so every line is strict JSON that jq and browsers accept.

Events (DESIGN.md names the first five; do not rename them):
  session     version, torch, argv, pid, python; rank, local_rank, world_size (as the launcher
              set RANK, LOCAL_RANK, WORLD_SIZE; null outside one) and hostname. argv is
              ["-m", module, ...] for a module run as ``python -m`` would
  process_group  backend, rank, world_size, timeout (collective timeout in seconds, or null):
              once, just before the first pass_begin that runs under an initialized
              torch.distributed default group (the group comes up after the session event)
  pass_begin  pass, parent (pass number or null), api ("backward" | "grad"), retain_graph,
              create_graph, roots (ids), inputs (ids or null), thread, leaves (the leaves' ids
              in model order: as ``named_parameters()`` lists them; absent in a pass without
              leaves), nodes (list of node infos)
  node        pass, step, id, name, grad_outputs, grad_inputs, saved, error (message or null)
              thread: only when the node ran on another thread than the one its pass_begin
              names (a CUDA device thread); absent means that same thread
  accumulate  pass, leaf, id, before, after, retained (True for a non-leaf's retain_grad)
  pass_end    pass, status ("ok" | "error"), error, skipped (ids)
  stopped     pass, step, id, name, reason, detail, grad_outputs, saved  (live UI only: the
              debuggee is paused before node ``id`` and waits for a command); also stop (a
              number unique to this pause), thread (the name of the paused thread) and device
              (the gradient's device, or null)
  waiting     stops: [{stop, pass, step, id, name, thread, device}] — the other paused threads,
              in line behind the shown stop, longest waiting first (sent when the line changes)
  diagnosis   pass, kind, message, node, source
  tensor      req, ... the answer to a ``tensor`` command
  evaluated   req, ok (False: the text is a traceback), text: the answer to an ``eval``
  edit        pass, step, id, name, stop, slot ("grad_outputs" | "grad_inputs"), what (the edit,
              e.g. "zero_nonfinite()"), indices, before, after (summaries of the edited
              gradients): the person replaced a gradient at a stop, for the rest of the pass
  input       the script is about to wait on its stdin (the console offers an input line)
  output      stream ("stdout" | "stderr"), text, truncated (optional, True at the trace's
              output cap): what the script printed, whole lines, in order with the pass events
              (``backstep trace`` only; the live UI reads the script's pipes instead)
  exit        code: the script ended (normally, by sys.exit, or by an uncaught exception)
  error       message, req: a command could not be served

Commands (UI -> debuggee):
  start       breakpoints, stop_at_pass_start   (sent once, after hello, before the script runs)
  step | continue | finish | abort   stop (optional): the stop it is meant for; a command for a
              stop that is no longer shown is answered with an error and does nothing
  detach | interrupt
  break       breakpoints: replaces the whole list
  options     stop_at_pass_start
  tensor      req, pass, node, slot ("grad_outputs" | "grad_inputs"), index, offset, limit
  eval        req, source, stop (optional): run a line of Python in the paused thread (the
              expression console); answered by ``evaluated``. It is code execution in the
              script's process, by design: whoever holds the UI's connection may run anything
  cancel      interrupt the ``eval`` running now (KeyboardInterrupt in the evaluating thread)
  stdin       data: a line typed for the script ("" = end of input). Under ``attach()`` only,
              where the UI holds the terminal; it is taken before validation and never reaches
              the controller. Under ``backstep run`` the script's stdin is a pipe from the UI.
"""

from __future__ import annotations

import json
import math
import reprlib
from typing import Any

VERSION = 2  # 2: trace files leave out keys at their default value (backstep/trace_form.py)

EVENTS = frozenset(
    {
        "hello",
        "session",
        "process_group",
        "pass_begin",
        "node",
        "accumulate",
        "pass_end",
        "stopped",
        "diagnosis",
        "tensor",
        "evaluated",
        "edit",
        "waiting",
        "input",
        "output",  # the script's prints: in a trace (traces/output), to a remote UI (remote_output)
        "challenge",  # the remote UI's handshake (process/auth)
        "welcome",
        "exit",
        "error",
    }
)

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

# Why the debuggee stopped (the ``reason`` of a ``stopped`` event).
STOP_REASONS = ("pass_start", "step", "breakpoint", "interrupt", "nonfinite", "norm")

# Breakpoint kinds and the one field each takes.
BREAKPOINT_FIELDS = {
    "node": "pattern",  # glob on the node name: "MulBackward*"
    "module": "pattern",  # glob on the module path: "model.encoder.*"
    "leaf": "name",  # a leaf's name: stops before its AccumulateGrad
    "nonfinite": None,  # a node produced a NaN/Inf gradient
    "norm": "above",  # a gradient's norm is above this value
}

# The longest line either side accepts; anything longer is answered with an error and dropped.
# Events (a pass_begin lists every node of a graph) can be large; commands never are.
MAX_LINE = 16 * 1024 * 1024
MAX_COMMAND_LINE = 1024 * 1024

# An error reply quotes at most this much of what it refuses (a 16 MB line must not echo back).
MAX_ERROR_TEXT = 300

# Integers in commands (request ids, pass and node ids, indices) stay within what every consumer
# of the protocol can hold exactly; a number beyond that is refused, not overflowed later.
MAX_INT = 2**53


class ProtocolError(ValueError):
    """A message that is not valid JSON or does not fit the schema."""


def clean_number(x: float) -> float | str:
    """A float as JSON can carry it: non-finite values become strings."""
    if math.isfinite(x):
        return x
    if math.isnan(x):
        return "nan"
    return "inf" if x > 0 else "-inf"


def encode(message: dict[str, Any]) -> bytes:
    """One message as one strict-JSON line (bytes, newline-terminated)."""
    return (json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n").encode()


def decode(line: bytes | str) -> dict[str, Any]:
    """Parse one line into a message dict; raise ProtocolError for anything else."""
    if isinstance(line, bytes):
        if len(line) > MAX_LINE:
            raise ProtocolError("message too long")
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"not UTF-8: {exc}") from None
    try:
        message = _DECODER.decode(line)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message must be a JSON object")
    return message


def _reject_constant(name: str) -> Any:
    raise ProtocolError(f"non-standard JSON constant {name}")


# one decoder for every line: ``json.loads`` with an option builds a new one per call, a quarter
# of the decoding time of a big pass's thousands of node events
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


_quoter = reprlib.Repr()  # keyword arguments arrive in Python 3.12
_quoter.maxlevel, _quoter.maxdict, _quoter.maxlist, _quoter.maxstring = 3, 4, 4, 60
_quoter.maxlong, _quoter.maxother = 40, 60


def quote(value: Any) -> str:
    """A short repr of any value for an error message: nested and huge values are abridged."""
    try:
        text = _quoter.repr(value)
    except Exception:  # noqa: BLE001 - quoting must never be what fails
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 100 else text[:97] + "..."


def error_event(message: str, req: int | None = None) -> dict[str, Any]:
    """An ``error`` event whose text is never longer than MAX_ERROR_TEXT characters."""
    if len(message) > MAX_ERROR_TEXT:
        message = message[: MAX_ERROR_TEXT - 3] + "..."
    return {"event": "error", "message": message, "req": req}


def describe(exc: BaseException) -> str:
    """An exception as an error reply's text: a ProtocolError says it all, others name their
    type (the reply is cut to MAX_ERROR_TEXT by ``error_event``)."""
    if isinstance(exc, ProtocolError):
        return str(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _is_int(value: Any) -> bool:
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
            if not _is_int(message.get(key)):
                raise ProtocolError(f"tensor: {key} must be an integer")
        if message.get("slot") not in ("grad_outputs", "grad_inputs"):
            raise ProtocolError("tensor: slot must be grad_outputs or grad_inputs")
        for key in ("offset", "limit"):
            value = message.get(key, 0)
            if not _is_int(value) or value < 0:
                raise ProtocolError(f"tensor: {key} must be a non-negative integer")
    if cmd == "eval":
        if not _is_int(message.get("req")):
            raise ProtocolError("eval: req must be an integer")
        if not isinstance(message.get("source"), str):
            raise ProtocolError("eval: source must be a string")
    return message


def validate_breakpoints(breakpoints: Any) -> list[dict[str, Any]]:
    """Check a breakpoint list; return it, or raise ProtocolError (never anything else)."""
    if not isinstance(breakpoints, list):
        raise ProtocolError("breakpoints must be a list")
    for bp in breakpoints:
        kind = bp.get("kind") if isinstance(bp, dict) else None
        if not isinstance(kind, str) or kind not in BREAKPOINT_FIELDS:
            raise ProtocolError(f"bad breakpoint {quote(bp)}")
        field = BREAKPOINT_FIELDS[kind]
        if field == "above":
            value = bp.get("above")
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ProtocolError("a norm breakpoint needs a number 'above'")
            try:
                finite = math.isfinite(float(value))
            except OverflowError:
                finite = False
            if not finite:
                raise ProtocolError("a norm breakpoint needs a finite number 'above'")
        elif field is not None and not isinstance(bp.get(field), str):
            raise ProtocolError(f"a {kind} breakpoint needs a string {field!r}")
    return breakpoints


def parse_breakpoint(spec: str) -> dict[str, Any]:
    """A breakpoint from its command-line form.

    ``MulBackward*`` or ``node:MulBackward*`` (node-name glob), ``module:model.encoder.*``,
    ``leaf:model.fc.weight``, ``nonfinite``, ``norm:1e3``.
    """
    kind, sep, value = spec.partition(":")
    if not sep:
        if spec == "nonfinite":
            return {"kind": "nonfinite"}
        if "." in spec and not spec.endswith("Backward") and "Backward" not in spec:
            return {"kind": "module", "pattern": spec}
        return {"kind": "node", "pattern": spec}
    if kind not in BREAKPOINT_FIELDS:
        raise ProtocolError(f"unknown breakpoint kind {quote(kind)} in {quote(spec)}")
    field = BREAKPOINT_FIELDS[kind]
    if field is None:
        return {"kind": kind}
    if field == "above":
        try:
            above = float(value)
        except ValueError:
            raise ProtocolError(f"norm breakpoint needs a number, not {quote(value)}") from None
        if not math.isfinite(above):
            raise ProtocolError(f"norm breakpoint needs a finite number, not {quote(value)}")
        return {"kind": kind, "above": above}
    if not value:
        raise ProtocolError(f"breakpoint {quote(spec)} needs a value after ':'")
    return {"kind": kind, field: value}
