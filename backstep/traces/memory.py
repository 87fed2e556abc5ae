"""A pass's memory table from its ``memory`` and ``memory_end`` events (stdlib only): what
``backstep memory`` prints and the UI's memory view shows, so both say the same.

Rows group the pass's saved storages by module (a storage made outside any module by its
line), by node type (op) or by forward line; largest first, ties by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

BY = ("module", "op", "line")
OUTSIDE = "(made outside the graph)"


def _line(source: Any) -> str | None:
    if not isinstance(source, dict) or source.get("line") is None:
        return None
    file = str(source.get("file") or "?")
    return f"{file.rsplit('/', 1)[-1]}:{source.get('line')}"


def source_of(storage: dict[str, Any], sources: Mapping[int, Any]) -> Any:
    """A storage's forward line: its node's (else the first node's that saves it), as
    ``pass_begin`` lists them (``sources``: node id -> source)."""
    node = storage.get("node")
    if node is None:
        held = storage.get("held_by") or [None]
        node = held[0] if isinstance(held, list) and held else None
    return sources.get(node) if isinstance(node, int) else None


def key_of(storage: dict[str, Any], by: str, sources: Mapping[int, Any]) -> str:
    """The row a storage goes in."""
    if by == "op":
        return str(storage.get("op") or OUTSIDE)
    line = _line(source_of(storage, sources)) or "(no line)"
    if by == "line":
        return line
    module = storage.get("module")
    return str(module) if module else line


def rows(memory: dict[str, Any], by: str = "module", freed: list[Any] | None = None,
         step: int | None = None, sources: Mapping[int, Any] | None = None
         ) -> list[dict[str, Any]]:
    """Each row: ``key``, ``bytes``, ``storages`` (count) and ``held`` (bytes still held
    after ``step``; the end of the pass when None). ``freed``: ``memory_end``'s list (or one
    made so far, as the pass runs); ``sources``: node id -> its line, from ``pass_begin``."""
    sources = sources or {}
    out: dict[str, dict[str, Any]] = {}
    storages = memory.get("storages") or []
    for k, storage in enumerate(storages):
        if not isinstance(storage, dict):
            continue
        size = storage.get("bytes") or 0
        key = key_of(storage, by, sources)
        row = out.setdefault(key, {"key": key, "bytes": 0, "storages": 0, "held": 0})
        row["bytes"] += size
        row["storages"] += 1
        when = freed[k] if freed is not None and k < len(freed) else None
        if when is None or (step is not None and when > step):
            row["held"] += size
    return sorted(out.values(), key=lambda r: (-r["bytes"], r["key"]))


def freed_so_far(memory: dict[str, Any], steps: dict[int, int], retained: bool
                 ) -> list[int | None]:
    """``memory_end``'s ``freed``, worked out from the steps the nodes ran at so far (node id
    -> step): a storage is released once every node that saves it has run."""
    out: list[int | None] = []
    for storage in memory.get("storages") or []:
        holders = (storage.get("held_by") or []) if isinstance(storage, dict) else []
        ran = [steps.get(i) for i in holders]
        out.append(None if retained or not ran or None in ran else max(ran))  # type: ignore[type-var]
    return out
