"""The script's output, recorded into a trace beside its passes (``backstep trace``).

``sys.stdout`` and ``sys.stderr`` are wrapped while the script runs: every write goes to the real
stream first, unchanged (same text, same stream, same buffering), and a copy is written to the
trace as ``output`` events ({"event": "output", "stream": "stdout" | "stderr", "text": ...}),
whole lines at a time, in order with the pass events. A trace keeps at most ``LIMIT`` characters
of output; one ``output`` event with ``"truncated": true`` marks the cut. Writes that bypass
``sys.stdout`` (``os.write(1, ...)``, C extensions, ``sys.stdout.buffer``) are not recorded.
Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

LIMIT = 1 << 20  # characters of output recorded per trace
PARTIAL = 1 << 14  # a line is recorded in pieces of this many characters until it ends


class _Budget:
    """The characters left to record, shared by both streams."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.marked = False  # the truncation was recorded
        self.lock = threading.Lock()

    def renew(self) -> None:
        self.lock = threading.Lock()


class CopyingStream:
    """Stands in for a text stream: every write reaches it first, unchanged (its errors are its
    own), then ``_copy`` gets the text; everything else (``fileno``, ``isatty``, ``encoding``,
    ``buffer``, ``reconfigure``, ``closed``...) is the real stream's, the context manager
    protocol and ``repr`` included. Shared by the trace's tee and the remote UI's copy."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream = stream
        self._name = name

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        try:
            if isinstance(text, str) and text:
                self._copy(text)
        except Exception:  # noqa: BLE001 - a copy must never break the script's print
            pass
        return written

    def _copy(self, text: str) -> None:
        raise NotImplementedError

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def close(self) -> None:
        """The real stream's close, after the copy of what it flushes (``with sys.stdout:``
        closes stdout, as in plain python)."""
        try:
            if not self._stream.closed:
                self.flush()
        finally:
            self._stream.close()

    def __enter__(self) -> CopyingStream:
        self._stream.__enter__()  # the real one's check: a closed stream refuses
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._stream)

    def __next__(self) -> str:
        return next(self._stream)

    def __repr__(self) -> str:
        return repr(self._stream)


class Tee(CopyingStream):
    """The trace's copy: whole lines, within the trace's budget."""

    def __init__(self, stream: TextIO, name: str, emit: Callable[[dict[str, Any]], None],
                 budget: _Budget) -> None:
        super().__init__(stream, name)
        self._emit = emit
        self._budget = budget
        self._pending: list[str] = []

    def flush(self) -> None:
        self._stream.flush()
        self.settle()

    def _copy(self, text: str) -> None:
        budget = self._budget
        with budget.lock:
            if budget.left <= 0:
                if not budget.marked:
                    budget.marked = True
                    self._emit({"event": "output", "stream": self._name, "text": "",
                                "truncated": True})
                return
            self._pending.append(text)
            if "\n" not in text:
                if sum(map(len, self._pending)) >= PARTIAL:  # a long line without an end
                    joined, self._pending = "".join(self._pending), []
                    self._send(joined)
                return
            joined = "".join(self._pending)
            cut = joined.rindex("\n") + 1
            self._pending = [joined[cut:]] if cut < len(joined) else []
            self._send(joined[:cut])

    def settle(self) -> None:
        """Record a partial last line now (at a flush, and when the script ends)."""
        with self._budget.lock:
            if self._pending and self._budget.left > 0:
                text, self._pending = "".join(self._pending), []
                if text:
                    self._send(text)

    def _send(self, text: str) -> None:
        budget = self._budget
        event: dict[str, Any] = {"event": "output", "stream": self._name,
                                 "text": text[:budget.left]}
        if len(text) > budget.left:
            event["truncated"] = budget.marked = True
        budget.left -= len(text)
        self._emit(event)


@contextlib.contextmanager
def recording(emit: Callable[[dict[str, Any]], None], limit: int = LIMIT) -> Iterator[None]:
    """Tee ``sys.stdout`` and ``sys.stderr`` into ``emit`` for the duration; each is put
    back unless the script replaced it meanwhile."""
    budget = _Budget(limit)
    # a fork while another thread prints must not leave the child a held lock
    os.register_at_fork(after_in_child=budget.renew)
    tees = {}
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None:
            tees[name] = (stream, Tee(stream, name, emit, budget))
            setattr(sys, name, tees[name][1])
    try:
        yield
    finally:
        for name, (stream, tee) in tees.items():
            tee.settle()
            if getattr(sys, name) is tee:
                setattr(sys, name, stream)
