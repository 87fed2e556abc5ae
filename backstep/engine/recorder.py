"""Where events go: a JSON-lines file for ``backstep trace``, a list for tests."""

from __future__ import annotations

import threading
from typing import IO, Any, Protocol

from backstep.protocol import encode


class Sink(Protocol):
    def emit(self, event: dict[str, Any]) -> None: ...

    def flush(self) -> None: ...


class JsonlRecorder:
    """Appends events to a binary file, one strict-JSON line each; thread-safe."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self._lock = threading.Lock()

    def emit(self, event: dict[str, Any]) -> None:
        data = encode(event)
        with self._lock:
            try:
                self.stream.write(data)
            except (OSError, ValueError):
                pass  # a full disk or a closed file must never break the user's script

    def flush(self) -> None:
        with self._lock:
            try:
                self.stream.flush()
            except (OSError, ValueError):
                pass


class ListRecorder:
    """Keeps events in memory (tests)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def flush(self) -> None:
        pass

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == kind]
