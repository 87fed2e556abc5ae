"""What the gradient-flow chart (``F``) draws, without drawing it: each leaf's gradient in model
order, which pass to chart, the verdicts, and short labels for the x axis.

At a pass's start no leaf has accumulated yet, so the chart of that pass is empty: the finished
pass before it is charted instead, labelled as such, until the new pass's first leaf arrives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text

from backstep.tui.state.records import number
from backstep.tui.state.snapshot import PassView, Snapshot
from backstep.tui.text.format import cut_left

VANISHING = 1e-7
EXPLODING = 1e3  # the default; BackstepApp(flow_exploding=...) changes it
LABEL_MIN = 8  # the narrowest x-axis label worth drawing: fewer leaves are labelled instead


@dataclass(frozen=True)
class LeafFlow:
    """One leaf's gradient in this pass (None until it accumulated)."""

    name: str
    norm: float | None
    amax: float | None
    nonfinite: bool


def pass_flows(view: PassView | None) -> list[LeafFlow]:
    """``view``'s leaves in model order: as pass_begin's ``leaves`` lists them (the order of
    ``named_parameters()``); a trace without it lists the graph's leaves as walked from the
    loss, reversed (the first layer first, roughly)."""
    if view is None:
        return []
    accs = {a.leaf: a for a in view.accumulations()}
    graph = view.graph
    names: list[str] = []
    for info in (graph.nodes[i] for i in graph.leaves) if graph.leaves else graph.nodes.values():
        if info.leaf and info.leaf not in names:
            names.append(info.leaf)
    if graph.leaves:  # the tensors that retain_grad() after them
        names += [n for n in accs if n not in names]
    else:
        names += [n for n in accs if n not in names]
        names.reverse()
    flows = []
    for name in names:
        acc = accs.get(name)
        after = acc.after if acc is not None else None
        if after is None:
            flows.append(LeafFlow(name, None, None, False))
            continue
        norm = number(after.get("norm"))
        lo, hi = number(after.get("min")), number(after.get("max"))
        amax = max(abs(lo), abs(hi)) if lo is not None and hi is not None else None
        bad = bool(after.get("nonfinite")) or norm is None or not math.isfinite(norm)
        flows.append(LeafFlow(name, norm, amax, bad))
    return flows


def leaf_flows(snapshot: Snapshot) -> list[LeafFlow]:
    """The shown pass's leaves in model order."""
    return pass_flows(snapshot.pass_)


def charted(view: PassView | None, earlier: Sequence[PassView]) -> tuple[PassView | None, str]:
    """The pass to chart and its caption: ``view`` itself once any leaf of it accumulated,
    else (a pass's start) the latest finished pass before it that has leaves."""
    if view is None:
        return None, ""
    if view.accumulations():
        return view, f"pass {view.number}" + (" (finished)" if view.ended else "")
    before = [v for v in earlier if v.number < view.number and v.ended and v.accumulations()]
    if not before:
        return view, f"pass {view.number}"
    last = max(before, key=lambda v: v.number)
    now = "starting" if view.done == 0 else "no leaf accumulated yet"
    return last, f"pass {last.number} (finished) — pass {view.number} {now}"


def verdicts(flows: list[LeafFlow], exploding: float) -> Text:
    """The leaves outside the healthy band, by name."""
    groups = {
        "NaN/Inf": [f.name for f in flows if f.nonfinite],
        f"vanishing (<{VANISHING:g})": [f.name for f in flows if not f.nonfinite
                                         and f.norm is not None and f.norm < VANISHING],
        f"exploding (>{exploding:g})": [f.name for f in flows if not f.nonfinite
                                         and f.norm is not None and f.norm > exploding],
    }
    styles = {"NaN/Inf": "bold white on red"}
    text = Text()
    for label, names in groups.items():
        if names:
            text.append(f"{label}: ", style=styles.get(label, "bold yellow"))
            text.append(", ".join(cut_left(n, 28) for n in names[:6]))
            text.append(f" (+{len(names) - 6})" if len(names) > 6 else "")
            text.append("\n")
    pending = sum(f.norm is None and not f.nonfinite for f in flows)
    done = len(flows) - pending
    text.append(f"{done}/{len(flows)} leaves accumulated", style="dim")
    if not any(groups.values()) and done:
        text.append("  · every norm within the healthy band", style="green")
    return text


def common_prefix(names: Sequence[str]) -> str:
    """The dotted components every name starts with (``model.transformer.``), leaving each
    name at least its last component."""
    parts = [n.split(".") for n in names]
    if not parts:
        return ""
    shared = 0
    shortest = min(len(p) for p in parts)
    while shared < shortest - 1 and len({p[shared] for p in parts}) == 1:
        shared += 1
    return "".join(f"{c}." for c in parts[0][:shared])


def axis_labels(names: Sequence[str], width: int) -> tuple[list[int], list[str]]:
    """Which leaves (1-based) the x axis labels in ``width`` cells, and their labels: the
    names less their shared prefix, cut from the left, every k-th leaf so that labels of at
    least ``LABEL_MIN`` cells (or the longest name, when shorter) do not run together."""
    n = len(names)
    if not n:
        return [], []
    prefix = common_prefix(names)
    short = [name[len(prefix):] for name in names]
    spacing = max(width, 1) / n  # the cells between two leaves' points
    want = min(LABEL_MIN, max(len(s) for s in short))
    every = max(1, math.ceil((want + 1) / spacing))
    room = max(1, min(max(len(s) for s in short), math.floor(spacing * every) - 1))
    picked = list(range(1, n + 1, every))
    return picked, [cut_left(short[i - 1], room) for i in picked]
