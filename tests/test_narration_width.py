"""A demo's narration panel grows with a very wide screen: its title is drawn whole."""

from __future__ import annotations

from backstep.tui.panels.narration import NarrationPanel
from tests.tui_fixtures import graph_basics_at_step_3
from tests.tui_pilot import pilot, screen_text


@pilot
async def test_at_200_columns_the_narration_title_is_whole() -> None:
    app = graph_basics_at_step_3()
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        panel = app.query_one(NarrationPanel)
        title = str(panel.border_title)
        assert len(title) > 56  # longer than the 60-cell panel had room for
        assert panel.region.width >= len(title) + 4
        assert title in screen_text(app)
