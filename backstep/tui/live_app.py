"""The live stepping UI: one screen of panels over the session's latest snapshot.

The app never blocks on the debuggee: commands go out through a ``Link`` (a socket in real use,
a recorder in tests) and everything comes back as messages from the reader thread. The app never
imports torch, so it starts fast and runs where torch is not installed.
"""

from __future__ import annotations

import sys
from typing import Any

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical

from backstep.tui.actions.breakpoints import BreakpointActions
from backstep.tui.actions.commands import Commands
from backstep.tui.actions.expression import ExpressionActions
from backstep.tui.actions.navigation import Navigation
from backstep.tui.messages import (
    ConsoleOutput,
    Disconnected,
    InputWanted,
    ServerError,
    SnapshotReady,
    TensorAnswer,
)
from backstep.tui.panels.console import ConsolePanel
from backstep.tui.panels.diagnosis import DiagnosisBanner
from backstep.tui.panels.flow import FlowScreen
from backstep.tui.panels.gradients import GradientsPanel
from backstep.tui.panels.graph import GraphPanel
from backstep.tui.panels.leaves import LeavesPanel
from backstep.tui.panels.modules import ModulePanel
from backstep.tui.panels.narration import Narration, NarrationPanel
from backstep.tui.panels.saved import SavedPanel
from backstep.tui.panels.search import SearchBar
from backstep.tui.panels.source import SourcePanel
from backstep.tui.panels.status import StatusLine
from backstep.tui.panels.tensorview import TensorView
from backstep.tui.runtime.link import Link
from backstep.tui.runtime.reader import Reader
from backstep.tui.runtime.terminal_watch import end_if_gone
from backstep.tui.state.flow_leaves import EXPLODING
from backstep.tui.state.focus import focus
from backstep.tui.state.review import Cursor, review_cursor
from backstep.tui.state.snapshot import Snapshot
from backstep.tui.text.shown import PlainText


