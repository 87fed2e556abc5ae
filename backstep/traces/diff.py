"""Where two recorded runs part ways: the node at which a gradient difference is born.

Two traces of the same program (CPU vs CUDA, fp32 vs fp64, a custom backward vs its reference,
before vs after a change) are aligned pass by pass, and node by node by graph position (the path
of ``next`` slots from the roots), not by id: ids are per-run. The difference is born at the
first node, in execution order, whose incoming gradients and saved tensors agree between the
runs but whose outgoing gradients differ. Numbers are compared as recorded (summary statistics,
and values where the tensor was small enough to record them) within a tolerance that depends on
the dtype. Stdlib only; reads one pass of each trace at a time.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from backstep.traces.edits import edit_hint, edit_notes
from backstep.traces.index import TraceIndex
from backstep.traces.passes import Pass

# (rtol, atol) per dtype, as torch.testing uses; the looser of the two sides applies.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-12),
    "complex128": (1e-7, 1e-12),
    "float32": (1e-5, 1e-7),
    "complex64": (1e-5, 1e-7),
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
}
_STATS = ("norm", "max", "min", "mean")


@dataclass
class Tolerance:
    """User overrides; None means the dtype's default."""

    rtol: float | None = None
    atol: float | None = None

    def pair(self, *dtypes: str | None) -> tuple[float, float]:
        known = [TOLERANCES.get(d or "", TOLERANCES["float32"]) for d in dtypes]
        rtol, atol = max(k[0] for k in known), max(k[1] for k in known)
        return (self.rtol if self.rtol is not None else rtol,
                self.atol if self.atol is not None else atol)


def _num(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, int | float):
        return float(x)
    if x in ("nan", "inf", "-inf"):
        return float(x)
    return None


def _close(a: Any, b: Any, rtol: float, atol: float, scale: float) -> bool:
    x, y = _num(a), _num(b)
    if x is None or y is None:
        return a == b
    if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y):
        return (math.isnan(x) and math.isnan(y)) or x == y
    return abs(x - y) <= atol + rtol * max(abs(x), abs(y), scale)


def _scale(summary: dict[str, Any]) -> float:
    values = [_num(summary.get(k)) for k in ("min", "max")]
    return max((abs(v) for v in values if v is not None and math.isfinite(v)), default=0.0)


def compare_summary(a: dict | None, b: dict | None, tol: Tolerance) -> str | None:
    """None when two recorded tensors agree, else why not (a few words)."""
    if a is None and b is None:
        return None
    if a is None or b is None:
        return "None on one side"
    if list(a.get("shape") or []) != list(b.get("shape") or []):
        return f"shape {a.get('shape')} vs {b.get('shape')}"
    if (a.get("nonfinite") or 0) != (b.get("nonfinite") or 0):
        return f"non-finite count {a.get('nonfinite')} vs {b.get('nonfinite')}"
    rtol, atol = tol.pair(a.get("dtype"), b.get("dtype"))
    scale = max(_scale(a), _scale(b))
    for stat in _STATS:
        if stat in a and stat in b and not _close(a[stat], b[stat], rtol, atol, scale):
            return f"{stat} {a[stat]} vs {b[stat]}"
    va, vb = a.get("values"), b.get("values")
    if isinstance(va, list) and isinstance(vb, list) and len(va) == len(vb):
        for i, (x, y) in enumerate(zip(va, vb, strict=True)):
            if not _close(x, y, rtol, atol, scale):
                return f"value [{i}] {x} vs {y}"
    return None


def compare_group(a: list | None, b: list | None, tol: Tolerance) -> list[str]:
    """The differences between two lists of summaries, as ``[slot] why`` strings."""
    a, b = a or [], b or []
    if len(a) != len(b):
        return [f"{len(a)} vs {len(b)} gradients"]
    found = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        why = compare_summary(x, y, tol)
        if why:
            found.append(f"[{i}] {why}")
    return found


