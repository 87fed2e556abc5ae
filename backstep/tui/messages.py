"""Messages the reader thread and the launcher post to the app (``post_message`` is thread-safe)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from backstep.tui.state.snapshot import Snapshot


@dataclass
class SnapshotReady(Message):
    """A new immutable view of the session."""

    snapshot: Snapshot


@dataclass
class ConsoleOutput(Message):
    """Bytes the script wrote to its stdout or stderr, decoded."""

    text: str
    stream: str


@dataclass
class TensorAnswer(Message):
    """The debuggee's answer to a ``tensor`` command."""

    event: dict[str, Any]


@dataclass
class Evaluated(Message):
    """The debuggee's answer to an ``eval`` command (the expression console)."""

    event: dict[str, Any]


@dataclass
class ServerError(Message):
    """The debuggee could not serve a command, or sent something the UI cannot read."""

    message: str
    req: int | None = None


@dataclass
class Disconnected(Message):
    """The event stream ended: the debuggee closed the socket or died."""

    returncode: int | None = None


@dataclass
class InputWanted(Message):
    """The script waits for a line on its stdin: the console offers an input line."""
