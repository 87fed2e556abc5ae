"""Where the graph was cut: ``.detach()`` of a tracked tensor, and module forwards run under
``torch.no_grad()`` — with the module and the user's line — so a parameter that gets no gradient
can be explained ("enc's output was detached at train.py:12"). Bounded; holds no tensors."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import torch

LIMIT = 256
_cuts: deque[dict[str, Any]] = deque(maxlen=LIMIT)
_lock = threading.Lock()
DETACH = frozenset({torch.Tensor.detach, torch.Tensor.detach_, torch.detach})


def note(kind: str, module: str | None, source: dict[str, Any] | None) -> None:
    """Record one cut; repeats of the same (kind, module, line) are kept once."""
    if module is None:
        return
    line = (source or {}).get("line")
    with _lock:
        for cut in _cuts:
            if cut["kind"] == kind and cut["module"] == module and cut["line"] == line:
                return
        _cuts.append({"kind": kind, "module": module, "line": line,
                      "file": (source or {}).get("file"), "code": (source or {}).get("code")})


def clear() -> None:
    """Forget the cuts seen so far."""
    with _lock:
        _cuts.clear()


def cuts() -> list[dict[str, Any]]:
    """The cuts seen so far, oldest first."""
    with _lock:
        return list(_cuts)


def explain(parameter: str) -> dict[str, Any] | None:
    """The latest cut of a module that owns ``parameter`` (``model.enc.weight``), or None."""
    best = None
    for cut in cuts():
        module = cut["module"]
        if parameter.startswith(module + ".") and (best is None or len(module) >= len(best["module"])):
            best = cut
    return best
