"""The gradients panel: what flows into the node and, once it ran, what flows out and where.

Each gradient is one option; Enter on it asks the app to open the tensor view, which fetches the
values from the debuggee on demand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rich.console import Group
from rich.text import Text
from textual import on
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option, OptionDoesNotExist

from backstep.tui.state.focus import Focus
from backstep.tui.state.records import Summary
from backstep.tui.text.fit import name_and_leaf
from backstep.tui.text.format import histogram, summary_line, summary_lines, values_text
from backstep.tui.text.region import incoming_title, note_label
from backstep.tui.widgets.titles import set_title

MISSING = object()  # no B side to show (not ``None``: B's gradient itself may be None)


@dataclass(frozen=True)
class Gradient:
    """One gradient's option before it is fitted: its id, title, summary and B's."""

    id: str
    title: str
    summary: Summary | None
    other: Summary | None | object = MISSING


@dataclass(frozen=True)
class Fit:
    """How much of a gradient its option shows: summary lines, values and histogram, and
    whether its title and summary share a line."""

    lines: int = 2
    extras: bool = True
    join: bool = False
    where_last: bool = False


# the fits tried in turn, until the options fit the panel's rows
FITS = (Fit(), Fit(extras=False), Fit(lines=1, extras=False),
        Fit(lines=1, extras=False, join=True),
        Fit(lines=1, extras=False, join=True, where_last=True))


class GradientsPanel(OptionList):
    """Incoming gradients (grad_outputs) and outgoing ones (grad_inputs, with their targets)."""

    @dataclass
    class Open(Message):
        """Open the tensor view on one gradient."""

        pass_: int
        node: int
        slot: str
        index: int
        title: str

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.border_title = "Gradients"
        self._focus: Focus | None = None
        # ``backstep show --against B``: (pass, node) -> B's aligned node event, or None
        self.against: Callable[[int, int], dict[str, Any] | None] | None = None
        self._other: dict[str, Any] | None = None
        # ... and, at the node where A first differs from B, the diff's finding in full
        self.reason: Callable[[int, int], list[str] | None] | None = None
        self._fitted: tuple[int, int] = (0, 0)

    def _fit(self) -> tuple[int, int]:
        """The columns and rows the options have (a scrollbar's room kept); 0s before layout."""
        region = self.content_region
        return max(region.width - self.styles.scrollbar_size_vertical, 0), region.height

    def on_focus(self) -> None:
        """Focused with no row selected (``tab``): the first gradient is, so ``enter`` opens it."""
        if self.highlighted is None:
            self.action_first()

    def on_resize(self) -> None:
        """Fit the summaries to the new size (shorter forms, or fewer lines, when short)."""
        if self._focus is not None and self._fit() != self._fitted:
            highlighted = self.highlighted_option
            self.show(self._focus)
            if highlighted is not None and highlighted.id is not None:  # the cursor stays put
                try:
                    self.highlighted = self.get_option_index(highlighted.id)
                except OptionDoesNotExist:
                    pass

    def show(self, focus: Focus) -> None:
        self._focus = focus
        self._fitted = self._fit()
        if focus.info is None:
            self.set_options([Option(Text("no node selected", style="dim"), disabled=True)])
            return
        set_title(self, f"Gradients · {focus.info.name} #{focus.node}")
        view = focus.snapshot.pass_
        self._other = (self.against(view.number, focus.node)
                       if self.against is not None and view is not None and focus.node is not None
                       else None)
        if self.against is not None and self._other is None:
            options_b = Text("B: no node here (or it did not run)", style="dim italic")
        elif self._other is not None and self._other.get("name") != focus.info.name:
            options_b = Text(f"B: a different op here, {self._other.get('name')}", style="yellow")
        else:
            options_b = None
        specs: list[Option | Gradient] = []  # the options, the gradients' yet to be fitted
        if focus.info.leaf or focus.info.module:  # the full names, cut elsewhere
            where = Text(focus.info.name, style="bold")
            if focus.info.leaf:
                where.append(f" {focus.info.leaf}", style="green")
            if focus.info.module:
                where.append(f" in {focus.info.module}", style="cyan")
            specs.append(Option(where, id="where", disabled=True))
        if focus.info.comm:  # FSDP's reduce-scatter, a DTensor redistribute: communication
            specs.append(Option(Text(f"⇄ {focus.info.comm}", style="magenta"), disabled=True))
        reason = (self.reason(view.number, focus.node)
                  if self.reason is not None and view is not None and focus.node is not None
                  else None)
        compiled = view.log.regions.get(focus.node) if view is not None else None
        if compiled is not None:  # what the one node stands for (its ops: in the graph panel)
            specs.append(Option(note_label(compiled), disabled=True))
        for line in reason or ():
            specs.append(Option(Text(line, style="red" if line[:1] != " " else "yellow"),
                                disabled=True))
        specs.append(Option(Text("incoming  (grad_outputs)", style="bold"), disabled=True))
        if options_b is not None:
            specs.append(Option(options_b, disabled=True))
        outputs = focus.grad_outputs
        if outputs is None:
            specs.append(Option(Text("not reached yet", style="dim italic"), disabled=True))
        else:
            for i, summary in enumerate(outputs):
                specs.append(self._gradient("grad_outputs", i, incoming_title(compiled, i),
                                            summary))
        specs.append(Option(Text("outgoing  (grad_inputs)", style="bold"), disabled=True))
        record = focus.record
        if record is None:
            msg = "runs next" if focus.state == "current" else "has not run"
            if focus.state == "skipped":
                msg = "skipped: this pass never ran it"
            specs.append(Option(Text(msg, style="dim italic"), disabled=True))
        elif record.error:
            specs.append(Option(Text(f"raised: {record.error}", style="bold red"), disabled=True))
        elif not record.grad_inputs and focus.info.leaf:
            specs.append(Option(Text(f"none: accumulated into {focus.info.leaf}.grad",
                                     style="dim italic"), disabled=True))
            shard = sharded_grad(focus)
            if shard is not None:  # FSDP: the .grad that counts is the reduce-scattered shard
                specs.append(Option(Text(".grad at pass end (this rank's shard)", style="bold"),
                                    disabled=True))
                specs.append(Option(summary_line(shard), disabled=True))
        elif record.grad_inputs is not None:
            graph = focus.snapshot.pass_.graph if focus.snapshot.pass_ else None
            for i, summary in enumerate(record.grad_inputs):
                target = focus.info.next[i] if i < len(focus.info.next) else None
                if target is not None and graph is not None and target in graph.nodes:
                    node = graph.nodes[target]
                    dest = f"→ {node.name} #{target}"
                    if node.leaf:  # on one line: the leaf cut from the left (full in its detail)
                        room = self._fitted[0] - len(f"grad_input[{i}] → ( #{target})") \
                            if self._fitted[0] else 10**6
                        name, leaf = name_and_leaf(node.name, node.leaf, room)
                        dest = f"→ {name} ({leaf}) #{target}"
                else:
                    dest = "→ (input needs no grad)"
                specs.append(self._gradient("grad_inputs", i, f"grad_input[{i}] {dest}", summary))
        rows = self._fitted[1]
        # short of rows, in turn: the values and histograms give way (Enter opens the tensor
        # view with all of them), the summaries keep one line (fewer fields), a gradient's
        # title and summary share a line where they fit, and the full names go below the
        # gradients (the summaries never need scrolling)
        options = [self._build(o) for o in specs]
        for fit in FITS[1:]:
            if not rows or self._count_lines(options) <= rows:
                break
            options = [self._build(o, fit) for o in specs]
            if fit.where_last:
                options = [o for o in options if o.id != "where"] + \
                    [o for o in options if o.id == "where"]
        # one replacement, not clear + add: the list never passes through empty, so a node with
        # as many lines as the last one asks for no new layout (which repaints every scrollbar)
        self.set_options(options)

    def _count_lines(self, options: list[Option]) -> int:
        """The lines ``options`` take once wrapped to the panel's width."""
        width = max(self._fitted[0], 1)
        count = 0
        for option in options:
            prompt = option.prompt
            for line in prompt.renderables if isinstance(prompt, Group) else [prompt]:
                cells = line.cell_len if isinstance(line, Text) else width
                count += max(1, -(-cells // width))
        return count

    def _build(self, spec: Option | Gradient, fit: Fit | None = None) -> Option:
        """A gradient's option as ``fit`` has it: its title, its summary in as many lines (and
        B's beside it), its values and histogram; any other option as it is."""
        if isinstance(spec, Option):
            return spec
        fit = fit or FITS[0]
        width = self._fitted[0]
        room = width - 2 if width else 0  # the summaries are indented two cells
        parts: list[Text] = [Text(spec.title, style="cyan")]
        lines = summary_lines(spec.summary, max(room, 1) if width else 0, fit.lines)
        if fit.join:
            line = Text().append(spec.title, style="cyan").append(" ").append_text(
                summary_line(spec.summary, max(width - len(spec.title) - 1, 1)))
            if line.cell_len <= width:
                parts, lines = [line], []
        parts += [Text("  ").append_text(line) for line in lines]
        if spec.other is not MISSING:
            other = summary_lines(spec.other, max(room - 3, 1) if width else 0, fit.lines)
            parts += [Text().append("  B: " if i == 0 else "     ", style="bold magenta")
                      .append_text(line)
                      for i, line in enumerate(other)]
        summary = spec.summary
        if fit.extras and summary is not None:
            values = values_text(summary)
            spark = histogram(summary)
            if values is not None and len(summary.get("values") or ()) > 1:
                parts.append(Text("  ").append_text(values))
            if spark.plain.strip():
                parts.append(Text("  hist ", style="dim").append_text(spark))
        return Option(Group(*parts), id=spec.id, disabled=summary is None)

    def _gradient(self, slot: str, index: int, title: str, summary: Summary | None) -> Gradient:
        other: Summary | None | object = MISSING
        if self._other is not None:
            group = self._other.get(slot)
            if isinstance(group, list) and index < len(group):
                other = group[index]
        return Gradient(f"{slot}:{index}", title, summary, other)

    @on(OptionList.OptionSelected)
    def _open(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        focus = self._focus
        if focus is None or focus.node is None or focus.snapshot.pass_ is None:
            return
        slot, _, index = (event.option.id or "").partition(":")
        if slot not in ("grad_outputs", "grad_inputs"):
            return
        name = focus.info.name if focus.info else "?"
        self.post_message(self.Open(focus.snapshot.pass_.number, focus.node, slot, int(index),
                                    f"{name} #{focus.node} {slot}[{index}]"))


def sharded_grad(focus: Focus) -> Summary | None:
    """The sharded ``.grad`` summary of the focused leaf, once its pass has reported it."""
    view = focus.snapshot.pass_
    if view is None or focus.info is None:
        return None
    for acc in view.accumulations():
        if acc.id == focus.node and isinstance(acc.after, Mapping) and "shard" in acc.after:
            return acc.after
    return None
