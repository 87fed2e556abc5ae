"""A pass change leaves the graph panel's old rows to reference counting, not to the garbage
collector: Tree's nodes point at their parents and children, its line builder is a closure that
calls itself, and its line cache is a ring of links; each kept a pass's rows (labels, strips,
paths) alive until a collection found them, ~2,800 objects a ``]`` on a 2,500-node graph."""

from __future__ import annotations

import gc
from collections import Counter
from pathlib import Path

from backstep.traces.index import TraceIndex
from tests.synthetic_traces import write_transformer_trace
from tests.tui_fixtures import replay_app
from tests.tui_pilot import pilot


@pilot
async def test_pass_changes_leave_no_rows_to_the_collector(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    write_transformer_trace(trace, passes=4, nodes=1200)  # a 240-node trunk: the graph is chunked
    with TraceIndex(trace) as index:
        app = replay_app(index)
        async with app.run_test(size=(140, 42)) as pilot:
            await pilot.pause()
            await pilot.press("right_square_bracket")
            await pilot.pause()
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                for key in ["right_square_bracket"] * 2 + ["left_square_bracket"] * 2:
                    await pilot.press(key)
                    await pilot.pause()
                assert app.snapshot.pass_ is not None and app.snapshot.pass_.number == 2
                gc.collect()
                kinds = Counter(type(o).__name__ for o in gc.garbage)
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
    assert kinds["TreeNode"] == 0, kinds
    assert kinds["_TreeLine"] == 0, kinds
    assert kinds["Row"] == 0, kinds
