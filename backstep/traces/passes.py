"""What a trace's index finds and reads: the kinds of line it tells apart, where each pass's
lines are (``PassIndex``, ``PassLines``), one pass read (``Pass``), and the errors of a file
that is no trace. Plain data, stdlib only; ``index.py`` fills it in.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from backstep.events.spec import PASS_KINDS

KINDS = PASS_KINDS  # the trace events of one pass (events.spec)
KIND_CODE = {kind: code for code, kind in enumerate(KINDS)}
BYTE_CODE = {kind.encode(): code for kind, code in KIND_CODE.items()}
NODE_CODE = KIND_CODE["node"]


class TraceError(Exception):
    """The file cannot be read as a trace at all (the CLI prints it and exits with code 2)."""


class MalformedEvent(TraceError):
    """An event whose fields do not fit the schema (``events.spec``), read by a strict index:
    ``file:line: field X: expected int, got list``."""


@dataclass
class PassIndex:
    """Where one pass's lines are in the file: the byte range from its ``pass_begin`` to its
    last line (other passes' lines may interleave), a few bytes per pass however long it is."""

    number: int
    first: int = 0  # where its pass_begin line starts
    last: int = 0  # where its last line seen so far ends
    complete: bool = False
    steps: int = 0
    edits: int = 0  # ``edit`` events: gradients the person replaced at a stop (traces/edits)


@dataclass
class PassLines:
    """One pass's lines, in file order: byte offsets and the KINDS code of each, and which of
    them are ``node`` lines. Found up to byte ``found`` so far (``pass_lines(n, nodes)`` looks
    only as far as it needs to: a replay opening a pass needs its first node line only)."""

    starts: array = field(default_factory=lambda: array("q"))
    ends: array = field(default_factory=lambda: array("q"))
    kinds: bytearray = field(default_factory=bytearray)
    nodes: array = field(default_factory=lambda: array("q"))  # indices of the node lines
    found: int = 0  # the byte where the search goes on
    complete: bool = False  # every line of the pass (as far as it is indexed) is found


@dataclass
class Pass:
    """One pass read from the file: its ``pass_begin`` and the events that followed, in order."""

    number: int
    begin: dict[str, Any]
    events: list[dict[str, Any]]
    end: dict[str, Any] | None

    @property
    def nodes(self) -> list[dict[str, Any]]:
        return list(self.begin.get("nodes") or [])

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The ``node`` events, in execution order."""
        return [e for e in self.events if e.get("event") == "node"]
