"""The keys that only change what is shown: diagnoses, stepping back (review), search, the
module view, the flow chart, zoom and help. Nothing here reaches the script.

A mixin of ``BackstepApp`` (bindings, CSS and message handlers stay on the app), typed by
``actions/host.py``'s ``AppHost``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from backstep.tui.panels.diagnosis import DiagnosisBanner
from backstep.tui.panels.flow import FlowScreen
from backstep.tui.panels.graph import GraphPanel
from backstep.tui.panels.help import HelpScreen
from backstep.tui.panels.modules import ModulePanel
from backstep.tui.panels.search import SearchBar, matches, pick
from backstep.tui.state import review
from backstep.tui.state.records import Diagnosis
from backstep.tui.state.snapshot import PassView

if TYPE_CHECKING:  # the mixin's self is the app, as the AppHost protocol describes it
    from backstep.tui.actions.host import AppHost as _App
else:
    _App = object


class Navigation(_App):
    """Actions that move the selection or the view."""

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

    def action_review(self) -> None:
        """p: the node before, as it was shown then, into earlier passes too (from what was
        recorded; nothing re-runs)."""
        self._review_back(whole_pass=False)

    def action_review_pass(self, delta: int) -> None:
        """[ / ]: the start of this or the previous pass / of the next pass (or the live stop),
        under review."""
        if delta < 0:
            self._review_back(whole_pass=True)
        elif self.review is not None:
            self._review_to(review.forward(self.snapshot, self._ended(), self.review, True))
        else:
            self.notify("at the live stop: p or [ looks back", timeout=2)

    def _review_back(self, whole_pass: bool) -> None:
        cursor = review.back(self.snapshot, self._ended(), self.review, whole_pass)
        if cursor is None:
            dropped = self.reader.model.dropped
            self.notify(f"the earliest recorded node: {dropped} older pass(es) were dropped "
                        f"(review keeps {self.reader.model.review_cap:,} events)" if dropped
                        else "the earliest recorded node of this session", timeout=3)
            return
        self._review_to(cursor)

    def _ended(self) -> tuple[PassView, ...]:
        """The ended passes the reader's model keeps for review."""
        return self.reader.model.ended

    def _flow_earlier(self) -> Sequence[PassView]:
        """The ended passes the flow chart may show at a pass's start."""
        return self._ended()

    def review_note(self) -> str | None:
        """For the status line: the review is at the oldest kept pass and older ones were
        dropped at the cap."""
        dropped = self.reader.model.dropped
        if self.review is None or not dropped:
            return None
        views = review.reviewable(self.snapshot, self._ended())
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
        found = matches(view.graph, self.searching or "") if view is not None else []
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
            self.searching = None
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
            self.push_screen(FlowScreen(self.shown, self.flow_exploding, self._flow_earlier))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())