def compare_saved(a: list | None, b: list | None, tol: Tolerance) -> list[str]:
    """Saved tensors as recorded: name, status, shape, and the value of saved scalars."""
    found = []
    by_name = {s.get("name"): s for s in b or []}
    for s in a or []:
        other = by_name.pop(s.get("name"), None)
        if other is None:
            found.append(f"{s.get('name')}: only in A")
            continue
        for key in ("status", "shape"):
            if s.get(key) != other.get(key):
                found.append(f"{s.get('name')}: {key} {s.get(key)} vs {other.get(key)}")
        if "value" in s or "value" in other:
            x, y = s.get("value"), other.get("value")
            rtol, atol = tol.pair("float32")
            same = (all(_close(p, q, rtol, atol, 0.0) for p, q in zip(x, y, strict=True))
                    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y)
                    else _close(x, y, rtol, atol, 0.0))
            if not same:
                found.append(f"{s.get('name')}: value {x} vs {y}")
    found += [f"{name}: only in B" for name in by_name]
    return found


Places = dict[tuple[int, int], int]


def positions(begin: dict[str, Any], places: Places | None = None) -> dict[int, int]:
    """Each node's graph position: the first path of ``next`` slots from the roots, as a number.

    A path is (the position of the node it was reached from, the slot): ``places`` numbers each
    such pair once, so two passes given the same ``places`` get the same number for the same
    path, and memory stays linear in the graph (a path written out in full, "0.2.1...", costs
    its depth per node: quadratic on a deep chain)."""
    places = {} if places is None else places
    nodes = {n["id"]: n for n in begin.get("nodes") or []}
    roots = begin.get("roots")
    if not roots:
        pointed = {i for n in nodes.values() for i in n.get("next") or [] if i is not None}
        roots = [i for i in nodes if i not in pointed]
    where: dict[int, int] = {}
    queue = deque((r, -1, k) for k, r in enumerate(roots))
    while queue:
        node_id, parent, slot = queue.popleft()
        if node_id in where or node_id not in nodes:
            continue
        here = where[node_id] = places.setdefault((parent, slot), len(places))
        for k, child in enumerate(nodes[node_id].get("next") or []):
            if child is not None and child not in where:
                queue.append((child, here, k))
    return where


@dataclass
class Finding:
    """One place where the runs differ (or a structural mismatch)."""

    kind: str  # "gradient" | "structure" | "saved" | "incoming"
    what: str
    pass_a: int | None = None
    pass_b: int | None = None
    step: int | None = None
    node: dict[str, Any] | None = None  # A's node info (name, module, source)
    details: list[str] | None = None
    sides: list[dict[str, Any]] | None = None  # [{slot, a, b}] the numbers both sides
    hint: str | None = None  # what the recorded numbers imply about the cause
    node_b: dict[str, Any] | None = None  # B's node where a different op stands in A's place

    def as_dict(self) -> dict[str, Any]:
        node = self.node or {}
        out = {"kind": self.kind, "what": self.what, "pass": self.pass_a, "pass_b": self.pass_b,
               "step": self.step, "node": node.get("name"), "module": node.get("module"),
               "source": node.get("source"), "details": self.details or [],
               "sides": self.sides or [], "hint": self.hint}
        if self.node_b is not None:
            out.update(node_b=self.node_b.get("name"), module_b=self.node_b.get("module"),
                       source_b=self.node_b.get("source"))
        return out


_BUILTIN = re.compile(r"Backward\d+$")


def hint(event: dict[str, Any]) -> str:
    """Why a node's outgoing gradients differ when all that was recorded of its inputs agrees."""
    tensors = [s.get("name") for s in event.get("saved") or []
               if s.get("status") in ("alive", "freed", "modified")]
    names = ", ".join(str(t) for t in tensors)
    if _BUILTIN.search(str(event.get("name"))) or event.get("name") == "AccumulateGrad":
        if tensors:
            return (f"a built-in backward given the same gradients gives the same result: its "
                    f"saved tensor(s) {names} must differ (their values are not recorded), so the "
                    "difference is born in the forward op on that line")
        return ("a built-in backward with the same inputs and saved values: the kernel itself "
                "computes differently (device or precision)")
    if tensors:
        return (f"a custom backward: either its backward() differs or its saved tensor(s) "
                f"{names} differ (their values are not recorded)")
    return "a custom backward: its backward() computes differently"


def brief_summary(summary: dict | None) -> dict[str, Any] | None:
    if summary is None:
        return None
    return {k: summary.get(k) for k in ("shape", "dtype", "norm", "min", "max", "mean")}


def _stats(group: list | None, stat: str = "norm") -> list[Any]:
    return [None if s is None else s.get(stat) for s in group or []]


