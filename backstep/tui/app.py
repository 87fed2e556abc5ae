"""The stepping UI: one screen of panels over a session's latest snapshot, one app over a driver.

The app never blocks on the session and never asks which session it has: the keys that move it
call a ``Driver`` (a live script: ``runtime/live_driver.py``; a recorded trace, in ``show``:
``runtime/replay_driver.py``), and everything comes back as messages (``messages.py``). The
keys that only change the view are the app's own. Every key is one ``Binding`` below, its help
text in its tooltip: the help screen is made from them (``panels/help.py``), and a test holds
the README's key table to them. The app never imports torch, so it starts fast and runs where
torch is not installed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical

from backstep.tui.messages import (
    ConsoleOutput,
    Disconnected,
    Evaluated,
    InputWanted,
    ServerError,
    SnapshotReady,
    TensorAnswer,
)
from backstep.tui.panels.breakpoint_dialog import BreakpointDialog, describe
from backstep.tui.panels.console import ConsolePanel
from backstep.tui.panels.diagnosis import DiagnosisBanner
from backstep.tui.panels.expression_line import READ_ONLY_PLACEHOLDER, ExpressionLine
from backstep.tui.panels.flow import FlowScreen
from backstep.tui.panels.goto import GotoDialog
from backstep.tui.panels.gradients import GradientsPanel
from backstep.tui.panels.graph import GraphPanel
from backstep.tui.panels.help import HelpScreen, help_rows
from backstep.tui.panels.history import HistoryScreen
from backstep.tui.panels.leaves import LeavesPanel
from backstep.tui.panels.memory import MemoryScreen
from backstep.tui.panels.modules import ModulePanel
from backstep.tui.panels.narration import Narration, NarrationPanel
from backstep.tui.panels.saved import SavedPanel
from backstep.tui.panels.search import SearchBar, matches, pick
from backstep.tui.panels.source import SourcePanel
from backstep.tui.panels.status import StatusLine
from backstep.tui.panels.tensorview import TensorView
from backstep.tui.state import review
from backstep.tui.state.flow_leaves import EXPLODING
from backstep.tui.state.focus import focus
from backstep.tui.state.records import Diagnosis
from backstep.tui.state.run_history import HistoryTable
from backstep.tui.state.snapshot import PassView, Snapshot
from backstep.tui.text.shown import PlainText

EDIT_TEMPLATE = "zero_nonfinite()"


class Driver(Protocol):
    """A session the app drives: a live script or a recorded trace. It posts what it has to
    show (``SnapshotReady``, ``Evaluated``, ...) to the app it was started with."""

    title: str | None  # the app's title, or None for the default
    # what the help screen says a key does in this session, by the binding's action, where it
    # is not the binding's own tooltip (a live session's); "" leaves the key out
    key_help: Mapping[str, str]
    help_title: str
    cannot_edit: str | None  # why ``e`` (a gradient edit) cannot be offered here, or None
    status: Callable[[int], Text] | None  # its own status line (width in, line out), or None

    def offers(self, action: str) -> bool:
        """Whether this session has the key bound to ``action`` (one it lacks is unbound)."""

    def attach(self, app: BackstepApp) -> None:
        """The app this driver drives, and posts to (from the app's ``__init__``)."""

    def start(self) -> None:
        """The panels are mounted: begin (start the debuggee, post the first snapshot)."""

    def step(self) -> bool:
        """``n``: run the paused node / move one node on; True as for ``resume``."""

    def back(self, whole_pass: bool) -> bool:
        """``p`` / ``[``: a node back / to the start of this or the previous pass. False: the
        session cannot run back, and the app reviews what it recorded instead."""

    def other_pass(self, delta: int) -> bool:
        """``]``: the next pass. False as for ``back``."""

    def resume(self, command: str) -> bool:
        """``c``, ``f``, ``C`` (``continue``, ``finish``, ``continue_back``): True when the
        session now runs until its next stop (the app waits for it)."""

    def jump(self, text: str) -> None:
        """``g``: to a pass (``3``), a step of it (``3:12``) or of this pass (``:12``)."""

    def set_breakpoints(self, breakpoints: list[dict[str, Any]]) -> None: ...

    def console(self) -> bool:
        """Whether a console line can be typed now (``:``, ``!``); else the person was told."""

    def evaluate(self, req: int, source: str, snapshot: Snapshot,
                 selected: int | None) -> bool | None:
        """A console line at the shown stop, answered by an ``Evaluated`` message with ``req``.
        False: nobody is there to answer; None: not now (the person was told why)."""

    def cancel(self) -> bool:
        """ctrl+c while a console line runs: interrupt it (True), or nothing to do (False)."""

    def interrupt(self) -> bool:
        """ctrl+c otherwise: stop the script at its next node (True); False: ctrl+c leaves."""

    def tensor(self, request: dict[str, Any]) -> bool:
        """Ask for a gradient's values (a ``tensor`` command); False: nobody can answer."""

    def stdin(self) -> Any:
        """The script's stdin (``write_stdin``, ``close_stdin``, ``stdin_reopens``), or None."""

    def close(self, code: int | None) -> int | None:
        """``q``: end the session; the exit code to leave with (``code``: the script's, where
        it reported one)."""

    def returncode(self) -> int | None:
        """How the script's process ended, once it has."""

    def history(self) -> tuple[PassView, ...]:
        """The ended passes kept for review (``p``, ``[``) and the flow chart."""

    def dropped(self) -> tuple[int, int]:
        """Passes dropped from the history at its cap, and the cap (events kept)."""

    def flow_earlier(self) -> Sequence[PassView]:
        """The ended passes the flow chart may show at a pass's start."""

    def run_history(self) -> HistoryTable:
        """Every pass so far in brief, and those held in full (the history view, ``H``)."""

    def open_pass(self, number: int) -> bool:
        """``enter`` in the history view: go to pass ``number``. False: the session cannot,
        and the app reviews what it recorded of it instead."""


# the help screen's words for a key (its binding's tooltip; a second line goes under it);
# keys with the same words share a row
REVIEW_PASS = """review: the start of this or the previous pass / of the next pass
several passes at once (threads, GPUs): n, c and f act on
the shown pass; the others stay paused where they are, and
the one that has waited longest is shown next ("2 passes
waiting"), so n takes turns between paused passes"""
DIAGNOSES = "next / previous diagnosis: selects its node, shows its line in Source"
CONSOLE = """at a stop: a line of Python, run in the script over the paused node:
grad_outputs, grad_inputs, saved, node, leaves, _, the caller's names;
up / down recall, ctrl+c interrupts, escape goes back"""


class BackstepApp(PlainText):
    """backstep's full-screen UI (``run``, ``attach()``, ``connect``, ``show``)."""

    CSS_PATH = "app.tcss"
    TITLE = "backstep"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-medium"), (140, "-wide"), (170, "-xwide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-normal"), (40, "-tall")]
    # in the help screen's order
    BINDINGS = [
        Binding("n", "step", "step",
                tooltip="step: run the paused node, stop before the next one"),
        Binding("c", "resume('continue')", "continue",
                tooltip="continue to the next breakpoint or the next pass start"),
        Binding("C", "continue_back", "continue back", show=False),
        Binding("f", "resume('finish')", "finish",
                tooltip="finish the current pass without stopping"),
        Binding("p", "back", "step back", tooltip="step back: review earlier nodes as they "
                "were, back across passes (n returns)"),
        Binding("left_square_bracket", "review_pass(-1)", "review: pass start", show=False,
                tooltip=REVIEW_PASS),
        Binding("right_square_bracket", "review_pass(1)", "review: next pass", show=False,
                tooltip=REVIEW_PASS),
        Binding("g", "goto", "go to", show=False,
                tooltip="go to a pass (3), a step of it (3:12), or a step of this pass (:12)"),
        Binding("b", "toggle_break", "break",
                tooltip="toggle a breakpoint on the selected node's type"),
        Binding("B", "break_dialog", "conditions", tooltip="breakpoint conditions: node glob, "
                "module glob, leaf, non-finite, norm above"),
        Binding("z", "zoom", "maximise",
                tooltip="maximise the focused panel; z again restores the layout"),
        Binding("slash", "search", "search", tooltip="search: part of a "
                "node name, module path or leaf name; enter selects the next match"),
        Binding("N", "search_step(-1)", "previous match", show=False, key_display="n / N",
                tooltip="while a search is up: next / previous match (n steps again once "
                "escape leaves it)"),
        Binding("escape", "leave_search", "leave search", show=False,
                tooltip="leave the search (or restore a maximised panel)"),
        Binding("m", "modules", "module view", tooltip="module view: nodes folded by module "
                "path, with done/pending, largest norm, ✗ NaN\nright / left unfold and fold a "
                "module; m again shows the graph"),
        Binding("M", "memory", "memory", show=False,
                tooltip="memory: the saved activations the pass in view holds, by module "
                "(b: op, line), largest first, draining as it runs\nenter on a row: select "
                "the nodes that save its storages (n / N: the next, escape leaves)"),
        Binding("F", "flow", "gradient flow", tooltip="gradient flow: each leaf's ‖grad‖ and "
                "max |grad| in model order, log scale\nin the chart, left / right: a leaf's "
                "full name and numbers"),
        Binding("H", "run_history", "history", show=False, tooltip="history: every pass "
                "in brief, the loss and ‖grad‖ by pass, log scale\nvanishing, exploding and "
                "NaN/Inf marked; up / down: a module or a leaf\nleft / right: a pass's "
                "numbers; enter opens a pass held in full"),
        Binding("ctrl+c", "interrupt", "interrupt", priority=True,
                tooltip="interrupt: stop at the next node while the script runs"),
        Binding("i", "input", "stdin", show=False, tooltip="type a line for the script's stdin "
                "(offered by itself when the script waits on it)"),
        Binding("colon", "expression", "console", show=False, tooltip=CONSOLE),
        Binding("exclamation_mark", "expression", "console", show=False, tooltip=CONSOLE),
        Binding("e", "edit", "edit gradient", show=False, tooltip="at a stop: edit the "
                "gradient for the rest of the pass: zero_nonfinite(),\nclip(n), scale(k), "
                "set_grad(i, t); the pass is marked \"edited by you\""),
        Binding("d", "diagnosis(1)", "next diagnosis", tooltip=DIAGNOSES),
        Binding("D", "diagnosis(-1)", "previous diagnosis", tooltip=DIAGNOSES),
        Binding("x", "dismiss_diagnosis", "dismiss diagnosis",
                tooltip="dismiss the diagnosis banner (d brings it back)"),
        Binding("question_mark", "help", "help", tooltip="this help"),
        Binding("q", "quit_session", "quit", tooltip="quit: once the script has ended, leave "
                "with its exit code; while it runs, end it and leave with exit code 143 (SIGTERM, "
                "as a shell reports it; every paused thread is released)"),
    ]

    def __init__(
        self,
        driver: Driver,
        *,
        breakpoints: list[dict[str, Any]] | tuple[dict[str, Any], ...] = (),
        stop_at_pass_start: bool = True,
        source: bool = True,
        narration: Narration | None = None,
        flow_exploding: float = EXPLODING,
    ) -> None:
        super().__init__()
        self.driver = driver
        driver.attach(self)
        if driver.title is not None:
            self.title = driver.title
        self.breakpoints: list[dict[str, Any]] = [dict(bp) for bp in breakpoints]
        self.stop_at_pass_start = stop_at_pass_start
        self.source_enabled = source
        self.narration = narration
        self.flow_exploding = flow_exploding  # the gradient-flow chart's "exploding" line
        self.snapshot = Snapshot()
        self.selected: int | None = None
        self.waiting = False  # a resume command went out and no stop came back yet
        self.gone: str | None = None
        self.exit_code: int | None = None
        self.console_lines: list[str] = []  # the console's lines as q left them
        self._next_req = 1
        self.evaluating: dict[int, str] = {}  # console lines asked and not answered, by req
        self._shown_stop: tuple[int, int, int | None] | None = None
        # the shown diagnosis's line stays in the Source panel until the person looks elsewhere
        self._diagnosis_pinned = False
        # a diagnosis came into view since the last key that resumed the script: a stop that
        # follows it (the engine diagnoses a node as it runs) must not take its selection away
        self._diagnosis_new = False
        self.review: review.Cursor | None = None  # p: the recorded node looked back at
        self.searching: str | None = None  # the query while n / N browse the matches
        # the nodes a memory row chose (M, enter): n / N browse them as a search's matches
        self.picked: tuple[int, ...] | None = None
        self._told: tuple[str, float] = ("", 0.0)  # ``paused``'s last notice and until when

    @property
    def shown(self) -> Snapshot:
        """What the panels draw: the live snapshot, or an earlier step of it under review."""
        if self.review is not None:
            past = review.review_cursor(self.snapshot, self.driver.history(), self.review)
            if past is not None:
                return past
        return self.snapshot

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A key the driver's session lacks (``g`` and ``C`` live) is not bound there."""
        return self.driver.offers(action)

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
        if self.driver.cannot_edit is not None:  # never advertise edits it cannot apply
            self.query_one(ConsolePanel).expression_line.placeholder = READ_ONLY_PLACEHOLDER
        self.query_one(SearchBar).close()
        self.query_one(GraphPanel).focus()
        self._refresh_all()
        self.driver.start()

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
        if isinstance(self.screen, MemoryScreen):  # the table drains as the pass runs
            self.screen.show(snap)
        if self.query_one(DiagnosisBanner).show(snap.diagnoses, snap.passes):
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
        write = getattr(self.driver.stdin(), "write_stdin", None)
        if write is None or not write(message.text):
            self.notify("the script's stdin is closed", severity="warning", timeout=2)

    @on(ConsolePanel.Ended)
    def _stdin_ended(self, message: ConsolePanel.Ended) -> None:
        close = getattr(self.driver.stdin(), "close_stdin", None)
        if close is not None:
            close()
        if getattr(self.driver.stdin(), "stdin_reopens", False):  # attach(): EOF ends one read only
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
        if code is None:
            code = self.driver.returncode()
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
        self.refresh_status()

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
            ok = self.driver.tensor(
                {"cmd": "tensor", "req": req, "pass": message.pass_, "node": message.node,
                 "slot": message.slot, "index": message.index, "offset": offset,
                 "limit": limit})
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
        self.refresh_status()

    def refresh_status(self) -> None:
        """Redraw the status line: the driver's own, or the session's place and keys."""
        if self.driver.status is not None:
            self.query_one(StatusLine).show_line(self.driver.status)
            return
        self.query_one(StatusLine).show(self.shown, waiting=self.waiting, gone=self.gone,
                                        breakpoints=len(self.breakpoints),
                                        review=self.review_note() or self.review is not None,
                                        ended=self.snapshot.exit is not None)

    @on(SearchBar.Go)
    def _search_go(self, message: SearchBar.Go) -> None:
        self.searching = message.query if message.query.strip() else None
        self.picked = None  # a typed search replaces a memory row's nodes
        if self.searching is None:
            self.action_leave_search()
            return
        if self._search_move(1):  # the keys go back to the graph: n / N browse
            modules = self.screen.has_class("-modules")
            self.query_one(ModulePanel if modules else GraphPanel).focus()

    # -- the keys that move the session: the driver's -----------------------------------

    def paused(self) -> bool:
        """The session is stopped and can take a command; else the person is told why not."""
        if self.snapshot.stop is not None and not self.waiting and self.gone is None:
            return True
        text = ("the script has exited; q quits" if self.snapshot.exit is not None
                else "not paused: ctrl+c stops at the next node")
        now = time.monotonic()
        if self._told[0] != text or now >= self._told[1]:  # once while it shows: n pressed
            # again and again as the script runs stacked a notice a press (15 of 24 rows)
            self._told = (text, now + 2)
            self.notify(text, timeout=2)
        return False

    def _resumed(self) -> None:
        """The session resumed: it runs until its next stop (or the end)."""
        self.review = None
        self.waiting = True
        self._diagnosis_new = False
        self.query_one(ConsolePanel).hold_height()  # until the next stop (or the end)
        self.refresh_status()

    def action_step(self) -> None:
        if self.searching is not None:  # n browses the matches while a search is up
            self.action_search_step(1)
            return
        if self.review is not None:  # reviewing: n walks forward to the live stop
            self._review_to(review.forward(self.snapshot, self.driver.history(), self.review))
            return
        if self.driver.step():
            self._resumed()

    def action_resume(self, command: str) -> None:
        if self.driver.resume(command):
            self._resumed()

    def action_continue_back(self) -> None:
        self.driver.resume("continue_back")

    def action_back(self) -> None:
        """p: the node before; a live session reviews it, as it was shown then, into earlier
        passes too (from what was recorded; nothing re-runs)."""
        if not self.driver.back(whole_pass=False):
            self._review_back(whole_pass=False)

    def action_review_pass(self, delta: int) -> None:
        """[ / ]: the start of this or the previous pass / of the next pass (or, under review,
        the live stop)."""
        if delta < 0:
            if not self.driver.back(whole_pass=True):
                self._review_back(whole_pass=True)
        elif self.driver.other_pass(delta):
            pass
        elif self.review is not None:
            self._review_to(review.forward(self.snapshot, self.driver.history(), self.review,
                                           True))
        elif self.snapshot.exit is not None:  # nothing comes after the last pass held
            view, ran = self.snapshot.pass_, self.snapshot.exit.passes
            held = f"pass {view.number} is the last pass held" if view is not None else \
                "no pass is held"
            self.notify(held + (f"; {ran:,} pass{'es' if ran != 1 else ''} ran" if ran else "")
                        + ": [ looks back", timeout=3)
        else:
            self.notify("at the live stop: p or [ looks back", timeout=2)

    def action_goto(self) -> None:
        def done(text: str | None) -> None:
            if text is not None:
                self.driver.jump(text)

        self.push_screen(GotoDialog(), done)

    def action_interrupt(self) -> None:
        if self.cancel_evaluation():
            return
        if not self.driver.interrupt():
            self.exit(0)

    def action_quit_session(self) -> None:
        """q: the script's exit code once it has ended, else it is ended here. The console's
        lines stay for ``backstep run`` to print."""
        code = self.snapshot.exit.code if self.snapshot.exit is not None else self.exit_code
        code = self.driver.close(code)
        self.console_lines = list(self.query_one(ConsolePanel).log_view.lines)
        self.exit(code if code is not None else 0)

    def action_input(self) -> None:
        """Open the console's input line by hand (for reads the debuggee cannot see)."""
        if getattr(self.driver.stdin(), "write_stdin", None) is None or \
                not self.query_one(ConsolePanel).offer_input():
            self.notify("the script's stdin is closed", timeout=2)

    # -- breakpoints (b, B) ---------------------------------------------------------------

    def action_toggle_break(self) -> None:
        f = focus(self.snapshot, self.selected)
        if f.info is None:
            self.notify("select a node first", timeout=2)
            return
        bp = {"kind": "node", "pattern": f.info.name}
        if bp in self.breakpoints:
            self.breakpoints.remove(bp)
            self.notify(f"breakpoint removed: {describe(bp)}", timeout=2)
        else:
            self.breakpoints.append(bp)
            self.notify(f"breakpoint set: {describe(bp)}", timeout=2)
        self._send_breakpoints()

    def action_break_dialog(self) -> None:
        def done(result: list[dict[str, Any]] | None) -> None:
            if result is not None and result != self.breakpoints:
                self.breakpoints = result
                self._send_breakpoints()

        self.push_screen(BreakpointDialog(self.breakpoints), done)

    def _send_breakpoints(self) -> None:
        self.driver.set_breakpoints(self.breakpoints)
        self.refresh_status()

    # -- the console (:, !, e) ------------------------------------------------------------

    def action_expression(self, text: str = "") -> None:
        """``:`` / ``!``: a line of Python for the paused node."""
        if self.driver.console():
            self.query_one(ConsolePanel).expression_line.open(text)

    def action_edit(self) -> None:
        """``e``: the input line with an edit of the node's gradient, to change or send."""
        if self.driver.cannot_edit is not None:
            self.notify(self.driver.cannot_edit, timeout=3)
            return
        self.action_expression(EDIT_TEMPLATE)
        if self.snapshot.stop is not None:
            self.notify("enter applies the edit for the rest of this pass (edits: "
                        "zero_nonfinite(), clip(max_norm), scale(k), set_grad(i, value))",
                        timeout=4)

    @on(ExpressionLine.Asked)
    def _asked(self, message: ExpressionLine.Asked) -> None:
        console = self.query_one(ConsolePanel)
        console.asked(message.source)
        req = self._next_req
        sent = self.driver.evaluate(req, message.source, self.shown, self.selected)
        if sent is None:
            return
        self._next_req += 1
        if sent:
            self.evaluating[req] = message.source
        else:
            console.note("the debuggee is gone: nothing was evaluated")

    @on(Evaluated)
    def _evaluated(self, message: Evaluated) -> None:
        event: dict[str, Any] = message.event
        req = event.get("req")
        if isinstance(req, int):
            self.evaluating.pop(req, None)
        text = event.get("text")
        self.query_one(ConsolePanel).answer(text if isinstance(text, str) else "")

    def cancel_evaluation(self) -> bool:
        """ctrl+c: interrupt a line being evaluated (True), or clear the input line while it
        has the keyboard (True); False when ctrl+c means what it means elsewhere."""
        if self.evaluating and self.driver.cancel():
            return True
        return self.query_one(ConsolePanel).expression_line.clear_if_focused()

    def evaluation_failed(self, req: int | None) -> bool:
        """An ``error`` reply to a console line (the stop resumed meanwhile): said in the
        console, as an answer would be. False when ``req`` is not a console line's."""
        return req is not None and self.evaluating.pop(req, None) is not None

    # -- the keys that only change the view ------------------------------------------------

    def _node_shown(self, node: int | None) -> bool:
        view = self.shown.pass_  # under review: the pass looked back at
        return node is not None and view is not None and node in view.graph.nodes

    def _focus_diagnosis(self) -> None:
        """Select the shown diagnosis's node in the graph; its line goes to the Source panel."""
        diag = self.query_one(DiagnosisBanner).current
        if diag is None:
            return
        self._diagnosis_pinned = True
        if diag.node is not None and self._node_shown(diag.node):
            self.selected = diag.node
            self.query_one(GraphPanel).reveal(diag.node)

    def _diagnosis_in_source(self) -> Diagnosis | None:
        """The shown diagnosis, when the Source panel should show its line rather than the
        selected node's: its node is the selected one, or it has no node in this graph and the
        person has not moved since it came into view."""
        diag = self.query_one(DiagnosisBanner).current
        if diag is None or diag.source is None:
            return None
        if self._node_shown(diag.node):
            return diag if diag.node == self.selected else None
        return diag if self._diagnosis_pinned else None

    def action_diagnosis(self, delta: int) -> None:
        if self.query_one(DiagnosisBanner).step(delta) is None:
            self.notify("no diagnoses so far", timeout=2)
            return
        self._focus_diagnosis()
        self._refresh_details()

    def action_dismiss_diagnosis(self) -> None:
        if self.query_one(DiagnosisBanner).dismiss():
            self._diagnosis_pinned = False
            self._refresh_details()

    def _review_back(self, whole_pass: bool) -> None:
        cursor = review.back(self.snapshot, self.driver.history(), self.review, whole_pass)
        if cursor is None:
            dropped, cap = self.driver.dropped()
            self.notify(f"the earliest recorded node: {dropped} older pass(es) were dropped "
                        f"(review keeps {cap:,} events)" if dropped
                        else "the earliest recorded node of this session", timeout=3)
            return
        self._review_to(cursor)

    def review_note(self) -> str | None:
        """For the status line: the review is at the oldest kept pass and older ones were
        dropped at the cap."""
        dropped, _cap = self.driver.dropped()
        if self.review is None or not dropped:
            return None
        views = review.reviewable(self.snapshot, self.driver.history())
        if views and views[0].number == self.review.number:
            return f"oldest kept pass: {dropped} earlier dropped"
        return None

    def _review_to(self, cursor: review.Cursor | None) -> None:
        self.review = cursor
        shown = self.shown
        if shown.stop is not None:
            self.selected = shown.stop.id
        graph = self.query_one(GraphPanel)
        graph.show(shown)
        if self.selected is not None:
            graph.reveal(self.selected)
        if self.screen.has_class("-modules"):  # the module view follows it too
            modules = self.query_one(ModulePanel)
            modules.show(shown)
            if self.selected is not None:
                modules.reveal(self.selected)
        if isinstance(self.screen, FlowScreen):  # the chart follows the pass in view
            self.screen.show(shown)
        if isinstance(self.screen, MemoryScreen):  # so does the memory table
            self.screen.show(shown)
        self._refresh_details()

    def action_zoom(self) -> None:
        """Maximise the focused panel (Textual's own maximise), or restore the layout."""
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
        elif screen.focused is None or not screen.maximize(screen.focused):
            self.notify("focus a panel first (tab)", timeout=2)

    def action_search(self) -> None:
        self.query_one(SearchBar).open()

    def action_search_step(self, step: int) -> None:
        if self.searching is None:
            self.notify("N: previous match, once a search is up (/)", timeout=2)
            return
        self._search_move(step)

    def _search_move(self, step: int) -> bool:
        view = self.shown.pass_  # under review: search the pass in view, not the live one
        bar = self.query_one(SearchBar)
        if view is None:
            found = []
        elif self.picked is not None:  # a memory row's nodes, those the pass in view has
            found = [i for i in self.picked if i in view.graph.nodes]
        else:
            found = matches(view.graph, self.searching or "")
        chosen = pick(found, self.selected, step)
        bar.tell(found, chosen)
        if chosen is None:
            return False
        self.selected = chosen
        self._diagnosis_pinned = False
        self.query_one(GraphPanel).reveal(chosen)
        if self.screen.has_class("-modules"):
            self.query_one(ModulePanel).reveal(chosen)
        self._refresh_details()
        return True

    def action_leave_search(self) -> None:
        bar = self.query_one(SearchBar)
        if bar.display or self.searching is not None:
            self.searching = self.picked = None
            bar.close()
            self.query_one(GraphPanel).focus()

    def action_modules(self) -> None:
        """Toggle the graph panel and the module view (the same slot)."""
        on = not self.screen.has_class("-modules")
        self.screen.set_class(on, "-modules")
        if on:
            modules = self.query_one(ModulePanel)
            modules.show(self.shown)
            if self.selected is not None:
                modules.reveal(self.selected)
            modules.focus()
        else:
            graph = self.query_one(GraphPanel)
            if self.selected is not None:
                graph.reveal(self.selected)
            graph.focus()

    def action_flow(self) -> None:
        if not isinstance(self.screen, FlowScreen):
            self.push_screen(FlowScreen(self.shown, self.flow_exploding,
                                        self.driver.flow_earlier))

    def action_memory(self) -> None:
        if not isinstance(self.screen, MemoryScreen):
            self.push_screen(MemoryScreen(self.shown), self._memory_chosen)

    def _memory_chosen(self, chosen: tuple[str, tuple[int, ...]] | None) -> None:
        """A memory row chosen: select the first of the nodes that save its storages; n / N
        go through the rest, as through a search's matches (escape leaves)."""
        if not chosen:
            return
        key, nodes = chosen
        self.searching, self.picked = key, nodes
        self.selected = None  # so the first of them is chosen, not the one after
        self.query_one(SearchBar).browse(key)
        if self._search_move(1):
            modules = self.screen.has_class("-modules")
            self.query_one(ModulePanel if modules else GraphPanel).focus()

    def action_run_history(self) -> None:
        if not isinstance(self.screen, HistoryScreen):
            self.push_screen(HistoryScreen(self.driver.run_history, self.flow_exploding),
                             self.open_pass)

    def open_pass(self, number: int | None) -> None:
        """The history view's ``enter``: the pass, in show; live, reviewed from its start
        (the live stop, for the pass shown)."""
        if number is None or self.driver.open_pass(number):
            return
        shown = self.snapshot.pass_
        if shown is not None and shown.number == number:
            self._review_to(None)
            return
        views = review.reviewable(self.snapshot, self.driver.history())
        if any(v.number == number and v.executed() for v in views):
            self._review_to(review.Cursor(number, 0))
        else:
            self.notify(f"pass {number} is no longer held (review keeps "
                        f"{self.driver.dropped()[1]:,} events)", timeout=3)

    def action_help(self) -> None:
        rows = help_rows(self.BINDINGS, self.driver.key_help, self.driver.offers)
        self.push_screen(HelpScreen(rows, self.driver.help_title))
