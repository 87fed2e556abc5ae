"""Fixtures every test module shares."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from backstep.tui.state.model import SessionModel


@pytest.fixture(autouse=True)
def strict_model() -> Iterator[None]:
    """An error in a state handler raises in tests (outside them, the event is ignored): a
    bug there must not pass for a malformed event. A test of hostile input that the checks
    let through asks for ``lenient_model``."""
    SessionModel.strict = True
    try:
        yield
    finally:
        SessionModel.strict = False


@pytest.fixture
def lenient_model() -> None:
    """As in real use: an event a handler cannot read is ignored and counted."""
    SessionModel.strict = False


@pytest.fixture(scope="module")
def served() -> Iterator[object]:
    """A served UI (``show`` of the small fixture trace) for a module's tests of its server."""
    from backstep.process.served import ServedUI, ui_command

    ui = ServedUI(ui_command(["show", str(Path(__file__).parent / "fixtures" / "small_trace.jsonl")]))
    ui.start()
    try:
        yield ui
    finally:
        ui.stop()

