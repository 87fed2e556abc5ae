"""An error in a state handler surfaces in tests; in real use the event is ignored and counted."""

from __future__ import annotations

import pytest

from backstep.tui.state.model import SessionModel


def broken(self: SessionModel, event: object) -> None:
    raise KeyError("a bug in a handler")


def test_a_handler_error_raises_under_the_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SessionModel, "_on_exit", broken)
    model = SessionModel()
    with pytest.raises(KeyError, match="a bug in a handler"):
        model.apply({"event": "exit", "code": 0})


def test_in_real_use_the_event_is_ignored_and_counted(monkeypatch: pytest.MonkeyPatch,
                                                      lenient_model: None) -> None:
    monkeypatch.setattr(SessionModel, "_on_exit", broken)
    model = SessionModel()
    before = model.snapshot()
    assert model.apply({"event": "exit", "code": 0}) is False
    assert model.ignored == 1 and model.snapshot() is before
