"""``backstep show A --against B``: B's numbers for the node of A that is shown.

The replay steps through A; this looks up the node of B at the same graph position (the
alignment ``backstep diff`` uses: pass by pass in order, node by node by the path of ``next``
slots from the roots) and gives its recorded gradients. One pass of each trace is kept.
"""

from __future__ import annotations

from typing import Any

from backstep.traces.diff import Tolerance, diff, positions
from backstep.traces.index import TraceIndex
from backstep.traces.report import finding_lines


class Against:
    """Trace B beside trace A: the diff's first difference, and B's node for any node of A."""

    def __init__(self, a: TraceIndex, b: TraceIndex, tol: Tolerance | None = None) -> None:
        self.a, self.b = a, b
        self.report: dict[str, Any] = diff(a, b, tol or Tolerance())
        self._pass: int | None = None
        self._aligned: dict[int, dict[str, Any] | None] = {}
        self._birth: int | None = None  # A's node id where the difference is, in that pass

    @property
    def difference(self) -> dict[str, Any] | None:
        """The diff's first difference (``what``, ``pass``, ``step``, ...), None when same."""
        return self.report["difference"]

    def _align(self, number: int) -> None:
        """B's node event for every node id of A's pass ``number``."""
        self._pass, self._aligned, self._birth = number, {}, None
        numbers_a, numbers_b = self.a.numbers(), self.b.numbers()
        if number not in numbers_a or numbers_a.index(number) >= len(numbers_b):
            return
        pa, pb = self.a.read(number), self.b.read(numbers_b[numbers_a.index(number)])
        found = self.difference
        if found is not None and found.get("pass") == number and found.get("step") is not None:
            self._birth = next((e["id"] for e in pa.steps if e.get("step") == found["step"]),
                               None)
        places: dict[tuple[int, int], int] = {}  # one numbering of paths for both passes
        by_position = {p: i for i, p in positions(pb.begin, places).items()}
        steps_b = {e["id"]: e for e in pb.steps}
        for node_id, position in positions(pa.begin, places).items():
            other = by_position.get(position)
            self._aligned[node_id] = steps_b.get(other) if other is not None else None

    def node(self, number: int, node_id: int) -> dict[str, Any] | None:
        """B's recorded ``node`` event aligned with node ``node_id`` of A's pass ``number``
        (None when B has no such node, or never ran it)."""
        if self._pass != number:
            self._align(number)
        return self._aligned.get(node_id)

    def reason(self, number: int, node_id: int) -> list[str] | None:
        """The diff's full finding (what differs, both sides' numbers, what it implies, an
        earlier cause) when node ``node_id`` of A's pass ``number`` is where it is born."""
        if self._pass != number:
            self._align(number)
        if self._birth is None or self._birth != node_id or self.difference is None:
            return None
        return finding_lines(self.difference, self.report.get("cause"))
