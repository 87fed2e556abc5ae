"""Mouse: clicking a graph row selects its node; clicking a gradient opens the tensor view;
clicking a module row in the module view folds or unfolds it."""

from __future__ import annotations

from backstep.tui.panels.modules import ModulePanel
from backstep.tui.panels.tensorview import TensorView
from tests.tui_fixtures import ADD, MUL, RecordingLink, example_events, live_app, long_name_events
from tests.tui_pilot import pilot


@pilot
async def test_click_a_node_selects_it() -> None:
    app = live_app(RecordingLink(example_events(), stop=3))
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        assert app.selected == MUL
        await pilot.click("#graph", offset=(8, 2))  # the second row: AddBackward0
        await pilot.pause()
        assert app.selected == ADD
        assert "AddBackward0 #2" in str(app.query_one("#gradients").border_title)


@pilot
async def test_click_a_gradient_opens_the_tensor_view() -> None:
    link = RecordingLink(example_events(), stop=3)
    app = live_app(link)
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        await pilot.click("#gradients", offset=(6, 2))  # grad_output[0]
        await pilot.pause()
        assert isinstance(app.screen, TensorView)
        asked = [m for m in link.sent if m.get("cmd") == "tensor"]
        assert asked and asked[-1]["slot"] == "grad_outputs" and asked[-1]["node"] == MUL


@pilot
async def test_click_a_module_folds_it_and_a_node_in_it_selects_it() -> None:
    app = live_app(RecordingLink(long_name_events(), stop=3))
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        await pilot.press("m")
        await pilot.pause()
        panel = app.query_one(ModulePanel)
        row = panel.cursor_node
        assert row is not None and row.data == ("node", MUL) and row.parent is not None
        module = row.parent
        await pilot.click("#modules", offset=(3, module.line + 1 - panel.scroll_offset.y))
        await pilot.pause()
        assert not module.is_expanded
        await pilot.click("#modules", offset=(3, module.line + 1 - panel.scroll_offset.y))
        await pilot.pause()
        assert module.is_expanded
        add = next(child for child in module.children if child.data == ("node", ADD))
        await pilot.click("#modules", offset=(8, add.line + 1 - panel.scroll_offset.y))
        await pilot.pause()
        assert app.selected == ADD
