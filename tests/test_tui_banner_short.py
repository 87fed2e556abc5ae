"""At 80x24 the diagnosis banner leaves the panels their rows, says how to put it away, and is put
away once a later pass begins (``d`` brings it back)."""

from __future__ import annotations

from backstep.tui.panels.diagnosis import DiagnosisBanner
from tests.tui_fixtures import ADD, diagnosis, example_events, renumbered
from tests.tui_pilot import line_with, make_app, pilot, screen_text


@pilot
async def test_the_banner_at_80x24_is_short_hinted_and_gone_at_the_next_pass() -> None:
    app, _ = make_app(stop=3)
    async with app.run_test(size=(80, 24)) as pilot:
        app.driver.reader.feed(diagnosis(node=ADD))
        await pilot.pause()
        await pilot.pause()
        banner = app.query_one(DiagnosisBanner)
        assert banner.display is True
        assert banner.region.height <= 8, banner.region
        assert "x dismiss" in line_with(screen_text(app), "Backward through")
        for event in renumbered(example_events(), 2, 0):
            if event["event"] == "pass_begin":
                app.driver.reader.feed(event)
        await pilot.pause()
        await pilot.pause()
        assert banner.display is False
        assert "d" in screen_text(app).splitlines()[-1]  # the status line counts it still
        await pilot.press("d")
        await pilot.pause()
        assert banner.display is True
