"""``backstep show A --against B``: open where A first differs from B, with B's numbers beside."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from backstep.cli import main
from backstep.traces.index import TraceIndex
from backstep.tui.app import BackstepApp
from backstep.tui.panels.gradients import GradientsPanel
from backstep.tui.state.against import Against
from tests.replay_traces import VARIANTS, record_all
from tests.tui_fixtures import replay_app
from tests.tui_pilot import pilot


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return record_all(tmp_path_factory.mktemp("against"), {
        "ref": (VARIANTS, (), {}),
        "again": (VARIANTS, (), {}),
        "buggy": (VARIANTS, (), {"BUGGY": "1"}),
        "sigmoid": (VARIANTS, (), {"OP": "sigmoid"}),
    })


def status(app: BackstepApp) -> str:
    return str(app.query_one("#status").render())


def gradients(app: BackstepApp) -> str:
    panel = app.query_one(GradientsPanel)
    console = Console(width=200, record=True, file=io.StringIO())
    for i in range(panel.option_count):
        console.print(panel.get_option_at_index(i).prompt)
    return console.export_text()


@pilot
async def test_opens_at_the_birth_node_with_both_sides_numbers(traces) -> None:
    with TraceIndex(traces["ref"]) as a, TraceIndex(traces["buggy"]) as b:
        against = Against(a, b)
        app = replay_app(a, against=against)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            text = status(app)
            assert "step 3 of 8  first difference after SquareBackward #" in text
            # cut at the right to keep "? help"; whole on a wider terminal
            assert "differs from B here: outgoing gradients differ" in text
            assert text.rstrip().endswith("? help") and len(text.rstrip()) <= 160
            await pilot.resize_terminal(200, 48)
            await pilot.pause()
            assert "differs from B here: outgoing gradients differ, incoming gradients and " \
                "saved tensors agree" in status(app)
            await pilot.resize_terminal(160, 48)
            await pilot.pause()
            assert app.selected == app.snapshot.stop.id
            node = app.snapshot.pass_.graph.nodes[app.selected]
            assert node.name == "SquareBackward"
            shown = gradients(app)
            found = against.difference["sides"][0]
            # A's outgoing gradient and, under it, B's: half the norm (the bug drops the 2)
            lines = [line.strip() for line in shown.splitlines()]
            out = lines.index(next(x for x in lines if x.startswith("grad_input[0]")))
            assert lines[out + 2].endswith(f"norm {found['a']['norm']:.4g}")
            # B's summary in two lines, as A's: it wraps rather than dropping the mean
            assert lines[out + 3] == f"B: [4, 2] float32 cpu  min {found['b']['min']:.4g}  " \
                f"max {found['b']['max']:.4g}"
            assert lines[out + 4] == f"mean {found['b']['mean']:.4g}  norm {found['b']['norm']:.4g}"
            assert shown.count("B: [") == 2, shown  # one incoming, one outgoing
            await pilot.press("n")
            await pilot.pause()
            text = status(app)
            assert "differs from B at pass 1, step 3" in text and "here" not in text
            assert "B: " in gradients(app)  # B's numbers follow the cursor


@pilot
async def test_a_structural_difference_and_no_difference(traces) -> None:
    with TraceIndex(traces["ref"]) as a, TraceIndex(traces["sigmoid"]) as b:
        app = replay_app(a, against=Against(a, b))
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            text = status(app)
            assert "step 4 of" in text and "before TanhBackward0" in text
            assert "differs from B here: a different op: TanhBackward0 in A, SigmoidBackward0 " \
                "in B" in text
            assert "B: a different op here, SigmoidBackward0" in gradients(app)
    with TraceIndex(traces["ref"]) as a, TraceIndex(traces["again"]) as b:
        app = replay_app(a, against=Against(a, b))
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            assert "step 1 of" in status(app) and "no difference from B" in status(app)


def test_against_a_file_that_is_not_a_trace_exits_2(traces, tmp_path, capsys) -> None:
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not a trace\n")
    code = main(["show", str(traces["ref"]), "--against", str(junk)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.strip() == f"backstep show: {junk} is not a backstep trace (line 1 is not a " \
        "JSON event; write one with `backstep trace`)"
    code = main(["show", str(traces["ref"]), "--against", str(tmp_path / "missing.jsonl")])
    assert code == 2 and "cannot open" in capsys.readouterr().err


@pilot
async def test_the_birth_node_shows_the_full_reason_with_both_sides(traces) -> None:
    with TraceIndex(traces["ref"]) as a, TraceIndex(traces["buggy"]) as b:
        against = Against(a, b)
        app = replay_app(a, against=against)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            shown = gradients(app)
            found = against.difference
            assert f"difference born at pass 1, step 3: {found['what']}" in shown
            assert f"differs  {found['details'][0]}" in shown  # both norms, A vs B
            assert "so       a custom backward" in shown
            norms = [f"norm {side[k]['norm']:.6g}" for side in found["sides"] for k in "ab"]
            assert all(norm in shown for norm in norms) and "grad_inputs[0]   B: shape" in shown
            await pilot.press("n")  # another node: B's numbers only, no finding
            await pilot.pause()
            assert "difference born" not in gradients(app) and "B: " in gradients(app)


def test_show_takes_diffs_tolerances(traces) -> None:
    from backstep.cli import build_parser
    from backstep.traces.diff import Tolerance

    args = build_parser().parse_args(["show", "a.jsonl", "--against", "b.jsonl", "--rtol", "0.6",
                                      "--atol", "1e-3"])
    assert (args.rtol, args.atol) == (0.6, 1e-3)
    assert build_parser().parse_args(["show", "a.jsonl"]).rtol is None  # diff's defaults
    with TraceIndex(traces["ref"]) as a, TraceIndex(traces["buggy"]) as b:
        assert Against(a, b).difference is not None
        # the bug halves a gradient: within 60% of each other, the runs agree
        assert Against(a, b, Tolerance(args.rtol, args.atol)).difference is None
