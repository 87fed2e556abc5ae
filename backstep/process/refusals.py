"""Refused remote-UI connections, logged on the job's stderr without flooding it.

Each refused connection used to write its own line: 500 connects from a port scanner or a
flood wrote 498 lines into the job's log. Now the first refusal after a quiet spell is said in
full; the ones after it are counted, by reason, and summed up in one line per ``WINDOW`` seconds
(and before the line that says a UI attached, and when the server closes).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

WINDOW = 10.0  # seconds between two summary lines


class Refusals:
    """Says refusals through ``log`` (one whole line a call), at most one line per window."""

    def __init__(self, log: Callable[[str], None], window: float = WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.window = window
        self.clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None  # when the current window opened (None: quiet)
        self._why: Counter[str] = Counter()  # refusals counted in it, by reason
        self._last = ""

    def refused(self, who: str, why: str) -> None:
        with self._lock:
            if self._since is None:
                self._since = self.clock()
                line = f"backstep: refused a UI from {who}: {why}"
            else:
                self._why[why] += 1
                self._last = who
                line = self._summary(self.clock(), due=True)
        if line:
            self.log(line)

    def tick(self, *, now: bool = False) -> None:
        """Say the summary if its window is over (``now``: at once, if there is one)."""
        with self._lock:
            line = self._summary(self.clock(), due=not now)
        if line:
            self.log(line)

    def _summary(self, at: float, *, due: bool) -> str:
        if self._since is None or (due and at - self._since < self.window):
            return ""
        if not self._why:
            self._since = None  # a window with nothing more: quiet again
            return ""
        count = sum(self._why.values())
        reasons = ", ".join(f"{n} {why}" for why, n in self._why.most_common())
        line = (f"backstep: refused {count} more UI connection(s) in {at - self._since:.0f} s "
                f"({reasons}); the last from {self._last}")
        self._since, self._why = at, Counter()
        return line
