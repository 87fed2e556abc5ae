"""The gradient-flow chart (``F``): every leaf's ``.grad`` norm and max |grad|, in model order,
on a log scale, with the vanishing and exploding bands marked: the plot people otherwise
hand-roll from ``named_parameters()`` in every thread about vanishing gradients.

Drawn with textual-plotext; it follows the snapshots, so it fills in as leaves accumulate. It
charts the pass in view (under review, the pass looked back at); at a pass's start, the
finished pass before it (``flow_leaves.charted``). The x axis names the leaves, thinned to
fit; left / right move a cursor along them that gives the leaf's full name and numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from backstep.tui.state.flow_leaves import (
    EXPLODING,
    VANISHING,
    LeafFlow,
    axis_labels,
    charted,
    leaf_flows,
    pass_flows,
    verdicts,
)
from backstep.tui.state.snapshot import PassView, Snapshot
from backstep.tui.text.format import num

__all__ = ["EXPLODING", "FLOOR", "VANISHING", "FlowScreen", "LeafFlow", "leaf_flows",
           "verdicts"]

FLOOR = 1e-12  # zeros and NaN/Inf are drawn here on the log scale, and listed by name
Y_AXIS = 12  # cells the y axis and the borders take from the plot's width


def leaf_line(flows: list[LeafFlow], cursor: int) -> Text:
    """The leaf under the cursor: its number, full name and numbers."""
    if not flows:
        return Text("no leaves in this pass", style="dim")
    flow = flows[cursor]
    text = Text.assemble(("← → ", "dim"), (f"leaf {cursor + 1}/{len(flows)}  ", "bold"),
                         (flow.name, "bold cyan"), "  ")
    if flow.nonfinite:
        text.append("NaN/Inf", style="bold white on red")
    elif flow.norm is None:
        text.append("not accumulated yet", style="dim italic")
    else:
        text.append_text(Text.assemble(("‖grad‖ ", "dim"), num(flow.norm),
                                       ("  max |grad| ", "dim"), num(flow.amax)))
    return text


class FlowScreen(ModalScreen[None]):
    """A full view over the panels; escape, q or F closes it."""

    DEFAULT_CSS = """
    #flow-leaf { height: auto; max-height: 2; padding: 0 1; }
    """

    BINDINGS = [Binding("escape", "dismiss", "close"), Binding("q", "dismiss", "close"),
                Binding("F", "dismiss", "close"),
                Binding("left", "leaf(-1)", "previous leaf", show=False),
                Binding("right", "leaf(1)", "next leaf", show=False),
                Binding("home", "leaf(-1_000_000)", "first leaf", show=False),
                Binding("end", "leaf(1_000_000)", "last leaf", show=False)]

    def __init__(self, snapshot: Snapshot, exploding: float = EXPLODING,
                 earlier: Callable[[], Sequence[PassView]] = tuple) -> None:
        super().__init__()
        self.exploding = exploding
        self.earlier = earlier  # the ended passes kept: one is charted at a pass's start
        self._snapshot = snapshot
        self.flows: list[LeafFlow] = []
        self.caption = ""
        self.cursor = 0  # the leaf under the cursor (0-based)

    def compose(self) -> ComposeResult:
        from textual_plotext import PlotextPlot  # here: plotext costs ~35 ms at UI start-up

        with Vertical(id="flow-box"):
            yield PlotextPlot(id="flow-plot")
            yield Static("", id="flow-leaf")
            yield Static("", id="flow-verdicts")

    def on_mount(self) -> None:
        box = self.query_one("#flow-box")
        box.border_title = "Gradient flow"
        self.show(self._snapshot)

    def on_resize(self) -> None:
        self.show(self._snapshot)  # the x axis's labels are thinned to the width

    def action_leaf(self, delta: int) -> None:
        if self.flows:
            self.cursor = min(max(self.cursor + delta, 0), len(self.flows) - 1)
            self._draw()

    def show(self, snapshot: Snapshot) -> None:
        """Redraw for a snapshot (the app calls this as leaves accumulate)."""
        self._snapshot = snapshot
        view, self.caption = charted(snapshot.pass_, self.earlier())
        self.flows = pass_flows(view)
        self.cursor = min(self.cursor, max(len(self.flows) - 1, 0))
        box = self.query_one("#flow-box")
        box.border_subtitle = f"{self.caption} · escape closes" if view else "escape closes"
        sharded = view is not None and any(
            isinstance(a.after, Mapping) and "shard" in a.after for a in view.accumulations())
        box.border_title = "Gradient flow · local shards" if sharded else "Gradient flow"
        self._draw()

    def _draw(self) -> None:
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
            plt.vline(self.cursor + 1, "gray")
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
            plt.xlim(0.5, len(xs) + 0.5)
            width = (plot.size.width or self.app.size.width) - Y_AXIS
            picked, labels = axis_labels([f.name for f in self.flows], width)
            plt.xticks(picked, labels)
        plot.refresh()
        self.query_one("#flow-leaf", Static).update(leaf_line(self.flows, self.cursor))
        self.query_one("#flow-verdicts", Static).update(verdicts(self.flows, self.exploding))
