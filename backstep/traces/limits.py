"""How big one pass may be for ``diff``, ``export`` and ``show`` to read it.

Reading a pass builds Python objects for each of its nodes: about 1.3 KB of memory a node in
``diff``, 1 KB in ``export``, however few bytes the file spends on it. A hostile (or broken)
trace of one pass with 2,000,000 nodes of 66 bytes each (132 MB) cost ``diff`` 2.7 GB and 2
minutes, ``export --dot`` 1.9 GB. So a pass is read only if that cost stays within a small
multiple (``RATIO``) of the bytes it spans in the file, or under ``FLOOR`` whatever its size;
else it is refused in one line before any node is parsed. A real pass spends hundreds of
bytes a node (its forward line, its node event's gradient summaries): never near the limit.
``BACKSTEP_MAX_PASS_NODES=N`` sets the limit in nodes instead, for a pass known to be fine.
"""

from __future__ import annotations

import os

from backstep.traces.passes import TraceError
from backstep.units import human_bytes as format_bytes

NODE_COST = 1400  # bytes of memory a node read costs (diff, measured: 1.34 KB)
RATIO = 8  # a pass may cost this many times the bytes it spans in the file
FLOOR = 64 * 2**20  # or this much, however small it is (about 48,000 nodes)
ENV_MAX = "BACKSTEP_MAX_PASS_NODES"
NAME_LIMIT = 200  # characters of a name (or any string from a trace) a report shows whole


class PassTooBig(TraceError):
    """A pass whose nodes would cost more memory than its size allows: refused unparsed."""


def _set_limit() -> int | None:
    try:
        return max(1, int(os.environ.get(ENV_MAX, "")))
    except ValueError:
        return None


def graph_nodes(begin_line: bytes) -> int:
    """The nodes a ``pass_begin`` line lists, counted without parsing it: each has an "id"
    key (a quote inside a string is escaped, so no string holds ``"id"``)."""
    return begin_line.count(b'"id"')


def check(path: str, number: int, begin_line: bytes | None, node_events: int,
          spans: int) -> None:
    """PassTooBig, with the sentence to print, if pass ``number`` (``spans`` bytes of the file
    from its first line to its last) has more nodes than it may."""
    nodes = max(graph_nodes(begin_line or b""), node_events)
    most = _set_limit()
    if most is not None:
        if nodes > most:
            raise PassTooBig(f"{path}: pass {number} has {nodes:,} nodes, more than "
                             f"{ENV_MAX}={most}")
        return
    cost = nodes * NODE_COST
    if cost > max(FLOOR, RATIO * spans):
        raise PassTooBig(
            f"{path}: pass {number} has {nodes:,} nodes in {format_bytes(spans)}: reading it "
            f"would take about {format_bytes(cost)} of memory, more than {RATIO} times its "
            f"size ({ENV_MAX}=N reads up to N nodes)")


def shorten(text: str, limit: int = NAME_LIMIT) -> str:
    """``text`` itself, or its start and how long it is: a 50 MB node name is no report."""
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]}… ({len(text):,} characters)"
