"""The status line cut to the terminal: the node's name and "? help" always, then the keys that
fit, in the order of HINTS (the keys #16 added among them)."""

from __future__ import annotations

from backstep.tui.model import SessionModel
from backstep.tui.status import HELP, HINTS, status_text
from tests.tui_fixtures import upto_stop


def stopped_at_mul() -> str:
    model = SessionModel()
    for event in upto_stop(3):
        model.apply(event)
    return model.snapshot()  # type: ignore[return-value]


def line(width: int) -> str:
    return status_text(stopped_at_mul(), waiting=False, gone=None,  # type: ignore[arg-type]
                       breakpoints=0, width=width).plain


def test_the_node_name_and_help_stay_at_80_columns() -> None:
    text = line(80)
    assert len(text) <= 80
    assert "before MulBackward0 #3" in text and text.rstrip().endswith("? help")


def test_keys_fill_in_order_as_the_line_widens() -> None:
    keys = [f" {key} {what}" for key, what in HINTS if (key, what) != HELP]
    before: list[str] = []
    for width in (80, 110, 140, 160, 200, 300):
        text = line(width)
        assert len(text) <= width and "before MulBackward0 #3" in text and " ? help" in text
        shown = [key for key in keys if key in text]
        assert shown == keys[: len(shown)]  # a prefix of HINTS: the same order at every size
        assert len(shown) >= len(before)
        before = shown
    assert before == keys  # at 300 columns all of them, m, /, F and z included


def test_without_a_width_nothing_is_cut() -> None:
    text = status_text(stopped_at_mul(), waiting=False, gone=None,  # type: ignore[arg-type]
                       breakpoints=0).plain
    assert all(f" {key} {what}" in text for key, what in HINTS)
