"""Breakpoints, stated once: their kinds, their command-line form, the check of a list a peer
sends, the match of a node, the trip of a node's gradient summaries, the words a stop says, and
the ``stopped`` event a stop sends.

A live session and ``show`` decide stops with the same ``Breakpoints``: the engine matches a node
before it runs (``match_node``) and, for the gradient kinds, computes the numbers a trip needs
from the tensors (``engine/capture/hooks.gradient_trip``, ``engine/device_checks``) and words
them here (``nonfinite_detail``, ``norm_detail``); ``show`` trips on the recorded summaries
(``trip_on_summaries``). Adding a kind: its field in ``KINDS``, its rule in ``Breakpoints``, its
tensor check in the engine if it looks at gradients, and its row in the UI's breakpoint dialog.
Stdlib only.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from backstep.protocol import ProtocolError, quote

# Why the debuggee stopped (a ``stopped`` event's ``reason``), and how a person reads it.
STOP_REASONS: dict[str, str] = {
    "pass_start": "start of pass",
    "step": "step",
    "breakpoint": "breakpoint",  # a node, module or leaf breakpoint (``match_node``)
    "interrupt": "interrupted",
    "nonfinite": "non-finite gradient",
    "norm": "gradient norm",
}

# Breakpoint kinds and the one field each takes.
KINDS: dict[str, str | None] = {
    "node": "pattern",  # glob on the node name: "MulBackward*"
    "module": "pattern",  # glob on the module path: "model.encoder.*"
    "leaf": "name",  # a leaf's name: stops before its AccumulateGrad
    "nonfinite": None,  # a node produced a NaN/Inf gradient
    "norm": "above",  # a gradient's norm is above this value
}


def validate_breakpoints(breakpoints: Any) -> list[dict[str, Any]]:
    """Check a breakpoint list; return it, or raise ProtocolError (never anything else)."""
    if not isinstance(breakpoints, list):
        raise ProtocolError("breakpoints must be a list")
    for bp in breakpoints:
        kind = bp.get("kind") if isinstance(bp, dict) else None
        if not isinstance(kind, str) or kind not in KINDS:
            raise ProtocolError(f"bad breakpoint {quote(bp)}")
        field_ = KINDS[kind]
        if field_ == "above":
            value = bp.get("above")
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ProtocolError("a norm breakpoint needs a number 'above'")
            try:
                finite = math.isfinite(float(value))
            except OverflowError:
                finite = False
            if not finite:
                raise ProtocolError("a norm breakpoint needs a finite number 'above'")
        elif field_ is not None and not isinstance(bp.get(field_), str):
            raise ProtocolError(f"a {kind} breakpoint needs a string {field_!r}")
    return breakpoints


def parse_breakpoint(spec: str) -> dict[str, Any]:
    """A breakpoint from its command-line form.

    ``MulBackward*`` or ``node:MulBackward*`` (node-name glob), ``module:model.encoder.*``,
    ``leaf:model.fc.weight``, ``nonfinite``, ``norm:1e3``.
    """
    kind, sep, value = spec.partition(":")
    if not sep:
        if spec == "nonfinite":
            return {"kind": "nonfinite"}
        if "." in spec and not spec.endswith("Backward") and "Backward" not in spec:
            return {"kind": "module", "pattern": spec}
        return {"kind": "node", "pattern": spec}
    if kind not in KINDS:
        raise ProtocolError(f"unknown breakpoint kind {quote(kind)} in {quote(spec)}")
    field_ = KINDS[kind]
    if field_ is None:
        return {"kind": kind}
    if field_ == "above":
        try:
            above = float(value)
        except ValueError:
            raise ProtocolError(f"norm breakpoint needs a number, not {quote(value)}") from None
        if not math.isfinite(above):
            raise ProtocolError(f"norm breakpoint needs a finite number, not {quote(value)}")
        return {"kind": kind, "above": above}
    if not value:
        raise ProtocolError(f"breakpoint {quote(spec)} needs a value after ':'")
    return {"kind": kind, field_: value}


@dataclass
class Breakpoints:
    """A breakpoint list compiled for quick checks in hooks."""

    node_globs: list[str] = field(default_factory=list)
    module_globs: list[str] = field(default_factory=list)
    leaf_names: set[str] = field(default_factory=set)
    nonfinite: bool = False
    norm_above: float | None = None

    @classmethod
    def from_list(cls, items: list[dict[str, Any]]) -> Breakpoints:
        bp = cls()
        for item in validate_breakpoints(list(items)):
            kind = item["kind"]
            if kind == "node":
                bp.node_globs.append(item["pattern"])
            elif kind == "module":
                bp.module_globs.append(item["pattern"])
            elif kind == "leaf":
                bp.leaf_names.add(item["name"])
            elif kind == "nonfinite":
                bp.nonfinite = True
            elif kind == "norm":
                above = float(item["above"])
                bp.norm_above = above if bp.norm_above is None else min(bp.norm_above, above)
        return bp

    @property
    def static(self) -> bool:
        """Breakpoints decided from the node alone, before it runs."""
        return bool(self.node_globs or self.module_globs or self.leaf_names)

    @property
    def on_gradients(self) -> bool:
        """Breakpoints decided from a node's outgoing gradients, after it runs."""
        return self.nonfinite or self.norm_above is not None

    def match_node(self, name: str, module: str | None, leaf: str | None) -> str | None:
        """Why this node is a breakpoint (the stop's detail), or None."""
        for pattern in self.node_globs:
            if fnmatch.fnmatchcase(name, pattern):
                return f"node {pattern}"
        if module is not None:
            for pattern in self.module_globs:
                if fnmatch.fnmatchcase(module, pattern) or module == pattern:
                    return f"module {pattern}"
        if leaf is not None and leaf in self.leaf_names:
            return f"leaf {leaf}"
        return None

    def trip_on_summaries(self, summaries: Iterable[Mapping[str, Any] | None] | None
                          ) -> tuple[str, str] | None:
        """The gradient kinds on a node's recorded ``grad_inputs`` summaries (``show``): the
        stop's reason and detail, or None. The counts are the ones the engine read."""
        nonfinite, above = self.nonfinite, self.norm_above
        for k, summary in enumerate(summaries or ()):
            if not summary:
                continue
            bad = summary.get("nonfinite") or 0
            if nonfinite and bad:
                return "nonfinite", nonfinite_detail(k, bad)
            if above is not None:
                norm = summary.get("norm")
                value = float(norm) if isinstance(norm, int | float | str) else math.nan
                if not value <= above:
                    return "norm", norm_detail(k, value, above)
        return None


