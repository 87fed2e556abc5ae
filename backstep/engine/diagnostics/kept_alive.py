"""``graph_kept_alive``: the graphs of earlier passes stay alive, more of them every pass.

The PyTorch FAQ's leak: ``total_loss += loss`` (instead of ``loss.item()``) or
``losses.append(loss)`` keeps every step's graph alive through the kept tensor. The engine
(``capture/memory.KeptGraphs``) marks the roots of each top-level pass that frees its graph and
says, in each ``memory_end``, how many earlier ones are still alive (``kept``) and, where it can
find it, the caller's variable that reaches them.

A graph kept on purpose is not marked at all (``retain_graph``, ``create_graph``: truncated
BPTT, GAN steps, double backward keep their graphs that way), and a loop that holds its last
output or loss a while keeps a bounded number. So the diagnosis asks for growth: the count rose
at each of the last ``GROWTH`` top-level passes and is at least ``GROWTH``. Once a session.
"""

from __future__ import annotations

from typing import Any

from backstep.engine.diagnostics.rules import Found, diagnosis
from backstep.units import human_bytes

GROWTH = 5
TITLE = "earlier passes' graphs are kept alive"
KIND = "graph_kept_alive"


class KeptAlive:
    """Reads ``pass_begin`` (which passes are nested) and ``memory_end`` events."""

    def __init__(self) -> None:
        self._nested: set[int] = set()
        self._counts: list[int] = []
        self._callers: dict[int, Any] = {}
        self.fired = False

    def begin(self, event: dict[str, Any]) -> None:
        number = event.get("pass")
        if event.get("parent") is not None:
            if len(self._nested) < 4096:
                self._nested.add(number)  # type: ignore[arg-type]
        elif not self.fired:
            self._callers = {number: event.get("caller")}

    def end(self, event: dict[str, Any]) -> list[Found]:
        number = event.get("pass")
        if self.fired or number in self._nested:
            self._nested.discard(number)  # type: ignore[arg-type]
            return []
        kept = event.get("kept")
        count = kept.get("graphs") if isinstance(kept, dict) else 0
        count = count if type(count) is int else 0
        self._counts = (self._counts + [count])[-(GROWTH + 1):]
        counts = self._counts
        if (len(counts) <= GROWTH or count < GROWTH
                or any(b <= a for a, b in zip(counts, counts[1:], strict=False))):
            return []
        self.fired = True
        assert isinstance(kept, dict)
        held = kept.get("bytes") or 0
        by = kept.get("by") if isinstance(kept.get("by"), dict) else None
        where = ""
        source = self._callers.get(number)
        if by is not None:
            name, kind = by.get("name"), by.get("kind")
            what = "a list" if kind == "list" else ("a tuple" if kind == "tuple" else
                                                    ("a dict" if kind == "dict" else "a tensor"))
            where = f" The variable `{name}` ({what}) reaches them."
            if isinstance(by.get("source"), dict) and by["source"].get("line"):
                source = by["source"]
                where = where[:-1] + f", made at line {source.get('line')}."
        inside = (f"{human_bytes(held)} of saved tensors in them" if held else
                  "their nodes; their saved tensors were freed")
        message = (f"After pass {number}, the graphs of {count} earlier backward passes are "
                   f"still alive ({inside}), one more after every pass.{where} A tensor that still has a grad_fn keeps its whole graph: "
                   "`total_loss += loss` or `losses.append(loss)` keeps every step's. Keep "
                   "`loss.item()` (or `loss.detach()`) instead.")
        return [((KIND,), diagnosis(number, KIND, TITLE, message, severity="warning",
                                    source=source))]
