"""The memory view (M): the pass in view's saved storages by module, op or line, draining as
the pass runs; the same rows as ``backstep memory``."""

from __future__ import annotations

from textual.widgets import DataTable

from backstep.traces.memory import rows
from backstep.tui.panels.memory import MemoryScreen
from backstep.tui.state.memory_table import memory_table
from backstep.tui.state.model import SessionModel
from tests.engine_fixtures import mlp_events
from tests.tui_fixtures import RecordingLink, live_app
from tests.tui_pilot import pilot


def mlp_events_memory() -> dict:
    return next(e for e in mlp_events() if e["event"] == "memory")


def test_the_table_drains_as_the_pass_runs() -> None:
    events = mlp_events()
    memory = next(e for e in events if e["event"] == "memory")
    model = SessionModel()
    nodes = 0
    held = []
    for event in events:
        model.apply(event)
        if event["event"] == "node":
            nodes += 1
            found = memory_table(model.snapshot().pass_)
            assert found is not None and found.step == nodes and found.total == memory["bytes"]
            held.append(found.held)
    assert held == sorted(held, reverse=True) and held[-1] == 0 and held[0] < memory["bytes"]
    found = memory_table(model.snapshot().pass_, "op")
    assert [r["key"] for r in found.rows] == [r["key"] for r in rows(memory, "op")]
    assert found.rows[0]["key"] == "TanhBackward0"
    assert found.rows[0]["bytes"] == 8 * 64 * 4 and found.rows[0]["storages"] == 1


def test_no_memory_event_no_table() -> None:
    events = [e for e in mlp_events() if e["event"] != "memory"]
    model = SessionModel()
    for event in events:
        model.apply(event)
    assert memory_table(model.snapshot().pass_) is None


@pilot
async def test_M_opens_the_table_and_b_regroups() -> None:
    app = live_app(RecordingLink(mlp_events()))
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        await pilot.press("M")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MemoryScreen)
        title = screen.query_one("#memory-box").border_title
        assert "Memory" in title and "pass 1" in title and "0 B of" in title
        table = screen.query_one("#memory-table", DataTable)
        assert screen.by == "module" and table.row_count == len(screen.found.rows) > 0
        await pilot.press("b")
        await pilot.pause()
        assert screen.by == "op" and str(next(iter(table.columns.values())).label) == "op"
        assert table.row_count == len(rows(mlp_events_memory(), "op"))
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, MemoryScreen)


def _holders(events: list[dict], key: str, by: str = "module") -> tuple[int, ...]:
    """The ids of the nodes that save the storages of row ``key``, straight from the events."""
    begin = next(e for e in events if e["event"] == "pass_begin")
    memory = next(e for e in events if e["event"] == "memory")
    sources = {n["id"]: n.get("source") for n in begin["nodes"]}
    from backstep.traces.memory import key_of
    mine = [s for s in memory["storages"] if key_of(s, by, sources) == key]
    ids = {i for s in mine for i in s["held_by"]}
    own = {s.get("node", s["held_by"][0]) for s in mine}
    order = [n["id"] for n in begin["nodes"] if n["id"] in ids]
    return tuple([i for i in order if i in own] + [i for i in order if i not in own])


async def _choose(pilot, app, key: str, by: str = "module") -> None:  # type: ignore[no-untyped-def]
    await pilot.press("M")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, MemoryScreen)
    while screen.by != by:
        await pilot.press("b")
        await pilot.pause()
    table = screen.query_one(DataTable)
    row = [r["key"] for r in screen.found.rows].index(key)
    for _ in range(row):
        await pilot.press("down")
    await pilot.pause()
    assert table.cursor_row == row
    await pilot.press("enter")
    await pilot.pause()


@pilot
async def test_a_module_row_selects_the_nodes_that_save_its_storages() -> None:
    """enter on model.1 (the Tanh): the view closes, the first node that saves its storage is
    selected (TanhBackward0, then the next Linear's AddmmBackward0 that saves it as mat1);
    n / N go through them, the search bar saying where, escape leaves."""
    events = mlp_events()
    nodes = _holders(events, "model.1")
    assert len(nodes) == 2
    app = live_app(RecordingLink(events))
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        await _choose(pilot, app, "model.1")
        assert not isinstance(app.screen, MemoryScreen)
        assert app.selected == nodes[0]
        view = app.shown.pass_
        assert view.graph.nodes[nodes[0]].name == "TanhBackward0"
        bar = app.query_one("#search")
        assert bar.display and "1/2" in str(app.query_one("#search-info").render())
        await pilot.press("n")
        await pilot.pause()
        assert app.selected == nodes[1] and "2/2" in str(app.query_one("#search-info").render())
        assert view.graph.nodes[nodes[1]].name == "AddmmBackward0"
        await pilot.press("N")
        await pilot.pause()
        assert app.selected == nodes[0]
        await pilot.press("escape")
        await pilot.pause()
        assert app.searching is None and app.picked is None and not bar.display


@pilot
async def test_a_row_chosen_in_show_selects_its_nodes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The same through ``backstep show``'s replay driver, grouped by op; strings from the trace
    (a module path with markup in it) are drawn as they are."""
    import json

    from backstep.traces.index import TraceIndex
    from tests.tui_fixtures import replay_app

    events = mlp_events()
    for e in events:
        if e["event"] == "memory":
            for s in e["storages"]:
                if s.get("module") == "model.2":
                    s["module"] = "[bold red]model.2[/]"
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    nodes = _holders(events, "TanhBackward0", "op")
    with TraceIndex(path) as index:
        app = replay_app(index)
        async with app.run_test(size=(110, 32)) as pilot:
            await pilot.pause()
            await pilot.press("M")
            await pilot.pause()
            from tests.tui_pilot import screen_text

            assert "[bold red]model.2[/]" in screen_text(app)
            await pilot.press("escape")
            await pilot.pause()
            await _choose(pilot, app, "TanhBackward0", "op")
            assert app.selected == nodes[0]
            assert app.shown.pass_.graph.nodes[app.selected].name == "TanhBackward0"



@pilot
async def test_a_click_on_a_row_chooses_it() -> None:
    events = mlp_events()
    app = live_app(RecordingLink(events))
    async with app.run_test(size=(110, 32)) as pilot:
        await pilot.pause()
        await pilot.press("M")
        await pilot.pause()
        keys = [r["key"] for r in app.screen.found.rows]
        await pilot.click("#memory-table", offset=(3, 1 + keys.index("model.1")))  # 1: header
        await pilot.pause()
        assert not isinstance(app.screen, MemoryScreen)
        assert app.selected == _holders(events, "model.1")[0]