def nonfinite_detail(k: int, bad: int) -> str:
    """A nonfinite stop's words: which gradient, how many values."""
    return f"grad_inputs[{k}] has {bad} NaN/Inf values"


def norm_detail(k: int, norm: float, above: float) -> str:
    """A norm stop's words: which gradient, its norm and the limit."""
    return f"grad_inputs[{k}] norm {norm:.4g} > {above:g}"


def late(detail: str, name: str, born: int, now: int) -> str:
    """The detail of a stop found after its node: where it was born and how long ago."""
    if now <= born:
        return detail
    ago = now - born
    return f"{detail}; born at {name} (step {born}), {ago} node{'s' if ago != 1 else ''} ago"


def stopped_event(number: int, step: int, node_id: int, name: Any, reason: str,
                  detail: str | None, grad_outputs: Any, saved: Any, *, after: bool = False,
                  grad_inputs: Any = None, thread: str | None = None, device: str | None = None,
                  stop: int | None = None) -> dict[str, Any]:
    """The ``stopped`` event of a stop, its fields in the order the spec states them (``stop``
    last, where the controller numbers a live stop)."""
    event = {"event": "stopped", "pass": number, "step": step, "id": node_id, "name": name,
             "reason": reason, "detail": detail, "after": after, "grad_outputs": grad_outputs,
             "grad_inputs": grad_inputs, "saved": saved, "thread": thread, "device": device}
    if stop is not None:
        event["stop"] = stop
    return event