def differing_stat(a: list | None, b: list | None, tol: Tolerance) -> str:
    """The statistic a context row shows for two groups of gradients: the first, in
    ``compare_summary``'s order, out of tolerance (a sign flip keeps the norm: its max or mean
    differs), else the norm."""
    for x, y in zip(a or [], b or [], strict=False):
        if not x or not y:
            continue
        rtol, atol = tol.pair(x.get("dtype"), y.get("dtype"))
        scale = max(_scale(x), _scale(y))
        for stat in _STATS:
            if stat in x and stat in y and not _close(x[stat], y[stat], rtol, atol, scale):
                return stat
    return "norm"


class PassDiff:
    """Aligns one pass of A with one of B and finds the birth node."""

    def __init__(self, a: Pass, b: Pass, tol: Tolerance) -> None:
        self.a, self.b, self.tol = a, b, tol
        places: Places = {}
        self.pos_a, self.pos_b = positions(a.begin, places), positions(b.begin, places)
        self.by_pos_b = {p: i for i, p in self.pos_b.items()}
        self.info_a = {n["id"]: n for n in a.nodes}
        self.info_b = {n["id"]: n for n in b.nodes}
        self.steps_b = {e["id"]: e for e in b.steps}
        self.context: list[dict[str, Any]] = []

    def _finding(self, kind: str, what: str, event: dict | None, **extra: Any) -> Finding:
        node = self.info_a.get(event["id"]) if event else None
        return Finding(kind, what, self.a.number, self.b.number,
                       event.get("step") if event else None, node, **extra)

    def structure(self) -> Finding | None:
        """The first node, in A's execution order, that B's graph does not have as it is."""
        for event in self.a.steps:
            position = self.pos_a.get(event["id"])
            other_id = self.by_pos_b.get(position) if position is not None else None
            if other_id is None:
                return self._finding("structure", f"{event.get('name')} is only in A", event)
            other_name = self.info_b[other_id].get("name")
            if other_name != event.get("name"):
                return self._finding(
                    "structure", f"a different op: {event.get('name')} in A, {other_name} in B",
                    event, node_b=self.info_b[other_id])
        return None

    def run(self) -> tuple[Finding | None, Finding | None]:
        """(the first difference, the earliest node whose saved tensors differ) in this pass."""
        first: Finding | None = self.structure()
        cause: Finding | None = None
        if first is not None:
            steps = [e.get("step") for e in self.a.steps]
            self._tail = steps.index(first.step) + 1 if first.step in steps else 0
        for event in self.a.steps:
            row, finding, saved_differs = self._step(event)
            self.context.append(row)
            if saved_differs and cause is None:
                cause = saved_differs
            if finding and first is None:
                first = finding
                self._tail = len(self.context)
            if first and len(self.context) >= self._tail + 2:
                break
        if first is None:
            first = self._structure_of_b()
        return first, cause

    def _step(self, event: dict) -> tuple[dict, Finding | None, Finding | None]:
        node_id = event["id"]
        # a node with no outgoing gradient (AccumulateGrad) is shown by what it received
        shown = "grad_inputs" if event.get("grad_inputs") else "grad_outputs"
        row = {"step": event.get("step"), "node": event.get("name"),
               "stat": "norm", "a": _stats(event.get(shown)), "b": None, "same": False,
               "incoming": shown == "grad_outputs"}
        position = self.pos_a.get(node_id)
        other_id = self.by_pos_b.get(position) if position is not None else None
        if other_id is None:
            return row, self._finding("structure", f"{event.get('name')} is only in A", event), None
        other_name = self.info_b[other_id].get("name")
        if other_name != event.get("name"):
            return row, self._finding(
                "structure", f"a different op: {event.get('name')} in A, {other_name} in B",
                event, node_b=self.info_b[other_id]), None
        other = self.steps_b.get(other_id)
        if other is None:
            return row, self._finding("structure", f"{event.get('name')} ran in A only", event), None
        stat = differing_stat(event.get(shown), other.get(shown), self.tol)
        row["stat"] = stat
        row["a"], row["b"] = _stats(event.get(shown), stat), _stats(other.get(shown), stat)
        incoming = compare_group(event.get("grad_outputs"), other.get("grad_outputs"), self.tol)
        saved = compare_saved(event.get("saved"), other.get("saved"), self.tol)
        outgoing = compare_group(event.get("grad_inputs"), other.get("grad_inputs"), self.tol)
        row["same"] = not (incoming or saved or outgoing)
        saved_finding = (self._finding("saved", "saved tensors differ", event, details=saved)
                         if saved and not incoming else None)
        if row["same"]:
            return row, None, saved_finding
        if incoming:
            what = "incoming gradients differ"
            if event.get("step") == 1:
                what += " (the gradient given to backward() differs)"
            sides = self._sides(event, other, "grad_outputs")
            return row, self._finding("incoming", what, event, details=incoming,
                                      sides=sides), saved_finding
        what = ("outgoing gradients differ, incoming gradients and saved tensors agree"
                if not saved else "saved tensors and outgoing gradients differ")
        sides = self._sides(event, other, "grad_inputs")
        finding = self._finding("gradient", what, event, details=saved + outgoing, sides=sides)
        if not saved:
            finding.hint = hint(event)
        return row, finding, saved_finding

    @staticmethod
    def _sides(a: dict, b: dict, slot: str) -> list[dict[str, Any]]:
        ga, gb = a.get(slot) or [], b.get(slot) or []
        return [{"slot": f"{slot}[{i}]", "a": brief_summary(x), "b": brief_summary(y)}
                for i, (x, y) in enumerate(zip(ga, gb, strict=False))]

    def _structure_of_b(self) -> Finding | None:
        ran_a = {self.pos_a.get(e["id"]) for e in self.a.steps}
        for event in self.b.steps:
            if self.pos_b.get(event["id"]) not in ran_a:
                node = self.info_b.get(event["id"])
                return Finding("structure", f"{event.get('name')} ran in B only", self.a.number,
                               self.b.number, event.get("step"), node)
        if len(self.a.nodes) != len(self.b.nodes):
            return Finding("structure", f"the graph has {len(self.a.nodes)} nodes in A, "
                           f"{len(self.b.nodes)} in B", self.a.number, self.b.number)
        return None


