"""A ``node`` event's record, its gradients and saved list made when first read.

While ``f`` or ``c`` runs through a pass, the reader folds in thousands of node events that
nobody looks at until the next stop, most of them never: making each one's three summaries and
saved list as it came was a third of the reader's time, and keeping them decoded (made or not)
gave every full garbage collection a hundred thousand more objects to walk, more than all the
rest of the reader's work on a 6,380-node pass. The event has passed the schema check at the
edge by then, so the record keeps its line (or, given no line, its raw lists) and makes the
read-only summaries and ``SavedInfo`` on the first read, with the same functions, on whichever
thread reads (the same result either way).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any

from backstep.tui.state.node_line import saved_bytes
from backstep.tui.state.records import NodeRecord, SavedInfo, Summary, as_tuple, summaries_of
from backstep.tui.text.format import scalar_text

SHAPE_ERRORS = (TypeError, ValueError, KeyError, AttributeError)


def saved_infos(value: Any) -> tuple[SavedInfo, ...]:
    """A ``saved`` list as the panels read it (items that are not objects are left out)."""
    if isinstance(value, tuple):  # made already (a replay makes a step's once for two events)
        return value
    items = []
    for raw in as_tuple(value):
        if not isinstance(raw, dict):
            continue
        version = raw.get("version") if isinstance(raw.get("version"), dict) else {}
        shape = raw.get("shape")
        size = raw.get("bytes")
        items.append(
            SavedInfo(
                name=sys.intern(str(raw.get("name", "?"))),
                status=sys.intern(str(raw.get("status", "alive"))),
                shape=tuple(shape) if isinstance(shape, list) else None,
                dtype=sys.intern(raw["dtype"]) if isinstance(raw.get("dtype"), str) else None,
                bytes=_bytes(size),
                version_saved=version.get("saved") if isinstance(version.get("saved"), int) else None,
                version_now=version.get("now") if isinstance(version.get("now"), int) else None,
                value=scalar_text(raw["value"]) if "value" in raw else None,
            )
        )
    return tuple(items)


def _bytes(size: Any) -> int:
    return size if isinstance(size, int) and not isinstance(size, bool) else 0


class LazyRecord(NodeRecord):
    """``NodeRecord`` whose ``grad_outputs``, ``grad_inputs`` and ``saved`` are made from the
    event's lists when first read. Made by ``of``, never by the dataclass ``__init__``.

    Given the line the event was read from and a way to read it again (the live reader's), it
    keeps the line instead of the decoded lists: bytes, which the garbage collector never
    walks, where the lists were a hundred thousand objects a pass that every full collection
    walked again. The sizes the saved panel sums are kept as a number."""

    _raw: tuple[Any, Any, Any]
    _line: tuple[bytes, Callable[[bytes], Mapping[str, Any] | None]] | None

    @classmethod
    def of(cls, index: int, step: int, node_id: int, name: str, error: str | None,
           event: Mapping[str, Any],
           line: tuple[bytes, Callable[[bytes], Mapping[str, Any] | None]] | None = None,
           ) -> LazyRecord:
        record = object.__new__(cls)
        fields = record.__dict__
        fields.update(index=index, step=step, id=node_id, name=name, error=error, _line=line)
        if line is None:
            fields["_raw"] = (event.get("grad_outputs"), event.get("grad_inputs"),
                              event.get("saved"))
        else:
            size = saved_bytes(event)  # read from the line with the other fields, or None
            fields["_bytes"] = _saved_bytes(event.get("saved")) if size is None else size
        return record

    def _lists(self) -> tuple[Any, Any, Any]:
        raw = self.__dict__.get("_raw")
        if raw is None:
            line, reread = self._line  # type: ignore[misc]
            event = reread(line)
            raw = (None, None, None) if event is None else (
                event.get("grad_outputs"), event.get("grad_inputs"), event.get("saved"))
            self.__dict__["_raw"] = raw
        return raw

    @cached_property
    def grad_outputs(self) -> tuple[Summary | None, ...]:  # type: ignore[override]
        try:
            return summaries_of(self._lists()[0])
        except SHAPE_ERRORS:  # what the schema check let through and still does not read
            return ()

    @cached_property
    def grad_inputs(self) -> tuple[Summary | None, ...] | None:  # type: ignore[override]
        raw = self._lists()[1]
        try:
            return summaries_of(raw) if isinstance(raw, (list, tuple)) else None
        except SHAPE_ERRORS:
            return ()

    @cached_property
    def saved(self) -> tuple[SavedInfo, ...]:  # type: ignore[override]
        try:
            return saved_infos(self._lists()[2])
        except SHAPE_ERRORS:
            return ()

    @property
    def saved_bytes(self) -> int:
        """What ``saved`` sums to, without making it."""
        fields = self.__dict__
        if "_bytes" in fields:
            return fields["_bytes"]
        raw = fields["_raw"][2]
        return super().saved_bytes if isinstance(raw, tuple) else _saved_bytes(raw)


def _saved_bytes(saved: Any) -> int:
    if isinstance(saved, tuple):  # made already (a replay's)
        return sum(s.bytes for s in saved)
    return sum(_bytes(item.get("bytes")) for item in as_tuple(saved) if isinstance(item, dict))
