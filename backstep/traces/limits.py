"""How big one pass may be for ``diff``, ``export`` and ``show`` to read it.

Reading a pass builds Python objects for each of its nodes: about 1.3 KB of memory a node in
``diff``, 1 KB in ``export``, whatever the file spends on it. A hostile (or broken) trace of
one pass with 2,000,000 nodes of 66 bytes each (132 MB) cost ``diff`` 2.7 GB and 2 minutes,
``export --dot`` 1.9 GB. A pass with more nodes (in its graph, or node events) than the limit
is refused in one line before any is parsed; BACKSTEP_MAX_PASS_NODES raises (or lowers) it.
The limit is far above real passes: the largest measured here has 6,380 nodes.
"""

from __future__ import annotations

import os

from backstep.traces.passes import TraceError

MAX_PASS_NODES = 500_000
ENV_MAX = "BACKSTEP_MAX_PASS_NODES"
NAME_LIMIT = 200  # characters of a name (or any string from a trace) a report shows whole


class PassTooBig(TraceError):
    """A pass with more nodes than ``limit()``: refused before it is parsed."""


def limit() -> int:
    try:
        return max(1, int(os.environ.get(ENV_MAX, "")))
    except ValueError:
        return MAX_PASS_NODES


def graph_nodes(begin_line: bytes) -> int:
    """The nodes a ``pass_begin`` line lists, counted without parsing it: each has an "id"
    key (a quote inside a string is escaped, so no string holds ``"id"``)."""
    return begin_line.count(b'"id"')


def check(path: str, number: int, begin_line: bytes | None, node_events: int) -> None:
    """PassTooBig with the sentence to print if the pass has more nodes than the limit."""
    nodes = max(graph_nodes(begin_line or b""), node_events)
    most = limit()
    if nodes > most:
        raise PassTooBig(f"{path}: pass {number} has {nodes:,} nodes, more than backstep reads "
                         f"in one pass ({most:,}, about 1.3 KB of memory each; {ENV_MAX} "
                         "raises it)")


def shorten(text: str, limit: int = NAME_LIMIT) -> str:
    """``text`` itself, or its start and how long it is: a 50 MB node name is no report."""
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]}… ({len(text):,} characters)"
