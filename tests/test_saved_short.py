"""The Saved panel keeps useful rows on a short screen (issue 44, rough): at 80x24 under a
diagnosis banner and a console with output it stays inside its column, borders and all, and
shows the saved tensors' rows first; at 110x32 and 200x50 it shows them all with its header and
footer."""

from __future__ import annotations

import copy

import pytest
from rich.text import Text

from backstep.tui.panels.saved import SavedPanel, fit
from tests.tui_fixtures import ADD, RecordingLink, diagnosis, example_events, live_app, saved
from tests.tui_pilot import pilot, screen_text, settle

NAMES = ["self", "other", "mat1", "mat2", "result"]


def events_with_five_saved() -> list[dict]:
    """The example session, each node saving five tensors, the script having printed four
    lines."""
    events = copy.deepcopy(example_events())
    for event in events:
        if event["event"] in ("stopped", "node"):
            event["saved"] = [saved(n, [4, 8]) for n in NAMES]
    out = [{"event": "output", "stream": "stdout", "text": f"epoch {k} loss 0.{k}\n"}
           for k in range(4)]
    return events[:1] + out + events[1:]


@pytest.mark.parametrize("size", [(80, 24), (110, 32), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_the_saved_panel_keeps_its_rows_and_borders(size: tuple[int, int]) -> None:
    app = live_app(RecordingLink(events_with_five_saved(), stop=3))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        app.driver.reader.feed(diagnosis(node=ADD))
        await settle(pilot)
        panel = app.query_one(SavedPanel)
        middle = app.query_one("#middle")
        assert app.query_one("#diagnosis").display
        # inside its column: the bottom border is drawn, nothing is pushed past the column
        assert panel.region.bottom <= middle.region.bottom, (panel.region, middle.region)
        assert panel.region.height >= 4, panel.region  # a title, two lines, a border
        lines = screen_text(app).splitlines()
        inside = [line[panel.region.x:panel.region.right] for line in
                  lines[panel.region.y:panel.region.bottom]]
        assert inside[-1].lstrip().startswith("╰"), inside
        rows = [line for line in inside if any(f" {n} " in line for n in NAMES)]
        assert rows, inside  # saved tensors' rows, not only a title and a header
        if size[1] >= 32:  # room for all of them, the header and the footer
            assert len(rows) == len(NAMES), inside
            assert any("tensor" in line for line in inside), inside
            assert any("held" in line for line in inside), inside
        else:
            shown = len(rows)
            more = [line for line in inside if "more" in line]
            assert shown == len(NAMES) or (more and f"+{len(NAMES) - shown} more" in more[0]), \
                inside


def test_fit_keeps_rows_first_then_the_header_then_the_footer() -> None:
    table = Text("\n".join(["head", "a", "b", "c"]))
    foot = Text("foot")

    def plain(parts: list[Text]) -> list[str]:
        return Text("\n").join(parts).plain.split("\n")

    assert plain(fit(table, [foot], 5)) == ["head", "a", "b", "c", "foot"]
    assert plain(fit(table, [foot], 4)) == ["head", "a", "b", "c"]
    assert plain(fit(table, [foot], 3)) == ["head", "a", " +2 more"]
    assert plain(fit(table, [foot], 2)) == ["a", " +2 more"]
    assert plain(fit(table, [foot], 1)) == [" +3 more"]
    assert plain(fit(None, [foot], 1)) == ["foot"]
