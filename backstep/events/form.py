"""The form events take in a trace file: keys that hold their default value are left out.

A node event of a 6,000-node pass is written thousands of times a pass, and most of its keys
say the usual thing: a summary's ``"device":"cpu"`` and ``"nonfinite":0``, a node's
``"error":null``, a saved tensor's ``"status":"alive"`` and ``"version":null``, a graph node's
``"leaf":null``; and a pass's nodes share a few forward lines (``source``), each long. A trace
file leaves the defaults out and writes each distinct source once, in the pass_begin's
``sources``, a node's ``source`` then being its index there (``compact_*``, used by the recorder
and by the texts it is handed) and ``expand`` puts them back as a trace is read, so every reader
sees the events that ``spec`` describes, whether the file was written with or without them. The
defaults, and which fields hold summaries or saved lists, are the spec's (``Field.default``,
``Field.form``). The live stream to the UI uses the same form (the debuggee's events go through
the same recorder), and its reader expands them too. Stdlib only.
"""

from __future__ import annotations

import json
from typing import Any

from backstep.events.spec import EVENTS, GRAPH_NODE, SAVED_ENTRY, SUMMARY

# key -> the value a file leaves out; ``expand`` writes it back where the key is missing
# a file's pass_begin: "sources" (distinct source dicts), then "nodes" with "source": index
SUMMARY_DEFAULTS: dict[str, Any] = SUMMARY.defaults
SAVED_DEFAULTS: dict[str, Any] = SAVED_ENTRY.defaults  # of a saved tensor
GRAPH_NODE_DEFAULTS: dict[str, Any] = GRAPH_NODE.defaults
EVENT_DEFAULTS: dict[str, dict[str, Any]] = {
    kind: spec.defaults for kind, spec in EVENTS.items() if spec.defaults}


_ABSENT = object()


def _drop(d: Any, defaults: dict[str, Any]) -> Any:
    # looks up the few default keys rather than testing every key: written per summary, hot
    if not isinstance(d, dict):
        return d
    drop = None
    for key, default in defaults.items():
        value = d.get(key, _ABSENT)
        if value is not _ABSENT and (value is default or (type(value) is type(default)
                                                         and value == default)):
            if drop is None:
                drop = [key]
            else:
                drop.append(key)
    if drop is None:
        return d
    return {k: v for k, v in d.items() if k not in drop}


def compact_summary(summary: Any) -> Any:
    """A summary (or None) as a file writes it."""
    return _drop(summary, SUMMARY_DEFAULTS)


def compact_summaries(group: Any) -> Any:
    if not isinstance(group, list):
        return group
    return [compact_summary(s) for s in group]


def compact_saved(saved: Any) -> Any:
    """A node's ``saved`` list as a file writes it."""
    if not isinstance(saved, list):
        return saved
    return [_drop(entry, SAVED_DEFAULTS) for entry in saved]


# per event kind: the fields that hold summaries or saved lists, and how each is compacted
_COMPACT = {"summary": compact_summary, "summaries": compact_summaries, "saved": compact_saved}
_NESTED: dict[str, dict[str, Any]] = {
    kind: {key: _COMPACT[form] for key, form in spec.forms.items() if form in _COMPACT}
    for kind, spec in EVENTS.items() if any(f in _COMPACT for f in spec.forms.values())}


def compact_event(event: dict[str, Any]) -> dict[str, Any]:
    """Any event as a file writes it (a new dict where something is left out)."""
    kind = event.get("event")
    nested = _NESTED.get(kind)  # type: ignore[arg-type]
    if nested is not None:
        out = dict(_drop(event, EVENT_DEFAULTS[kind]))  # type: ignore[index]
        for key, compact in nested.items():
            if key in out:
                out[key] = compact(out[key])
        return out
    if kind == "pass_begin" and isinstance(event.get("nodes"), list):
        out = {k: v for k, v in event.items() if k != "nodes"}
        table: list[Any] = []
        where: dict[str, int] = {}
        nodes = []
        for node in event["nodes"]:
            node = _drop(node, GRAPH_NODE_DEFAULTS)
            source = node.get("source") if isinstance(node, dict) else None
            if isinstance(source, dict):
                key = _source_key(source)
                k = where.get(key)
                if k is None:
                    k = where[key] = len(table)
                    table.append(source)
                node = {**node, "source": k}
            nodes.append(node)
        if table:
            out["sources"] = table
        out["nodes"] = nodes
        return out
    return event


def _source_key(source: dict[str, Any]) -> str:
    return json.dumps(source, separators=(",", ":"), allow_nan=False)


def _fill(d: Any, defaults: dict[str, Any]) -> None:
    if isinstance(d, dict):
        for key, value in defaults.items():
            if key not in d:
                d[key] = value


def _fill_summaries(group: Any) -> None:
    if isinstance(group, list):
        for summary in group:
            _fill(summary, SUMMARY_DEFAULTS)


def expand(event: dict[str, Any]) -> dict[str, Any]:
    """Put back, in place, what ``compact_event`` left out of ``event``; returns it."""
    kind = event.get("event")
    if kind == "node":
        _fill(event, EVENT_DEFAULTS["node"])
        _fill_summaries(event.get("grad_outputs"))
        _fill_summaries(event.get("grad_inputs"))
        saved = event.get("saved")
        if isinstance(saved, list):
            for entry in saved:
                if isinstance(entry, dict) and "shape" in entry:
                    _fill(entry, SAVED_DEFAULTS)  # a tensor's entry (a scalar's has no shape)
    elif kind == "accumulate":
        _fill(event, EVENT_DEFAULTS["accumulate"])
        _fill(event.get("before"), SUMMARY_DEFAULTS)
        _fill(event.get("after"), SUMMARY_DEFAULTS)
    elif kind == "pass_begin" and isinstance(event.get("nodes"), list):
        table = event.pop("sources", None)
        table = table if isinstance(table, list) else []
        for node in event["nodes"]:
            _fill(node, GRAPH_NODE_DEFAULTS)
            source = node.get("source") if isinstance(node, dict) else None
            if type(source) is int and 0 <= source < len(table):
                node["source"] = table[source]  # an index out of range stays, for check to refuse
    return event
