"""The status line: where the pass is, why it stopped, and the keys."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from backstep.tui.snapshot import Snapshot

REASONS = {
    "pass_start": "start of pass",
    "step": "step",
    "breakpoint": "breakpoint",
    "interrupt": "interrupted",
    "nonfinite": "non-finite gradient",
    "norm": "gradient norm",
    "review": "review (recorded)",
}
HINTS = (("n", "step"), ("c", "continue"), ("f", "finish"), ("b", "break"), ("B", "conditions"),
         ("?", "help"), ("q", "quit"))


def status_text(snapshot: Snapshot, *, waiting: bool, gone: str | None,
                breakpoints: int, review: bool = False) -> Text:
    text = Text()
    if review:  # p looked back: n walks forward again to the live stop
        text.append(" review ", style="bold reverse magenta")
    view = snapshot.pass_
    if view is not None:
        text.append(f" pass {view.number} ", style="bold reverse")
        text.append(f" {view.api}", style="bold")
        if view.retain_graph:
            text.append(" retain_graph", style="yellow")
        if view.create_graph:
            text.append(" create_graph", style="yellow")
        total = len(view.graph.nodes)
        stop = snapshot.stop
        step = stop.step if stop is not None and stop.pass_ == view.number else view.done
        text.append(f"  step {step} of {total}")
    if gone is not None:
        text.append(f"  {gone}", style="bold red")
    elif snapshot.exit is not None:
        code = snapshot.exit.code
        text.append(f"  script exited with code {code}",
                    style="bold green" if code == 0 else "bold red")
        text.append(" — q to quit", style="dim")
    elif snapshot.stop is not None and not waiting:
        stop = snapshot.stop
        text.append("  stopped: ", style="dim")
        text.append(REASONS.get(stop.reason, stop.reason), style="bold yellow")
        # the node's name before the detail: on a narrow terminal the line is cut at the right
        text.append(f" {'after' if stop.after else 'before'} {stop.name} #{stop.id}")
        if stop.detail:
            text.append(f" ({stop.detail})", style="yellow")
        if stop.thread is not None:
            where = f" on {stop.thread}" + (f" ({stop.device})" if stop.device else "")
            text.append(where, style="dim")
        count = len(snapshot.waiting)
        if count:
            text.append(f"  {count} pass{'es' if count != 1 else ''} waiting",
                        style="bold magenta")
            where = ", ".join(f"#{w.pass_}" + (f" on {w.thread}" if w.thread else "")
                              for w in snapshot.waiting[:2])
            text.append(f" ({where}{', …' if count > 2 else ''})", style="magenta")
    elif view is not None and view.ended:
        text.append(f"  pass {view.status}", style="green" if view.status == "ok" else "bold red")
        if view.error:
            text.append(f": {view.error}", style="red")
    elif snapshot.session is None:
        text.append(" starting the script…", style="dim")
    else:
        text.append("  running… (ctrl+c stops at the next node)", style="dim")
    if breakpoints:
        text.append(f"  ●{breakpoints}", style="red")
    text.append("   ")
    hints = HINTS
    count = len(snapshot.diagnoses)
    if count:  # the banner may be dismissed: say how to bring it back
        what = f"{count} diagnos{'is' if count == 1 else 'es'}"
        hints = (*HINTS[:-2], ("d", what), *HINTS[-2:])
    for key, what in hints:
        text.append(f" {key}", style="bold cyan")
        text.append(f" {what}", style="dim")
    return text


def live_passes(snapshot: Snapshot, width: int = 0) -> str:
    """The passes running at once, for the graph panel's lower border ("" for just one);
    without their threads when that does not fit in ``width`` columns."""
    live = snapshot.live
    if len(live) < 2 and not snapshot.waiting:
        return ""
    full = " · ".join(f"#{p.number} {p.state}" + (f" ({p.thread})" if p.thread else "")
                      for p in live)
    if not width or len(full) + 6 <= width:
        return full
    return " · ".join(f"#{p.number} {p.state}" for p in live)


class StatusLine(Static):
    """One line at the bottom of the screen."""

    def show(self, snapshot: Snapshot, *, waiting: bool, gone: str | None,
             breakpoints: int, review: bool = False) -> None:
        # one line, always: no layout (a layout pass repaints every scrollbar on screen)
        self.update(status_text(snapshot, waiting=waiting, gone=gone, breakpoints=breakpoints,
                                review=review), layout=False)
