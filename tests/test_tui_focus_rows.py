"""A panel reached with ``tab`` has its first row selected: ``enter`` acts at once."""

from __future__ import annotations

from backstep.tui.panels.gradients import GradientsPanel
from backstep.tui.panels.tensorview import TensorView
from tests.tui_pilot import make_app, pilot


@pilot
async def test_tab_then_enter_on_gradients_opens_the_first_gradient() -> None:
    app, link = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        panel = app.query_one(GradientsPanel)
        for _ in range(6):
            if panel.has_focus:
                break
            await pilot.press("tab")
            await pilot.pause()
        assert panel.has_focus
        assert panel.highlighted is not None
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, TensorView)
        request = link.sent[-1]
        assert request["cmd"] == "tensor" and request["slot"] == "grad_outputs"
