"""What each saved tensor costs (the Saved panel): the memory event names the tensors each
storage is saved as, and which saved tensors are leaves' storages; the panel shows the storage's
bytes and which tensors share it, as the memory view counts them (each storage once)."""

from __future__ import annotations

import torch

from backstep.engine.capture import Capture
from backstep.engine.recorder import ListRecorder
from backstep.tui.panels.saved import SavedPanel
from backstep.tui.state.memory_table import memory_table, saved_costs
from backstep.tui.state.model import SessionModel
from tests.engine_fixtures import mlp_events
from tests.tui_fixtures import RecordingLink, live_app
from tests.tui_pilot import pilot, settle, type_query


def record(run) -> list[dict]:  # type: ignore[no-untyped-def]
    recorder = ListRecorder()
    capture = Capture(recorder)
    capture.install()
    try:
        run()
    finally:
        capture.uninstall()
    return [dict(e) for e in recorder.events]


def shared_and_view_events() -> list[dict]:
    """a * a (one storage saved twice by one node) and a view of part of a storage."""
    w = torch.randn(4, 2, requires_grad=True)
    x = torch.randn(4, 6, requires_grad=True)

    def run() -> None:
        a = x.exp()  # ExpBackward0 saves its result: a's storage
        b = a * a  # MulBackward0 saves self and other: a's storage again
        c = a[:, :2] * w  # MulBackward0 saves self: a view of a's storage (and w, a leaf)
        (b.sum() + c.sum()).backward()

    return record(run)


def test_every_saved_tensor_is_named_by_its_storage_or_as_a_leaf() -> None:
    events = mlp_events()
    memory = next(e for e in events if e["event"] == "memory")
    named = {(i, n) for s in memory["storages"]
             for i, names in zip(s["held_by"], s["names"], strict=True) for n in names}
    leaves = {(e[0], n) for e in memory["leaf_saved"] for n in e[1:]}
    assert named and leaves and not named & leaves
    for s in memory["storages"]:
        assert len(s["names"]) == len(s["held_by"])
    for e in events:
        if e["event"] == "node":
            for item in e["saved"]:
                if item.get("shape"):  # a tensor (scalars are not storages)
                    assert (e["id"], item["name"]) in named | leaves, (e["name"], item)
    leaf_bytes = {}
    for e in events:
        if e["event"] == "node":
            for item in e["saved"]:
                if (e["id"], item["name"]) in leaves:
                    leaf_bytes[(e["id"], item["name"])] = item["bytes"]
    assert sum(leaf_bytes.values()) == memory["leaves"]  # each weight saved once, as mat2


def _model(events: list[dict]) -> SessionModel:
    model = SessionModel()
    for event in events:
        model.apply(event)
    return model


def test_costs_say_what_shares_a_storage() -> None:
    events = shared_and_view_events()
    view = _model(events).snapshot().pass_
    nodes = {e["id"]: e for e in events if e["event"] == "node"}
    muls = [i for i, e in nodes.items() if e["name"] == "MulBackward0"]
    exp = next(i for i, e in nodes.items() if e["name"] == "ExpBackward0")
    costs = {}
    for i, e in nodes.items():
        record = view.record(i)
        for item, cost in zip(record.saved, saved_costs(view, i, record.saved) or [],
                              strict=True):
            costs[(e["name"], i, item.name)] = cost
    a_bytes = 4 * 6 * 4
    square = next(m for m in muls if {s["name"] for s in nodes[m]["saved"]} >= {"self", "other"}
                  and all(s.get("shape") == [4, 6] for s in nodes[m]["saved"] if s.get("shape")))
    part = next(m for m in muls if m != square)
    mine = costs[("MulBackward0", square, "self")]
    assert mine.bytes == a_bytes and mine.here == ("other",) and not mine.view
    assert {i for i, _ in mine.others} == {exp, part}
    cut = costs[("MulBackward0", part, "self")]
    assert cut.view and cut.bytes == a_bytes  # a view costs its whole storage
    leaf = [c for (name, i, n), c in costs.items() if i == part and c is not None and c.leaf]
    assert len(leaf) == 1  # w
    result = costs[("ExpBackward0", exp, "result")]
    storage = next(s for e in events if e["event"] == "memory" for s in e["storages"])
    assert result.counted_at == storage.get("node", storage["held_by"][0])
    assert {i for i, _ in result.others} == {square, part}
    from backstep.tui.panels.saved import storage_cells

    long, short = storage_cells(result, {square: "MulBackward0", part: "MulBackward0"})
    assert long.plain == "+ 2 nodes" and short.plain == "+2"
    long, short = storage_cells(mine, {})
    assert long.plain == "= other + 2 nodes" and short.plain == "=other +2"
    assert storage_cells(cut, {})[1].plain.startswith("view")
    memory = memory_table(view)
    assert memory.total == a_bytes  # the one storage, once


def test_an_old_trace_has_no_costs() -> None:
    events = mlp_events()
    for e in events:
        if e["event"] == "memory":
            for s in e["storages"]:
                del s["names"]
            del e["leaf_saved"]
    view = _model(events).snapshot().pass_
    node = next(e for e in events if e["event"] == "node" and e["saved"])
    assert saved_costs(view, node["id"], view.record(node["id"]).saved) is None


@pilot
async def test_the_panel_says_the_cost_and_the_sharing() -> None:
    """TanhBackward0's result is the next Linear's mat1: the panel says so (+#id at 110
    columns, the node's name at 200), and its footer counts each storage once, as M does."""
    events = mlp_events()
    begin = next(e for e in events if e["event"] == "pass_begin")
    tanh = next(n["id"] for n in begin["nodes"] if n["name"] == "TanhBackward0")
    memory = next(e for e in events if e["event"] == "memory")
    addmm = next(s for s in memory["storages"] if s.get("op") == "TanhBackward0")["held_by"]
    other = next(i for i in addmm if i != tanh)
    for size, words in (((110, 32), f"+#{other}"), ((200, 50), f"+ AddmmBackward0 #{other} mat1")):
        app = live_app(RecordingLink(events))
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            await type_query(pilot, "TanhBackward0")
            await settle(pilot)
            assert app.selected == tanh
            text = str(app.query_one(SavedPanel).render())
            assert "result" in text and "2.0 KiB" in text and words in text, text
            total = next(e for e in events if e["event"] == "memory")["bytes"]
            assert f"freed {total / 1024:.1f} KiB" in text, text
