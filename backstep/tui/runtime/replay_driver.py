"""``backstep show``'s driver: the recorded timeline of a trace, stepped either way, no script run.

Every key moves a ``Replay`` cursor (``tui/state/replay.py``) and the snapshot at the cursor is
posted as if a reader had made it. n/p move a node forward/back, c/C on to the next/previous
stop condition, g to a pass or step, [ / ] the previous/next pass. No torch is imported and
nothing runs: a console line is evaluated over what the trace recorded (``trace_console``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.timer import Timer

from backstep import safe_text
from backstep.traces.index import TraceIndex
from backstep.traces.trips import tensors_path, trip_words
from backstep.tui.messages import Evaluated, SnapshotReady
from backstep.tui.panels.console import ConsolePanel
from backstep.tui.panels.goto import parse_goto
from backstep.tui.panels.gradients import GradientsPanel
from backstep.tui.panels.status import EAGER, REASONS, with_keys
from backstep.tui.runtime.settle import settle, tidy
from backstep.tui.state.against import Against
from backstep.tui.state.carry import Carry
from backstep.tui.state.replay import PassTimeline, Replay
from backstep.tui.state.run_history import HistoryTable, RunHistory
from backstep.tui.state.snapshot import PassView, Snapshot
from backstep.tui.state.trace_console import TraceConsole
from backstep.tui.text.edited import EDITED_STYLE, EDITED_WORDS

if TYPE_CHECKING:  # the app imports no driver: no circle
    from backstep.tui.app import BackstepApp

SCAN_SLICE = 4 * 1024 * 1024  # bytes indexed (and passes folded) per tick while a trace opens
FOLD_SLICE = 0.01  # seconds of folding passes' leaf accumulations per tick after that
AHEAD_AFTER = 0.15  # seconds idle after a move before the next pass is opened ahead
TIDY_AFTER = 1.0  # seconds idle after a move before garbage is collected (longer than a read
# between keys a person presses in turn, so that no such key waits for it)
HINTS = (("n/p", "step"), ("c/C", "continue"), ("[/]", "pass"), ("g", "go to"), ("b", "break"),
         ("?", "help"), ("q", "quit"))

# what the keys do in a replay, where that is not what they do live (the help screen's rows;
# keys with the same words share a row); "" leaves a key out of a replay's help
KEY_HELP = {
    "step": "a node forward / back, across passes (back shows what live showed there)",
    "back": "a node forward / back, across passes (back shows what live showed there)",
    "resume('continue')": "on to the next / previous breakpoint or pass start",
    "continue_back": "on to the next / previous breakpoint or pass start",
    "resume('finish')": "",
    "review_pass(-1)": "the start of this or the previous pass / the next pass",
    "review_pass(1)": "the start of this or the previous pass / the next pass",
    "toggle_break": "breakpoints for c / C: the selected node's type / conditions",
    "break_dialog": "breakpoints for c / C: the selected node's type / conditions",
    "diagnosis(1)": "next / previous diagnosis; x dismisses the banner",
    "diagnosis(-1)": "next / previous diagnosis; x dismisses the banner",
    "dismiss_diagnosis": "",
    "expression": "a line of Python over what the trace recorded here (summaries: no tensors)",
    "edit": "",
    "input": "",
    "interrupt": "",
    "quit_session": "quit",
    "zoom": "",
    "search": "",
    "search_step(-1)": "",
    "leave_search": "",
    "flow": "",
    "modules": "",
    "open_tensor": "",
    "click": "",
}


# brief lines (history) read per look of the history view: about 0.1 s of parsing a slice
BRIEF_SLICE = 4_000


class ReplayDriver:
    """A trace, replayed: the app's session in ``backstep show``."""

    cannot_edit = "a trace holds no tensors: gradient edits need a live session (backstep run)"
    key_help = KEY_HELP
    help_title = "backstep show — keys"

    def __init__(self, index: TraceIndex, *, note: str | None = None,
                 against: Against | None = None, settle_memory: bool = False) -> None:
        self.replay = Replay(index)
        self.note = note
        self.title: str | None = f"backstep show {safe_text.printable(index.path)}"
        self.against = against
        self.app: BackstepApp | None = None
        self.trace_console: TraceConsole | None = None
        self._notes: list[str] = []  # backstep's own lines in the console, kept on a redraw
        self._cut_told = False  # the trace was cut while open, and the person told so
        self._refused_told: set[int] = set()  # passes too big to read, the person told so
        self._trips_told: set[int] = set()  # passes a --when spec tripped in, said once each
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
        self._brief = RunHistory()  # the trace's passes in brief, for the history view (H)
        self.status = self.status_line
        if against is not None:
            self.title += f" --against {safe_text.printable(against.b.path)}"
            self._to_difference()

    def _app(self) -> BackstepApp:
        assert self.app is not None, "the driver has not started"
        return self.app

    def offers(self, action: str) -> bool:
        return True

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

    def attach(self, app: BackstepApp) -> None:
        self.app = app

    def start(self) -> None:
        app = self._app()
        if self.against is not None:
            panel = app.query_one(GradientsPanel)
            panel.against, panel.reason = self.against.node, self.against.reason
        self.post()
        if self.replay.index.done:
            self._indexed()
        # a large trace: the rest is indexed, then each pass's leaves folded (so that g to any
        # pass opens at once), in slices between keys
        self._scanning = app.set_interval(0.02, self._scan_more)

    def _scan_more(self) -> None:
        if self._scanning is None:  # stopped: a tick already under way does nothing
            return
        index = self.replay.index
        if not index.done:
            if index.scan(SCAN_SLICE):
                self._indexed()
            self._app().refresh_status()
        elif self.replay.carries.work(FOLD_SLICE):
            self._scanning.stop()
            self._scanning = None
            if self._settle_memory:
                settle()  # built for good: out of the collector's way from here on

    def _indexed(self) -> None:
        """The whole file is indexed: say what it holds, and what is wrong with it."""
        app = self._app()
        console = app.query_one(ConsolePanel)
        self._note(f"replaying {self.replay.index.path}: {len(self.replay.numbers)} pass(es)")
        self.note = self.note or self.replay.index.note()
        self._cut_told = self.replay.index.cut  # the note says so
        if self.note:
            self._note(self.note)
            app.notify(self.note, severity="warning", timeout=6)
        exit_event = self.replay.index.exit
        if exit_event is not None and exit_event.get("traceback"):
            console.show_traceback(str(exit_event["traceback"]))

    def _note(self, text: str) -> None:
        self._notes.append(text)
        self._app().query_one(ConsolePanel).note(text)

    def post(self) -> None:
        """Post the snapshot at the cursor."""
        app = self._app()
        app.post_message(SnapshotReady(self.replay.snapshot()))
        if self.replay.index.cut and not self._cut_told:  # found reading a pass, after the scan
            self._cut_told = True
            app.notify(self.replay.index.note() or "", severity="warning", timeout=10,
                       markup=False)
        self._show_output()
        self._tell_refused()
        self._tell_trip()
        if self._ahead is not None:
            self._ahead.stop()
        self._ahead = app.set_timer(AHEAD_AFTER, self._prepare)
        if self._settle_memory:
            if self._tidy is not None:
                self._tidy.stop()
            self._tidy = app.set_timer(TIDY_AFTER, self._collect)

    def _tell_refused(self) -> None:
        """A pass too big to read (``traces/limits.py``), reached: said once, in one line."""
        pos = self.replay.position
        if pos is None or pos.number in self._refused_told:
            return
        refused = self.replay.timeline(pos.number).refused
        if refused is not None:
            self._refused_told.add(pos.number)
            self._note(refused)
            self._app().notify(refused, severity="warning", timeout=10, markup=False)

    def _tell_trip(self) -> None:
        """A pass a ``--when`` spec tripped in, reached: where, and where its tensors are
        (``trace --tensors``), said once in the console (``traces/trips``)."""
        pos = self.replay.position
        trips = self.replay.index.trips
        if pos is None or pos.number in self._trips_told or pos.number not in trips:
            return
        self._trips_told.add(pos.number)
        for line in trip_words(trips[pos.number], self.replay.index.path):
            self._note(line)

    def trip_names(self, number: int) -> dict[str, Any]:
        """The console's ``trip_tensors`` in pass ``number``: its trip's file, or None."""
        trip = self.replay.index.trips.get(number)
        path = tensors_path(self.replay.index.path, trip.get("tensors"))[0] if trip else None
        return {"trip_tensors": path}

    def _collect(self) -> None:
        """The person has been reading a while: the collector's work now, not during a key."""
        self._tidy = None
        if self._scanning_done():  # settled: else the index's slices are still being built
            tidy()

    def _prepare(self) -> None:
        if not self._scanning_done() or self.replay.prepare():  # again, until nothing is left
            self._ahead = self._app().set_timer(AHEAD_AFTER, self._prepare)

    def _scanning_done(self) -> bool:
        return self.replay.index.done and self.replay.carries.done

    def _show_output(self) -> None:
        """The console holds what the script printed before the step shown (when the trace
        recorded it): written on as the cursor moves on, redrawn when it moves back."""
        index = self.replay.index
        count = index.outputs_before(self.replay.offset())
        if count == self._output_shown:
            return
        console = self._app().query_one(ConsolePanel)
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
            self._app().notify(why, timeout=2)

    def _post_soon(self) -> None:
        """Draw the cursor's place once the keys already waiting have moved it: a held ``]``
        or ``n`` moves the cursor at the key-repeat rate and draws only where it ends up, so
        nothing is left to catch up with when the key is let go."""
        if not self._post_waiting:
            self._post_waiting = True
            self._app().call_later(self._post_now)

    def _post_now(self) -> None:
        self._post_waiting = False
        self.post()

    # -- the keys ---------------------------------------------------------------------------

    def _move(self, delta: int) -> None:
        self._moved(self.replay.step(delta),
                    "end of the trace" if delta > 0 else "start of the trace")

    def step(self) -> bool:
        self._move(1)
        return False

    def back(self, whole_pass: bool) -> bool:
        if whole_pass:
            return self.other_pass(-1)
        self._move(-1)
        return True

    def other_pass(self, delta: int) -> bool:
        self._moved(self.replay.pass_(delta), "no next pass" if delta > 0 else "no previous pass")
        return True

    def _find(self, direction: int) -> None:
        app = self._app()
        ok = self.replay.find(app.breakpoints, direction, app.stop_at_pass_start)
        self._moved(ok, "no further stop in the trace" if direction > 0 else
                    "no earlier stop in the trace")

    def resume(self, command: str) -> bool:
        if command == "finish":
            self.other_pass(1)
        else:
            self._find(-1 if command == "continue_back" else 1)
        return False  # nothing runs: the cursor moved

    def jump(self, text: str) -> None:
        pos = self.replay.position
        target = parse_goto(text, pos.number if pos else None)
        if target is None:
            self._app().notify(f"not a pass or pass:step: {text!r}", severity="error", timeout=3)
            return
        self._moved(self.replay.jump(*target), f"no pass {target[0]} in this trace")

    def set_breakpoints(self, breakpoints: list[dict[str, Any]]) -> None:
        pass  # breakpoints live in the app: c and C read them

    def console(self) -> bool:
        return True

    def evaluate(self, req: int, source: str, snapshot: Snapshot,
                 selected: int | None) -> bool | None:
        """Run the line in a thread (ctrl+c interrupts it), over what the trace recorded."""
        app = self._app()
        if self.trace_console is None:
            self.trace_console = TraceConsole(self.trip_names)
        console = self.trace_console

        def run() -> None:
            text = console.evaluate(snapshot, selected, source)
            app.post_message(Evaluated({"req": req, "text": text}))

        app.run_worker(run, thread=True, exclusive=True, group="trace-console")
        return True

    def cancel(self) -> bool:
        if self.trace_console is None:
            return False
        self.trace_console.interrupt()
        return True

    def interrupt(self) -> bool:
        return False  # nothing runs: ctrl+c quits, as elsewhere in show

    def tensor(self, request: dict[str, Any]) -> bool:
        return False  # a trace holds summaries, not tensors

    def stdin(self) -> Any:
        return None

    def close(self, code: int | None) -> int | None:
        return 0

    def returncode(self) -> int | None:
        return None

    def history(self) -> tuple[PassView, ...]:
        return ()

    def dropped(self) -> tuple[int, int]:
        return 0, 0

    def run_history(self) -> HistoryTable:
        """Every pass of the trace in brief (its history lines, read as the index finds
        them); held in full: the passes the trace recorded node by node."""
        index = self.replay.index  # a slice a call: the view asks again twice a second
        self._brief.add_lines(index.brief_lines(self._brief.lines_read, BRIEF_SLICE))
        return self._brief.table(self.replay.numbers)

    def open_pass(self, number: int) -> bool:
        self.jump(str(number))
        return True

    def flow_earlier(self) -> Sequence[PassView]:
        """At a pass's start the flow chart shows the pass before it as it ended: its graph
        and its accumulate lines (only those: its nodes are not read), in a model of its own
        (the cursor's pass is left as it is)."""
        pos, numbers = self.replay.position, self.replay.numbers
        view = self._app().snapshot.pass_
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

    # -- the status line ----------------------------------------------------------------------

    def status_line(self, width: int = 0) -> Text:
        """Where the cursor is, why it stopped there, the keys (as many as fit in ``width``,
        "? help" always). Short of room, the pass's api goes first, then the line is cut at
        the right."""
        line = with_keys(self.place(api=True), HINTS, width)
        if width and line.cell_len > width - 1:  # cut: the version without the api cuts less
            line = with_keys(self.place(api=False), HINTS, width)
        return line

    def place(self, api: bool) -> Text:
        """Where the cursor is and why it stopped there (the status line before its keys)."""
        app = self._app()
        snap = app.snapshot
        text = Text()
        text.append(" replay ", style="bold reverse magenta")
        view = snap.pass_
        pos = self.replay.position
        if view is not None and pos is not None:
            total = self.replay.timeline(pos.number).count
            last = self.replay.numbers[-1] if self.replay.index.done else "…"
            text.append(f" pass {view.number}/{last} ", style="bold reverse")
            if view.edits:  # the trace records a gradient the person replaced in this pass
                text.append(EDITED_WORDS, style=EDITED_STYLE)
            if api:
                text.append(f" {view.api}", style="bold")
            if view.retain_graph:
                text.append(" retain_graph", style="yellow")
            if view.parent is not None:
                text.append(f" nested in pass {view.parent}", style="yellow")
            trip = self.replay.index.trips.get(view.number)
            if trip is not None:  # trace --when: written in full from the tripping node on
                text.append(f" trip {trip.get('trip')}", style="bold yellow")
            stop = snap.stop
            if stop is not None:
                text.append(f"  step {stop.step} of {total}  ")
                text.append(REASONS.get(stop.reason, stop.reason), style="bold yellow")
                if stop.detail:
                    text.append(f" ({stop.detail})", style="yellow")
                text.append(f" {'after' if stop.after else 'before'} {stop.name} #{stop.id}")
            elif self.replay.timeline(pos.number).refused is not None:
                text.append("  not read: too many nodes for its size", style="bold red")
            else:
                status = view.status or "did not finish"
                text.append(f"  end of pass: {status}",
                            style="green" if status == "ok" else "bold red")
        if self.against is not None:
            text.append(against_status(self.against, pos.number if pos else None,
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