class BackstepApp(PlainText, Commands, Navigation, BreakpointActions, ExpressionActions, App[int]):
    """``backstep run``'s full-screen UI."""

    CSS_PATH = "app.tcss"
    TITLE = "backstep"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-medium"), (140, "-wide"), (170, "-xwide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-normal"), (40, "-tall")]
    BINDINGS = [
        Binding("n", "step", "step"),
        Binding("p", "review", "step back"),
        Binding("left_square_bracket", "review_pass(-1)", "review: pass start", show=False),
        Binding("right_square_bracket", "review_pass(1)", "review: next pass", show=False),
        Binding("c", "resume('continue')", "continue"),
        Binding("f", "resume('finish')", "finish"),
        Binding("b", "toggle_break", "break"),
        Binding("B", "break_dialog", "conditions"),
        Binding("d", "diagnosis(1)", "next diagnosis"),
        Binding("D", "diagnosis(-1)", "previous diagnosis"),
        Binding("x", "dismiss_diagnosis", "dismiss diagnosis"),
        Binding("z", "zoom", "maximise"),
        Binding("slash", "search", "search"),
        Binding("F", "flow", "gradient flow"),
        Binding("m", "modules", "module view"),
        Binding("N", "search_step(-1)", "previous match", show=False),
        Binding("escape", "leave_search", "leave search", show=False),
        Binding("question_mark", "help", "help"),
        Binding("q", "quit_session", "quit"),
        Binding("i", "input", "stdin", show=False),
        Binding("colon", "expression", "console", show=False),
        Binding("exclamation_mark", "expression", "console", show=False),
        Binding("e", "edit", "edit gradient", show=False),
        Binding("ctrl+c", "interrupt", "interrupt", priority=True),
    ]

    def __init__(
        self,
        link: Link | None = None,
        *,
        breakpoints: list[dict[str, Any]] | tuple[dict[str, Any], ...] = (),
        stop_at_pass_start: bool = True,
        source: bool = True,
        narration: Narration | None = None,
        flow_exploding: float = EXPLODING,
    ) -> None:
        super().__init__()
        self.link = link
        self.breakpoints: list[dict[str, Any]] = [dict(bp) for bp in breakpoints]
        self.stop_at_pass_start = stop_at_pass_start
        self.source_enabled = source
        self.narration = narration
        self.flow_exploding = flow_exploding  # the gradient-flow chart's "exploding" line
        self.reader = Reader(self.post_message)
        self.snapshot = Snapshot()
        self.selected: int | None = None
        self.waiting = False  # a resume command went out and no stop came back yet
        self.gone: str | None = None
        self.exit_code: int | None = None
        self.console_lines: list[str] = []  # the console's lines as q left them
        self._next_req = 1
        self._evaluating: dict[int, str] = {}  # console lines sent and not answered, by req
        self._shown_stop: tuple[int, int, int | None] | None = None
        # the shown diagnosis's line stays in the Source panel until the person looks elsewhere
        self._diagnosis_pinned = False
        # a diagnosis came into view since the last key that resumed the script: a stop that
        # follows it (the engine diagnoses a node as it runs) must not take its selection away
        self._diagnosis_new = False
        self.review: Cursor | None = None  # p: the recorded node looked back at
        self.searching: str | None = None  # the query while n / N browse the matches

    @property
    def shown(self) -> Snapshot:
        """What the panels draw: the live snapshot, or an earlier step of it under review."""
        if self.review is not None:
            past = review_cursor(self.snapshot, self._ended(), self.review)
            if past is not None:
                return past
        return self.snapshot

    # -- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield DiagnosisBanner(id="diagnosis")
        with Horizontal(id="main"):
            yield GraphPanel(id="graph")
            yield ModulePanel(id="modules")
            with Vertical(id="middle"):
                yield GradientsPanel(id="gradients")
                yield SavedPanel(id="saved")
            with Vertical(id="right"):
                yield SourcePanel(self.source_enabled, id="source")
                yield LeavesPanel(id="leaves")
        with Horizontal(id="bottom", classes="-narrated" if self.narration else ""):
            yield ConsolePanel(id="console")
            if self.narration is not None:
                yield NarrationPanel(self.narration, id="narration")
        yield SearchBar(id="search")
        yield StatusLine(id="status")

    def on_mount(self) -> None:
        self.query_one("#console-traceback").display = False
        self.query_one(SearchBar).close()
        self.query_one(GraphPanel).focus()
        self._refresh_all()
        self.set_interval(0.1, self.reader.flush)
        stdin = sys.__stdin__
        if not self.is_headless and stdin is not None and stdin.isatty():
            fd = stdin.fileno()  # the terminal Textual reads: if it hangs up unseen, end as a hangup
            cleanup = self.link.close if self.link is not None else None
            self.set_interval(1.0, lambda: end_if_gone(fd, cleanup))
        if self.link is not None:
            self.link.open(self)
        self._mounted()

    def _mounted(self) -> None:
        """What a subclass starts once the panels are set up. Textual calls the ``on_mount`` of
        every class in the MRO, so a subclass adds to this rather than defining ``on_mount``
        (a second ``on_mount`` calling ``super()`` would set the panels up twice, and hide
        again what the subclass had shown)."""

    def start_message(self) -> dict[str, Any]:
        """The ``start`` command the link sends once the debuggee says hello."""
        return {"cmd": "start", "breakpoints": list(self.breakpoints),
                "stop_at_pass_start": self.stop_at_pass_start}

    # -- incoming -------------------------------------------------------------------------

    @on(SnapshotReady)
    def _snapshot(self, message: SnapshotReady) -> None:
        snap = message.snapshot
        if snap.seq <= self.snapshot.seq:
            return
        self.snapshot = snap
        self.review = None  # the live session moved on: back to it
        stop = snap.stop
        key = (stop.pass_, stop.step, stop.stop) if stop is not None else None
        new_stop = stop is not None and key != self._shown_stop
        if stop is not None and key != self._shown_stop:
            self._shown_stop = key
            self.waiting = False
            self.selected = stop.id
            self._diagnosis_pinned = False
            graph = self.query_one(GraphPanel)
            graph.show(snap)
            if not self.screen.has_class("-modules"):  # else m reveals it on the way back
                graph.reveal(stop.id)
        else:
            if snap.exit is not None:
                self.waiting = False
            self.query_one(GraphPanel).show(snap)
        if snap.exit is not None:
            self.query_one(ConsolePanel).hide_input()
        if snap.exit is not None and snap.exit.traceback:
            self.query_one(ConsolePanel).show_traceback(snap.exit.traceback)
        if self.narration is not None:
            self.query_one(NarrationPanel).show(snap)
        if self.screen.has_class("-modules"):
            modules = self.query_one(ModulePanel)
            modules.show(snap)
            if new_stop and stop is not None:
                modules.reveal(stop.id)
        if isinstance(self.screen, FlowScreen):  # the chart fills in as leaves accumulate
            self.screen.show(snap)
        if self.query_one(DiagnosisBanner).show(snap.diagnoses):
            self._diagnosis_new = True
            self._focus_diagnosis()
        elif new_stop and self._diagnosis_new:
            self._focus_diagnosis()
        self._refresh_details()
        if not self.waiting:  # stopped or ended: the console takes the rows its lines need
            self.query_one(ConsolePanel).release_height()

    @on(ConsoleOutput)
    def _console(self, message: ConsoleOutput) -> None:
        self.query_one(ConsolePanel).write(message.text)

    @on(InputWanted)
    def _input_wanted(self, message: InputWanted) -> None:
        if self.snapshot.exit is None and self.gone is None:
            self.query_one(ConsolePanel).offer_input()

    @on(ConsolePanel.Typed)
    def _typed(self, message: ConsolePanel.Typed) -> None:
        write = getattr(self.link, "write_stdin", None)
        if write is None or not write(message.text):
            self.notify("the script's stdin is closed", severity="warning", timeout=2)

    @on(ConsolePanel.Ended)
    def _stdin_ended(self, message: ConsolePanel.Ended) -> None:
        close = getattr(self.link, "close_stdin", None)
        if close is not None:
            close()
        if getattr(self.link, "stdin_reopens", False):  # attach(): EOF ends one read only
            self.query_one(ConsolePanel).stdin_closed = False

    @on(TensorAnswer)
    def _tensor(self, message: TensorAnswer) -> None:
        screen = self.screen
        if isinstance(screen, TensorView):
            screen.answer(message.event)

    @on(ServerError)
    def _server_error(self, message: ServerError) -> None:
        screen = self.screen
        if message.req is not None and isinstance(screen, TensorView) and \
                screen.pending == message.req:
            screen.error(message.message)
            return
        if self.evaluation_failed(message.req):
            self.query_one(ConsolePanel).answer(message.message)
            return
        self.query_one(ConsolePanel).note(message.message)
        self.notify(message.message, severity="error", timeout=4)

    @on(Disconnected)
    def _disconnected(self, message: Disconnected) -> None:
        self.waiting = False
        code = message.returncode
        if code is None and self.link is not None:
            code = self.link.returncode()
        unreported = self.snapshot.exit is None  # it ended without reporting: say how
        if unreported:
            if code is None:
                self.gone = "the debuggee closed the connection"
            elif code < 0:
                self.gone = f"the debuggee died (signal {-code})"
            else:
                self.gone = f"the debuggee ended without reporting (exit status {code})"
            # as a shell reports it: 128 + signal for a killed script
            self.exit_code = 1 if code is None else code if code >= 0 else 128 - code
        if not self.query(StatusLine):  # the app is closing (q): its widgets are gone already
            return
        if unreported and self.gone is not None:
            self.query_one(ConsolePanel).note(self.gone)
        self.query_one(ConsolePanel).hide_input()
        self.query_one(ConsolePanel).release_height()
        self._refresh_status()

    @on(GraphPanel.NodeChosen)
    def _chosen(self, message: GraphPanel.NodeChosen) -> None:
        self._select(message.node)

    def _select(self, node: int) -> None:
        if node != self.selected:
            self.selected = node
            self._diagnosis_pinned = False
            self._refresh_details()

    @on(GraphPanel.OpChosen)
    def _op_chosen(self, message: GraphPanel.OpChosen) -> None:
        """An op of a compiled region: its region's gradients, the op's own forward line."""
        self._select(message.node)
        self.query_one(SourcePanel).show_source(message.op.source, f"compiled op {message.op.op}")

    @on(GradientsPanel.Open)
    def _open_tensor(self, message: GradientsPanel.Open) -> None:
        def request(offset: int, limit: int) -> int | None:
            if self.snapshot.stop is None or self.waiting:
                return None
            req = self._next_req
            self._next_req += 1
            ok = self.send(self._addressed(
                {"cmd": "tensor", "req": req, "pass": message.pass_, "node": message.node,
                 "slot": message.slot, "index": message.index, "offset": offset,
                 "limit": limit}))
            return req if ok else None

        self.push_screen(TensorView(message.title, request))

    # -- drawing --------------------------------------------------------------------------

    def _refresh_all(self) -> None:
        self.query_one(GraphPanel).show(self.shown)
        self._refresh_details()

    def _refresh_details(self) -> None:
        f = focus(self.shown, self.selected)
        self.query_one(GradientsPanel).show(f)
        self.query_one(SavedPanel).show(f)
        diag = self._diagnosis_in_source()
        if diag is not None:
            self.query_one(SourcePanel).show_source(diag.source, "diagnosis")
        else:
            self.query_one(SourcePanel).show(f)
        self.query_one(LeavesPanel).show(self.shown)
        self._refresh_status()

    def _refresh_status(self) -> None:
        self.query_one(StatusLine).show(self.shown, waiting=self.waiting, gone=self.gone,
                                        breakpoints=len(self.breakpoints),
                                        review=self.review_note() or self.review is not None,
                                        ended=self.snapshot.exit is not None)

    @on(SearchBar.Go)
    def _search_go(self, message: SearchBar.Go) -> None:
        self.searching = message.query if message.query.strip() else None
        if self.searching is None:
            self.action_leave_search()
            return
        if self._search_move(1):  # the keys go back to the graph: n / N browse
            modules = self.screen.has_class("-modules")
            self.query_one(ModulePanel if modules else GraphPanel).focus()
