"""``backstep show``: the live UI over a recorded trace, stepping either way, no script run.

The app is the live ``BackstepApp`` with a ``Replay`` cursor in place of a debuggee: every key
moves the cursor and the snapshot at the cursor is posted as if the reader had made it. Keys:
n/p a node forward/back, c/C on to the next/previous stop condition, g to a pass or step,
[ / ] the previous/next pass. No torch is imported and nothing runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import Input, Static

from backstep import safe_text
from backstep.traces.index import TraceIndex
from backstep.tui.actions.replay_console import ReplayConsoleActions
from backstep.tui.live_app import BackstepApp
from backstep.tui.messages import SnapshotReady
from backstep.tui.panels.console import ConsolePanel
from backstep.tui.panels.gradients import GradientsPanel
from backstep.tui.panels.help import HelpScreen
from backstep.tui.panels.status import EAGER, REASONS, StatusLine, with_keys
from backstep.tui.runtime.settle import settle, tidy
from backstep.tui.state.against import Against
from backstep.tui.state.carry import Carry
from backstep.tui.state.replay import PassTimeline, Replay
from backstep.tui.state.snapshot import PassView
from backstep.tui.text.edited import EDITED_STYLE, EDITED_WORDS

SCAN_SLICE = 4 * 1024 * 1024  # bytes indexed (and passes folded) per tick while a trace opens
FOLD_SLICE = 0.01  # seconds of folding passes' leaf accumulations per tick after that
AHEAD_AFTER = 0.15  # seconds idle after a move before the next pass is opened ahead
TIDY_AFTER = 1.0  # seconds idle after a move before garbage is collected (longer than a read
# between keys a person presses in turn, so that no such key waits for it)
HINTS = (("n/p", "step"), ("c/C", "continue"), ("[/]", "pass"), ("g", "go to"), ("b", "break"),
         ("?", "help"), ("q", "quit"))


REPLAY_KEYS = (
    ("n / p", "a node forward / back, across passes (back shows what live showed there)"),
    ("c / C", "on to the next / previous breakpoint or pass start"),
    ("[ / ]", "the start of this or the previous pass / the next pass"),
    ("g", "go to a pass (3), a step of it (3:12), or a step of this pass (:12)"),
    ("b / B", "breakpoints for c / C: the selected node's type / conditions"),
    ("d / D", "next / previous diagnosis; x dismisses the banner"),
    (": / !", "a line of Python over what the trace recorded here (summaries: no tensors)"),
    ("tab", "move between panels; arrows move in the graph"),
    ("?", "this help"),
    ("q", "quit"),
)


class ReplayHelp(HelpScreen):
    """The keys of a replay."""

    def compose(self) -> ComposeResult:
        table = Table(box=None, padding=(0, 2), show_header=False)
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for key, what in REPLAY_KEYS:
            table.add_row(key, what)
        with Vertical(id="help-box"):
            yield Static("backstep show — keys", id="help-title")
            yield Static(table)
            yield Static("escape closes", classes="dim-hint")


def parse_goto(text: str, current: int | None) -> tuple[int, int | None] | None:
    """``"3"`` is pass 3; ``"3:12"`` pass 3 before step 12; ``":12"`` step 12 of this pass."""
    text = text.strip()
    try:
        if ":" in text:
            number, step = text.split(":", 1)
            number_i = int(number) if number.strip() else current
            return (number_i, int(step)) if number_i is not None else None
        return int(text), None
    except ValueError:
        return None


class GotoDialog(ModalScreen[str | None]):
    """Asks where to go: a pass, or pass:step."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(id="goto-box"):
            yield Static("go to pass N, or N:STEP, or :STEP in this pass")
            yield Input(placeholder="2:15", id="goto-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ReplayApp(ReplayConsoleActions, BackstepApp):
    """The live UI, reading a trace."""

    BINDINGS = [
        Binding("n", "move(1)", "step"),
        Binding("p", "move(-1)", "step back"),
        Binding("c", "find(1)", "continue"),
        Binding("C", "find(-1)", "continue back"),
        Binding("g", "goto", "go to"),
        Binding("right_square_bracket", "other_pass(1)", "next pass"),
        Binding("left_square_bracket", "other_pass(-1)", "previous pass"),
        Binding("f", "other_pass(1)", "finish"),
    ]

    DEFAULT_CSS = """
    #goto-box { width: 60; height: auto; border: round $accent; padding: 0 1; }
    GotoDialog { align: center middle; }
    """

    def __init__(self, index: TraceIndex, *, breakpoints: list[dict[str, Any]] | None = None,
                 stop_at_pass_start: bool = True, note: str | None = None,
                 against: Against | None = None, settle_memory: bool = False) -> None:
        super().__init__(None, breakpoints=breakpoints or [],
                         stop_at_pass_start=stop_at_pass_start)
        self.replay = Replay(index)
        self.note = note
        self.title = f"backstep show {safe_text.printable(index.path)}"
        self.against = against
        self._notes: list[str] = []  # backstep's own lines in the console, kept on a redraw
        self._cut_told = False  # the trace was cut while open, and the person told so
        self._output_shown = 0  # output events in the console: those printed before the cursor
        self._ahead: Timer | None = None  # opens the next pass once the person is reading
        self._post_waiting = False  # a move's drawing is queued behind the keys that wait
        # backstep show's own process: freeze what is built once indexed (``settle``); off
        # where the app shares a process (tests)
        self._settle_memory = settle_memory
        self._tidy: Timer | None = None  # collects garbage once the person rests (``tidy``)
        # the pass before a pass's start, as the flow chart (F) shows it: (its number, views)
        self._flow_before: tuple[int, tuple[PassView, ...]] | None = None
        self._scanning: Timer | None = None  # indexes, then folds, in slices; None when done
        if against is not None:
            self.title += f" --against {safe_text.printable(against.b.path)}"
            self._to_difference()

    def _to_difference(self) -> None:
        """Start where A first differs from B: after the birth node, or before the node where
        the graphs part (a structural difference)."""
        found = self.against.difference if self.against is not None else None
        if found is None or found.get("pass") is None:
            return
        if found.get("step") is None:
            self.replay.jump(found["pass"])
        elif found["kind"] == "structure":
            self.replay.jump(found["pass"], found["step"])
        else:
            self.replay.stop_at(found["pass"], found["step"], "first difference")

    def _mounted(self) -> None:
        if self.against is not None:
            panel = self.query_one(GradientsPanel)
            panel.against, panel.reason = self.against.node, self.against.reason
        self._post()
        if self.replay.index.done:
            self._indexed()
        # a large trace: the rest is indexed, then each pass's leaves folded (so that g to any
        # pass opens at once), in slices between keys
        self._scanning = self.set_interval(0.02, self._scan_more)

    def _scan_more(self) -> None:
        if self._scanning is None:  # stopped: a tick already under way does nothing
            return
        index = self.replay.index
        if not index.done:
            if index.scan(SCAN_SLICE):
                self._indexed()
            self._refresh_status()
        elif self.replay.carries.work(FOLD_SLICE):
            self._scanning.stop()
            self._scanning = None
            if self._settle_memory:
                settle()  # built for good: out of the collector's way from here on

    def _indexed(self) -> None:
        """The whole file is indexed: say what it holds, and what is wrong with it."""
        console = self.query_one(ConsolePanel)
        self._note(f"replaying {self.replay.index.path}: {len(self.replay.numbers)} pass(es)")
        self.note = self.note or self.replay.index.note()
        self._cut_told = self.replay.index.cut  # the note says so
        if self.note:
            self._note(self.note)
            self.notify(self.note, severity="warning", timeout=6)
        exit_event = self.replay.index.exit
        if exit_event is not None and exit_event.get("traceback"):
            console.show_traceback(str(exit_event["traceback"]))

    def _note(self, text: str) -> None:
        self._notes.append(text)
        self.query_one(ConsolePanel).note(text)

    def _post(self) -> None:
        self.post_message(SnapshotReady(self.replay.snapshot()))
        if self.replay.index.cut and not self._cut_told:  # found reading a pass, after the scan
            self._cut_told = True
            self.notify(self.replay.index.note() or "", severity="warning", timeout=10,
                        markup=False)
        self._show_output()
        if self._ahead is not None:
            self._ahead.stop()
        self._ahead = self.set_timer(AHEAD_AFTER, self._prepare)
        if self._settle_memory:
            if self._tidy is not None:
                self._tidy.stop()
            self._tidy = self.set_timer(TIDY_AFTER, self._collect)

    def _collect(self) -> None:
        """The person has been reading a while: the collector's work now, not during a key."""
        self._tidy = None
        if self._scanning_done():  # settled: else the index's slices are still being built
            tidy()

    def _prepare(self) -> None:
        if not self._scanning_done() or self.replay.prepare():  # again, until nothing is left
            self._ahead = self.set_timer(AHEAD_AFTER, self._prepare)

    def _scanning_done(self) -> bool:
        return self.replay.index.done and self.replay.carries.done

    def _show_output(self) -> None:
        """The console holds what the script printed before the step shown (when the trace
        recorded it): written on as the cursor moves on, redrawn when it moves back."""
        index = self.replay.index
        count = index.outputs_before(self.replay.offset())
        if count == self._output_shown:
            return
        console = self.query_one(ConsolePanel)
        start = self._output_shown
        if count < start:
            console.log_view.clear()
            for note in self._notes:
                console.note(note)
            start = 0
        for _stream, text in index.output(count)[start:]:
            console.write(text)
        self._output_shown = count

    def _moved(self, ok: bool, why: str) -> None:
        if ok:
            self._post_soon()
        else:
            self.notify(why, timeout=2)

    def _post_soon(self) -> None:
        """Draw the cursor's place once the keys already waiting have moved it: a held ``]``
        or ``n`` moves the cursor at the key-repeat rate and draws only where it ends up, so
        nothing is left to catch up with when the key is let go."""
        if not self._post_waiting:
            self._post_waiting = True
            self.call_later(self._post_now)

    def _post_now(self) -> None:
        self._post_waiting = False
        self._post()

    # -- keys -----------------------------------------------------------------------------

    def action_move(self, delta: int) -> None:
        self._moved(self.replay.step(delta),
                    "end of the trace" if delta > 0 else "start of the trace")

    def action_step(self) -> None:
        self.action_move(1)

    def action_find(self, direction: int) -> None:
        ok = self.replay.find(self.breakpoints, direction, self.stop_at_pass_start)
        self._moved(ok, "no further stop in the trace" if direction > 0 else
                    "no earlier stop in the trace")

    def action_resume(self, command: str) -> None:
        self.action_find(1)

    def action_other_pass(self, delta: int) -> None:
        self._moved(self.replay.pass_(delta), "no next pass" if delta > 0 else "no previous pass")

    def action_goto(self) -> None:
        def done(text: str | None) -> None:
            if text is None:
                return
            pos = self.replay.position
            target = parse_goto(text, pos.number if pos else None)
            if target is None:
                self.notify(f"not a pass or pass:step: {text!r}", severity="error", timeout=3)
                return
            self._moved(self.replay.jump(*target), f"no pass {target[0]} in this trace")

        self.push_screen(GotoDialog(), done)

    def action_help(self) -> None:
        self.push_screen(ReplayHelp())

    def _flow_earlier(self) -> Sequence[PassView]:
        """At a pass's start the flow chart shows the pass before it as it ended: its graph
        and its accumulate lines (only those: its nodes are not read), in a model of its own
        (the cursor's pass is left as it is)."""
        pos, numbers = self.replay.position, self.replay.numbers
        view = self.snapshot.pass_
        if pos is None or view is None or view.accumulations() or pos.number not in numbers:
            return ()
        i = numbers.index(pos.number)
        if i == 0 or not self.replay.index.passes[numbers[i - 1]].complete:
            return ()
        before = numbers[i - 1]
        if self._flow_before is None or self._flow_before[0] != before:  # read once a pass
            line = PassTimeline(self.replay.index, before, Carry())
            for event in self.replay.index.read_kinds(before, {"accumulate", "pass_end"}):
                line.model.apply(event)
            self._flow_before = (before, line.model.ended)
        return self._flow_before[1]

    def action_interrupt(self) -> None:
        if not self.cancel_evaluation():
            self.exit(0)

    def _send_breakpoints(self) -> None:
        self._refresh_status()  # breakpoints live here: c and C read them

    def action_quit_session(self) -> None:
        self.exit(0)

    # -- drawing --------------------------------------------------------------------------

    def _refresh_status(self) -> None:
        self.query_one(StatusLine).show_line(lambda width: replay_status(self, width))


def replay_status(app: ReplayApp, width: int = 0) -> Text:
    """The status line in a replay: where the cursor is, why it stopped there, the keys (as
    many as fit in ``width``, "? help" always). Short of room, the pass's api goes first,
    then the line is cut at the right."""
    line = with_keys(replay_place(app, api=True), HINTS, width)
    if width and line.cell_len > width - 1:  # cut: the version without the api cuts less
        line = with_keys(replay_place(app, api=False), HINTS, width)
    return line


def replay_place(app: ReplayApp, api: bool) -> Text:
    """Where the replay's cursor is and why it stopped there (the status line before its keys)."""
    snap = app.snapshot
    text = Text()
    text.append(" replay ", style="bold reverse magenta")
    view = snap.pass_
    pos = app.replay.position
    if view is not None and pos is not None:
        total = app.replay.timeline(pos.number).count
        last = app.replay.numbers[-1] if app.replay.index.done else "…"
        text.append(f" pass {view.number}/{last} ", style="bold reverse")
        if view.edits:  # the trace records a gradient the person replaced in this pass
            text.append(EDITED_WORDS, style=EDITED_STYLE)
        if api:
            text.append(f" {view.api}", style="bold")
        if view.retain_graph:
            text.append(" retain_graph", style="yellow")
        if view.parent is not None:
            text.append(f" nested in pass {view.parent}", style="yellow")
        stop = snap.stop
        if stop is not None:
            text.append(f"  step {stop.step} of {total}  ")
            text.append(REASONS.get(stop.reason, stop.reason), style="bold yellow")
            if stop.detail:
                text.append(f" ({stop.detail})", style="yellow")
            text.append(f" {'after' if stop.after else 'before'} {stop.name} #{stop.id}")
        else:
            status = view.status or "did not finish"
            text.append(f"  end of pass: {status}",
                        style="green" if status == "ok" else "bold red")
    if app.against is not None:
        text.append(against_status(app.against, pos.number if pos else None,
                                   snap.stop.step if snap.stop else None))
    if app.breakpoints:
        text.append(f"  ●{len(app.breakpoints)}", style="red")
    if snap.session is not None and snap.session.eager:  # recorded with --eager
        text.append(f"  {EAGER}", style="cyan")
    return text


def against_status(against: Against, number: int | None, step: int | None) -> Text:
    """``--against B``: whether and where A differs from B, "here" at the birth node."""
    found = against.difference
    if found is None:
        return Text("  no difference from B", style="bold green")
    if found.get("pass") == number and found.get("step") == step:
        return Text(f"  differs from B here: {found['what']}", style="bold red")
    where = ", ".join(f"{k} {found[k]}" for k in ("pass", "step") if found.get(k) is not None)
    return Text(f"  differs from B{' at ' + where if where else ''}", style="red")
