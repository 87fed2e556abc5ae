"""The reader thread: protocol events in, snapshot messages out.

Modelled on memray's live mode: one thread blocks on the socket, folds each event into the
``SessionModel`` and posts immutable snapshots to the app. While the debuggee runs freely it can
send thousands of ``node`` events a second, so snapshots are coalesced: one at once for events
that change what a person acts on (a stop, a pass boundary, the exit), otherwise at most one per
``interval``, and never for a lone event: a step sends its node event just before the stop, and
drawing the two apart would cost a second full refresh per step. ``flush()`` (called from an app
timer) publishes whatever is left.

While nothing is stopped (``f``, ``c``: the debuggee runs through thousands of nodes nobody is
looking at), progress is drawn at most once per ``running_interval``: each snapshot redraws the
panels, and a 6,380-node pass drawn every 50 ms spent more time in the UI than in recording.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from textual.message import Message

from backstep import protocol
from backstep.events.form import expand
from backstep.events.spec import URGENT, check
from backstep.tui.messages import (
    Evaluated,
    InputWanted,
    ServerError,
    SnapshotReady,
    TensorAnswer,
)
from backstep.tui.state import node_line
from backstep.tui.state.model import SessionModel

# ``f`` and ``c`` run through passes: their starts and ends are progress like their nodes, drawn
# with the stop that follows (a pass end and the next pass's start were two full redraws, one
# of them 0.12 s, just before that stop's)
THROUGH = frozenset({"pass_begin", "pass_end"})


class EventSource(Protocol):
    def receive(self) -> dict[str, Any] | None: ...


def _reread(parse: Callable[[bytes], Any], line: bytes) -> dict[str, Any] | None:
    """An event read again from its line as ``Reader.run`` read it, or None if it no longer
    reads as it did (it always does: the same bytes, the same steps)."""
    try:
        event = parse(line)
    except protocol.ProtocolError:
        return None
    if isinstance(event, dict):
        event = expand(event)
    return event if check(event) is None else None


class Reader:
    """Owns the session model; safe to feed from one thread and flush from another."""

    def __init__(self, post: Callable[[Message], Any], interval: float = 0.05,
                 running_interval: float = 1.0) -> None:
        self.post = post
        self.interval = interval
        self.running_interval = running_interval
        self.model = SessionModel()
        self._lock = threading.Lock()
        self._dirty = False
        self._last_post = 0.0
        self._running = False  # resumed by the person (``resumed``) and not stopped since
        self._through = False  # resumed to run through passes (``f``, ``c``), not a step
        self.thread: threading.Thread | None = None

    def feed(self, event: dict[str, Any], line: bytes | None = None) -> None:
        """Apply one event and post what the UI needs to see; ``line``, the text it was read
        from, if the source can read it again (``run``)."""
        kind = event.get("event")
        if kind == "tensor":
            self.post(TensorAnswer(event))
            return
        if kind == "evaluated":
            self.post(Evaluated(event))
            return
        if kind == "input":
            self.post(InputWanted())
            return
        if kind == "error":
            req = event.get("req")
            self.post(ServerError(str(event.get("message", "error")),
                                  req if isinstance(req, int) else None))
            return
        with self._lock:
            if kind in ("stopped", "exit"):
                self._running = self._through = False
            changed = self.model.apply(event, line)
            if not changed:
                return
            now = time.monotonic()
            # a lone event waits for the next one (or flush): the node event that comes just
            # before each stop is then drawn with the stop, once, not on its own first
            urgent = kind in URGENT and not (self._through and kind in THROUGH)
            if urgent or (self._dirty and now - self._last_post >= self._every()):
                self._publish(now)
            else:
                self._dirty = True

    def resumed(self, through: bool = False) -> None:
        """The person resumed the shown stop (``n``, ``c``, ``f``): until the next stop, the
        debuggee runs and its progress is drawn at ``running_interval``; ``through`` (``c``,
        ``f``): pass starts and ends too."""
        with self._lock:
            self._running = True
            self._through = through

    def _stopped(self) -> bool:
        return not self._running and self.model.stop is not None

    def _every(self) -> float:
        """How long a snapshot may wait: a person reads a stop, not a pass running through."""
        return self.interval if self._stopped() else self.running_interval

    def flush(self, force: bool = False) -> None:
        """Publish a pending snapshot (the app calls this on a timer): at once at a stop or
        when ``force``d, else once ``running_interval`` has passed since the last one."""
        with self._lock:
            now = time.monotonic()
            if self._dirty and (force or self._stopped()
                                or now - self._last_post >= self.running_interval):
                self._publish(now)

    def _publish(self, now: float) -> None:
        self._dirty = False
        self._last_post = now
        self.post(SnapshotReady(self.model.snapshot()))

    def run(self, source: EventSource) -> None:
        """Read until the stream ends; garbage is reported, never fatal. The caller posts
        ``Disconnected`` once it knows how the debuggee ended.

        A source that can parse a line again (``Channel``: ``last_line``, ``parse``) lets the
        model keep a node event as that line, read again (and checked again) when a panel
        wants it: kept decoded, a pass's node events are ~100,000 objects that every full
        garbage collection walked, most of the reader's time on a 6,380-node pass. One that
        also hands over its lines (``receive_line``) has a node event in the recorder's own
        form read without decoding it (``node_line``): decoding and checking it in full was
        most of what was left."""
        parse = getattr(source, "parse", None)
        lines = None
        if callable(parse):
            self.model.reread = lambda line: _reread(parse, line)
            lines = getattr(source, "receive_line", None)
        while True:
            line: bytes | None = None
            try:
                if callable(lines):
                    line = lines()
                    event = None if line is None else node_line.read(line) or parse(line)
                else:
                    event = source.receive()
            except protocol.ProtocolError as exc:
                self.post(ServerError(f"unreadable message from the debuggee: {exc}"))
                continue
            except Exception as exc:  # noqa: BLE001 - the reader must never die silently
                self.post(ServerError(f"event stream failed: {exc!r}"))
                break
            if event is None:
                break
            if type(event) is not node_line.NodeFields:  # read in full: checked here
                if isinstance(event, dict):  # node events come in batches written as a file
                    event = expand(event)  # has them (``events.form``): the defaults put back
                malformed = check(event)
                if malformed is not None:  # a peer's event the panels cannot read: skipped
                    self.post(ServerError(f"malformed event from the debuggee: {malformed}"))
                    continue
            try:
                self.feed(event, line or getattr(source, "last_line", None) or None)
            except Exception as exc:  # noqa: BLE001
                self.post(ServerError(f"could not show event {event.get('event')!r}: {exc!r}"))
        self.flush(force=True)

    def start(self, source: EventSource) -> threading.Thread:
        self.thread = threading.Thread(target=self.run, args=(source,), name="backstep-reader",
                                       daemon=True)
        self.thread.start()
        return self.thread
