"""Breakpoints that matched nothing in a pass, and the nearest real name to offer instead.

``--break 'module:transformer.h.1.*'`` on a model whose module paths start ``model.`` never
stops and says nothing: the person waits for a stop that cannot come. After a pass, the specs
that name nodes (``node``, ``module``, ``leaf``) are checked against the nodes the pass had, with
the engine's own rules (``fnmatchcase``; a module may also be named exactly), and each one that
matched none gets one line with the nearest name that would have matched. Stdlib only: the UI
(no torch) and the engine can both call it.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Iterable, Mapping
from typing import Any

KINDS = ("node", "module", "leaf")  # decided from the node alone; the others, from gradients


def spec_text(bp: Mapping[str, Any]) -> str:
    """A breakpoint as ``--break`` writes it: ``module:model.h.*``."""
    kind = bp.get("kind")
    return f"{kind}:{bp.get('name') if kind == 'leaf' else bp.get('pattern')}"


def _matches(kind: str, value: str, name: str) -> bool:
    if kind == "leaf":
        return name == value
    return fnmatch.fnmatchcase(name, value) or (kind == "module" and name == value)


def nearest(kind: str, value: str, names: Iterable[str]) -> str | None:
    """The name (or pattern) nearest ``value`` that matches something in ``names``: the pattern
    under the prefix it lacks (``model.`` + ``transformer.h.1.*``), the pattern with a ``*`` it
    lacks (``SqrtBackward`` -> ``SqrtBackward*``), else the closest name by spelling."""
    pool = sorted(set(names))
    if not pool:
        return None
    if kind != "leaf":
        tail = re.compile(fnmatch.translate(value))
        for name in pool:  # a prefix the pattern lacks, at a dot
            for at in (i + 1 for i, ch in enumerate(name) if ch == "."):
                if tail.match(name[at:]):
                    return name[:at] + value
        if not any(ch in value for ch in "*?["):
            grown = re.compile(fnmatch.translate(f"*{value}*"))
            hits = [name for name in pool if grown.match(name)]
            if hits:
                return f"{value}*" if any(n.startswith(value) for n in hits) else f"*{value}*"
    close = difflib.get_close_matches(value, pool, n=1, cutoff=0.5)
    if close:
        return close[0]
    lowered = value.lower()
    folded = [name for name in pool if name.lower() == lowered]
    return folded[0] if folded else None


def unmatched(breakpoints: Iterable[Mapping[str, Any]],
              nodes: Iterable[tuple[str, str | None, str | None]]) -> list[tuple[str, str | None]]:
    """For each ``node`` / ``module`` / ``leaf`` breakpoint that matches none of ``nodes``
    ((name, module, leaf) triples): its ``--break`` text and the nearest spec that would match
    (None when nothing is near)."""
    specs = [bp for bp in breakpoints if bp.get("kind") in KINDS]
    if not specs:
        return []
    names: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for name, module, leaf in nodes:
        names["node"].add(name)
        if module:
            names["module"].add(module)
        if leaf:
            names["leaf"].add(leaf)
    out = []
    for bp in specs:
        kind = str(bp["kind"])
        value = bp.get("name") if kind == "leaf" else bp.get("pattern")
        if not isinstance(value, str):
            continue
        if any(_matches(kind, value, name) for name in names[kind]):
            continue
        near = nearest(kind, value, names[kind])
        out.append((spec_text(bp), f"{kind}:{near}" if near is not None else None))
    return out


def said(pass_number: int, misses: list[tuple[str, str | None]]) -> str:
    """One line for the person: which specs matched nothing in the pass, and what would."""
    parts = []
    for spec, near in misses:
        parts.append(f"{spec} (nearest: {near})" if near else spec)
    noun = "breakpoint" if len(misses) == 1 else "breakpoints"
    return f"{noun} matched nothing in pass {pass_number}: " + "; ".join(parts)
