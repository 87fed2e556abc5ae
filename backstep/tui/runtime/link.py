"""The app's way to the debuggee, as protocols: a ``Link`` (a socket in real use, a recorder in
tests) and what a link uses of the app it serves (``LinkedApp``).

Kept apart from the app so that a link (``live_link.py``, ``process/attach/ui.py``,
``commands/connect.py``) types the app it serves without importing it.
"""

from __future__ import annotations

from typing import Any, Protocol

from textual.message import Message

from backstep.tui.runtime.reader import Reader


class LinkedApp(Protocol):
    """What a link reaches of the app: the reader it runs and the messages it posts."""

    reader: Reader

    def post_message(self, message: Message) -> bool: ...

    def start_message(self) -> dict[str, Any]: ...


class Link(Protocol):
    """The app's way to the debuggee."""

    def open(self, app: LinkedApp) -> None:
        """Start the debuggee and the reader (called once the app is mounted)."""

    def send(self, message: dict[str, Any]) -> bool:
        """Send one command; False when the debuggee is gone."""

    def close(self) -> None:
        """End the debuggee's session (the app is quitting)."""

    def returncode(self) -> int | None:
        """The debuggee process's exit status, once it has ended."""
