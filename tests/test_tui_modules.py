"""The module view (m): nodes folded by module path, counts, largest norm, ✗ on NaN/Inf,
the current node's module unfolded, arrows fold and unfold."""

from __future__ import annotations

from backstep.tui.panels.modules import NO_MODULE, ModulePanel, build_modules, module_parts
from backstep.tui.state.model import SessionModel
from tests.tui_fixtures import (
    ACC_X,
    ACC_Y,
    ADD,
    MUL,
    POW,
    RecordingLink,
    live_app,
    long_name_events,
    summary,
    upto_stop,
)
from tests.tui_pilot import pilot, screen_text

PATH = ("model", "transformer", "h.11", "mlp", "c_proj")


def test_module_parts_keep_an_index_with_its_container() -> None:
    assert module_parts("model.transformer.h.3.attn") == ("model", "transformer", "h.3", "attn")
    assert module_parts("layers.0") == ("layers.0",) and module_parts(None) == (NO_MODULE,)


def test_nodes_fold_under_their_module_path() -> None:
    model = SessionModel()
    for event in upto_stop(1, long_name_events()):
        model.apply(event)
    view = model.snapshot().pass_
    assert view is not None
    root = build_modules(view)
    assert list(root.children) == ["model"]  # the leaves fold under their parameter's module
    mod = root
    for part in PATH:
        mod = mod.children[part]
    assert mod.nodes == [POW, ADD, MUL, ACC_Y] and len(root.children["model"].all_nodes) == 5
    ln_2 = root.children["model"].children["transformer"].children["h.0"].children["ln_2"]
    assert ln_2.nodes == [ACC_X]


@pilot
async def test_m_shows_modules_with_counts_and_the_current_node_unfolded() -> None:
    app = live_app(RecordingLink(long_name_events(), stop=3))
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        await pilot.press("m")
        await pilot.pause()
        panel = app.query_one(ModulePanel)
        assert panel.display and not app.query_one("#graph").display
        assert app.focused is panel
        text = screen_text(app)
        assert "c_proj  2✓ 2·" in text and "h.11  2✓ 2·" in text  # Pow, Add ran; Mul, y.grad not
        assert "MulBackward0 #3" in text  # its module was unfolded for it
        assert panel.cursor_node is not None and panel.cursor_node.data == ("node", MUL)
        assert str(panel.border_subtitle).endswith("h.11 › mlp › c_proj")  # the tail kept
        assert panel.breadcrumb(MUL).startswith("…") or "model ›" in panel.breadcrumb(MUL)
        await pilot.press("up")  # onto AddBackward0: the detail follows
        await pilot.pause()
        assert app.selected == ADD
        await pilot.press("left")  # a node row: left goes to its module
        await pilot.pause()
        assert panel.cursor_node is not None and panel.cursor_node.data == ("module", PATH)
        await pilot.press("left")  # folds it
        await pilot.pause()
        assert not panel.cursor_node.is_expanded
        await pilot.press("right")
        await pilot.pause()
        assert panel.cursor_node.is_expanded
        await pilot.press("m")
        await pilot.pause()
        assert app.query_one("#graph").display and not panel.display


@pilot
async def test_a_nan_in_a_module_marks_it() -> None:
    events = long_name_events()
    nodes = [e for e in events if e["event"] == "node"]
    nodes[1]["grad_inputs"] = [summary([float("nan"), 1.0]), summary([1.0])]  # AddBackward0
    app = live_app(RecordingLink(events, stop=3))
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        await pilot.press("m")
        await pilot.pause()
        assert "c_proj ✗  2✓ 2·" in screen_text(app)
        assert "h.11 ✗  2✓" in screen_text(app)  # and every module above it
        await pilot.press("n")  # the counts follow the steps
        await pilot.pause()
        assert "c_proj ✗  3✓ 1·" in screen_text(app)


@pilot
async def test_search_in_the_module_view_unfolds_the_match() -> None:
    app = live_app(RecordingLink(long_name_events(), stop=1))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("m", "slash", "m", "u", "l", "enter")
        await pilot.pause()
        panel = app.query_one(ModulePanel)
        assert app.selected == MUL and app.focused is panel
        assert panel.cursor_node is not None and panel.cursor_node.data == ("node", MUL)
