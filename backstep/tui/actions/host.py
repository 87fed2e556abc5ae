"""What the key mixins in ``tui/actions/`` use of the app they are mixed into, as a Protocol.

A mixin types its ``self`` as ``AppHost`` (under ``TYPE_CHECKING`` only) rather than importing
``BackstepApp``: the app imports its mixins, so a mixin importing the app back would be an
import circle. ``BackstepApp`` (``tui/live_app.py``) implements every member listed here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from textual.screen import Screen

from backstep.tui.runtime.link import Link
from backstep.tui.runtime.reader import Reader
from backstep.tui.state.review import Cursor
from backstep.tui.state.snapshot import PassView, Snapshot


class AppHost(Protocol):
    """The app's state and the Textual ``App`` methods the actions call."""

    snapshot: Snapshot  # the live session's latest snapshot
    selected: int | None
    review: Cursor | None
    searching: str | None
    waiting: bool
    gone: str | None
    reader: Reader
    breakpoints: list[dict[str, Any]]
    flow_exploding: float
    link: Link | None
    exit_code: int | None
    console_lines: list[str]
    _diagnosis_pinned: bool
    _diagnosis_new: bool
    _evaluating: dict[int, str]
    _next_req: int

    @property
    def shown(self) -> Snapshot: ...

    @property
    def screen(self) -> Screen[Any]: ...

    def query_one(self, selector: Any, expect_type: Any = None) -> Any: ...

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def push_screen(self, screen: Any, callback: Callable[[Any], Any] | None = None,
                    wait_for_dismiss: bool = False) -> Any: ...

    def call_from_thread(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

    def run_worker(self, work: Any, *args: Any, **kwargs: Any) -> Any: ...

    def exit(self, result: Any = None, return_code: int = 0, message: Any = None) -> None: ...

    def send(self, message: dict[str, Any]) -> bool: ...

    def _paused(self) -> bool: ...

    def _addressed(self, message: dict[str, Any]) -> dict[str, Any]: ...

    def _refresh_details(self) -> None: ...

    def _refresh_status(self) -> None: ...

    def _ended(self) -> tuple[PassView, ...]: ...

    def _review_to(self, cursor: Cursor | None) -> None: ...

    def action_search_step(self, step: int) -> None: ...

    def cancel_evaluation(self) -> bool: ...
