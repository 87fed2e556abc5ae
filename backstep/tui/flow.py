"""The gradient-flow chart (``F``): every leaf's ``.grad`` norm and max |grad|, in model order,
on a log scale, with the vanishing and exploding bands marked: the plot people otherwise
hand-roll from ``named_parameters()`` in every thread about vanishing gradients.

Drawn with textual-plotext; it follows the snapshots, so it fills in as leaves accumulate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from backstep.tui.format import cut_left
from backstep.tui.snapshot import Snapshot, number

VANISHING = 1e-7
EXPLODING = 1e3  # the default; BackstepApp(flow_exploding=...) changes it
FLOOR = 1e-12  # zeros and NaN/Inf are drawn here on the log scale, and listed by name


@dataclass(frozen=True)
class LeafFlow:
    """One leaf's gradient in this pass (None until it accumulated)."""

    name: str
    norm: float | None
    amax: float | None
    nonfinite: bool


def leaf_flows(snapshot: Snapshot) -> list[LeafFlow]:
    """The shown pass's leaves in model order: the graph is walked from the loss, so it lists
    the last layer's parameters first; reversed, the first layer comes first."""
    view = snapshot.pass_
    if view is None:
        return []
    accs = {a.leaf: a for a in view.accumulations()}
    names: list[str] = []
    for info in view.graph.nodes.values():
        if info.leaf and info.leaf not in names:
            names.append(info.leaf)
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


class FlowScreen(ModalScreen[None]):
    """A full view over the panels; escape, q or F closes it."""

    BINDINGS = [Binding("escape", "dismiss", "close"), Binding("q", "dismiss", "close"),
                Binding("F", "dismiss", "close")]

    def __init__(self, snapshot: Snapshot, exploding: float = EXPLODING) -> None:
        super().__init__()
        self.exploding = exploding
        self._snapshot = snapshot
        self.flows: list[LeafFlow] = []

    def compose(self) -> ComposeResult:
        from textual_plotext import PlotextPlot  # here: plotext costs ~35 ms at UI start-up

        with Vertical(id="flow-box"):
            yield PlotextPlot(id="flow-plot")
            yield Static("", id="flow-verdicts")

    def on_mount(self) -> None:
        box = self.query_one("#flow-box")
        box.border_title = "Gradient flow"
        self.show(self._snapshot)

    def show(self, snapshot: Snapshot) -> None:
        """Redraw for a snapshot (the app calls this as leaves accumulate)."""
        self._snapshot = snapshot
        self.flows = leaf_flows(snapshot)
        view = snapshot.pass_
        box = self.query_one("#flow-box")
        box.border_subtitle = f"pass {view.number} · escape closes" if view else "escape closes"
        plot: Any = self.query_one("#flow-plot")
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("‖grad‖ and max |grad| per leaf, model order (log scale)")
        xs = list(range(1, len(self.flows) + 1))
        if xs:
            def y(value: float | None, bad: bool) -> float:
                return FLOOR if bad or value is None or value <= 0 else value

            # a leaf that has not accumulated yet has no point (at the floor it would read as
            # a vanished gradient); the x axis still counts it, so the layers keep their places
            done = [(x, f) for x, f in zip(xs, self.flows, strict=True)
                    if f.norm is not None or f.nonfinite]
            norms = [y(f.norm, f.nonfinite) for _, f in done]
            amaxes = [y(f.amax, f.nonfinite) for _, f in done]
            if done:
                at = [x for x, _ in done]
                plt.scatter(at, norms, marker="●", label="‖grad‖", color="cyan")
                plt.scatter(at, amaxes, marker="x", label="max |grad|", color="magenta")
            bad = [x for x, f in zip(xs, self.flows, strict=True) if f.nonfinite]
            if bad:
                plt.scatter(bad, [FLOOR] * len(bad), marker="✗", label="NaN/Inf", color="red")
            plt.hline(VANISHING, "yellow")
            plt.hline(self.exploding, "red")
            plt.yscale("log")
            values = [*norms, *amaxes, VANISHING, self.exploding]
            low, high = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
            step = max(1, (high - low) // 8)
            decades = [10.0**e for e in range(low, high + 1, step)]
            plt.yticks(decades, [f"1e{round(math.log10(d))}" for d in decades])
            plt.xlabel("leaf (model order)")
            if len(xs) <= 8:
                plt.xticks(xs, [cut_left(f.name, 12) for f in self.flows])
            else:
                every = math.ceil(len(xs) / 8)
                plt.xticks(xs[::every], [str(x) for x in xs[::every]])
        plot.refresh()
        self.query_one("#flow-verdicts", Static).update(verdicts(self.flows, self.exploding))
