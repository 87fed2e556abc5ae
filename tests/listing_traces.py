"""A trace recorded in-process, node ids numbered from 1, its pass listings reused from
templates or not."""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable

from backstep.engine import graph as graph_module
from backstep.engine.capture import Capture
from backstep.engine.provenance import Provenance, annotate
from backstep.engine.recorder import JsonlRecorder


def listing_trace(reuse: bool, steps: Callable[[], None]) -> tuple[bytes, int]:
    """The trace ``steps`` writes (node ids numbered from 1, as in a fresh process), and how
    many listings came from a template."""
    stream = io.BytesIO()
    capture = Capture(JsonlRecorder(stream))
    capture.listings.enabled = reuse
    capture.annotate = annotate
    saved_ids = graph_module._ids
    graph_module._ids = itertools.count(1)
    capture.install()
    try:
        with Provenance():
            steps()
    finally:
        capture.uninstall()
        graph_module._ids = saved_ids
    return stream.getvalue(), capture.listings.reused