def _ending(a: Pass, b: Pass) -> Finding | None:
    """How each pass ended: finished or not, ok or with an error."""
    def say(p: Pass) -> str:
        if p.end is None:
            return "did not finish"
        return "ended ok" if p.end.get("status") == "ok" else f"failed ({p.end.get('error')})"

    if say(a) == say(b):
        return None
    return Finding("structure", f"the pass {say(a)} in A, {say(b)} in B", a.number, b.number)


def diff(a: TraceIndex, b: TraceIndex, tol: Tolerance) -> dict[str, Any]:
    """Compare two opened traces; the report as one JSON-able object."""
    numbers_a, numbers_b = a.numbers(), b.numbers()
    report: dict[str, Any] = {
        "a": a.path, "b": b.path, "passes": [len(numbers_a), len(numbers_b)],
        "notes": [n for n in (a.note(), b.note()) if n] + edit_notes(a, "A") + edit_notes(b, "B"),
        "same": True,
        "difference": None, "cause": None, "context": [],
    }
    dtypes: set[tuple[str, str]] = set()
    for na, nb in zip(numbers_a, numbers_b, strict=False):
        pa, pb = a.read(na), b.read(nb)
        for ea, eb in zip(pa.steps, pb.steps, strict=False):
            for x, y in zip(ea.get("grad_outputs") or [], eb.get("grad_outputs") or [],
                            strict=False):
                if x and y and x.get("dtype") != y.get("dtype"):
                    dtypes.add((x.get("dtype"), y.get("dtype")))
        one = PassDiff(pa, pb, tol)
        first, cause = one.run()
        if first is None:
            first = _ending(pa, pb)
        if first is not None and first.kind != "structure":  # an edit changes numbers only
            first.hint = edit_hint([("A", a, first.pass_a), ("B", b, first.pass_b)],
                                   first.step) or first.hint
        if first is not None:
            report["same"] = False
            report["difference"] = first.as_dict()
            if cause is not None and first.kind != "structure":
                report["cause"] = cause.as_dict()
            report["context"] = one.context[-5:]
            break
    if report["same"] and len(numbers_a) != len(numbers_b):
        report["same"] = False
        report["difference"] = Finding(
            "structure", f"{len(numbers_a)} passes in A, {len(numbers_b)} in B").as_dict()
    for x, y in sorted(dtypes):
        rtol, atol = tol.pair(x, y)
        report["notes"].append(f"dtypes differ ({x} in A, {y} in B): compared with rtol={rtol:g}, "
                               f"atol={atol:g}")
    return report
