"""``backstep diff``'s own input (issue 29): tolerances that cannot be tolerances are refused,
``--json`` is strict JSON, an error exits 2 (never 1, "the traces differ"), and memory stays
linear in the depth of the graph."""

from __future__ import annotations

import contextlib
import io
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from backstep.cli import main
from backstep.commands.diff import json_text
from backstep.traces.diff import positions
from tests.synthetic_traces import write_chain_trace

BASE = Path(__file__).parent / "fixtures" / "small_trace.jsonl"


def run(*argv: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("option", "value"), [
    ("--rtol", "nan"), ("--atol", "nan"), ("--rtol", "-1"), ("--atol", "inf")])
def test_a_tolerance_that_is_not_one_is_refused(option: str, value: str) -> None:
    code, out, err = run("diff", BASE, BASE, option, value)
    assert (code, out) == (2, "")
    assert err == f"backstep diff: {option} must be a finite number >= 0, not {float(value)}\n"
    code, _, err = run("show", BASE, "--against", BASE, option, value)
    assert code == 2 and err.count("\n") == 1 and "must be a finite number" in err


def test_a_zero_tolerance_is_a_tolerance() -> None:
    assert run("diff", BASE, BASE, "--rtol", "0", "--atol", "0")[0] == 0


def strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_json_writes_non_finite_numbers_as_strings() -> None:
    report = {"sides": [{"a": {"norm": float("inf")}, "b": {"norm": float("-inf")}}],
              "x": (float("nan"), 1.5)}
    assert strict(json_text(report)) == {"sides": [{"a": {"norm": "inf"}, "b": {"norm": "-inf"}}],
                                         "x": ["nan", 1.5]}


def test_a_json_constant_in_a_trace_is_never_printed_as_infinity(tmp_path: Path) -> None:
    lines = BASE.read_text().splitlines()
    for written in ("Infinity", '"inf"'):  # hand-made, and as the recorder writes it
        other = tmp_path / "inf.jsonl"
        other.write_text("\n".join([*lines[:4], lines[4].replace(
            '"norm":5.2497883', f'"norm":{written}', 1), *lines[5:]]) + "\n")
        code, out, _ = run("diff", BASE, other, "--json")
        assert code == 1
        assert strict(out)["difference"]["sides"][0]["b"]["norm"] == "inf"


def peak(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def chain(ops: int) -> dict[str, Any]:
    nodes = [{"id": i, "name": "MulBackward0", "next": [i + 1]} for i in range(ops)]
    return {"roots": [0], "nodes": [*nodes, {"id": ops, "name": "AccumulateGrad", "next": []}]}


def test_graph_positions_cost_memory_linear_in_depth() -> None:
    """A position written as the whole path ("0.0.0...") costs its depth per node: quadratic
    on a chain (a 20,000-op chain's diff peaked at 1 GB, 40,000 at 3.6 GB)."""
    small, large = chain(2_000), chain(8_000)
    used_small = peak(lambda: positions(small))
    used_large = peak(lambda: positions(large))
    assert used_large < 6 * used_small, (used_small, used_large)  # 4x the nodes: ~4x, not 16x


def test_a_deep_chain_diffs_against_itself_as_the_same(tmp_path: Path) -> None:
    trace = tmp_path / "chain.jsonl"
    write_chain_trace(trace, 5_000)
    code, out, _ = run("diff", trace, trace)
    assert code == 0 and "no difference" in out


def test_positions_align_the_same_path_in_two_passes_and_only_it() -> None:
    places: dict[tuple[int, int], int] = {}
    a = positions({"roots": [10], "nodes": [{"id": 10, "next": [11, 12]}, {"id": 11, "next": []},
                                            {"id": 12, "next": [11]}]}, places)
    b = positions({"roots": [7], "nodes": [{"id": 7, "next": [9, 8]}, {"id": 8, "next": []},
                                           {"id": 9, "next": [8]}]}, places)
    assert a[10] == b[7] and a[11] == b[9] and a[12] == b[8]
    assert len({a[10], a[11], a[12]}) == 3


def test_a_node_with_no_step_is_reported_in_the_context(tmp_path: Path) -> None:
    """The recorder writes ``"step": null`` for a node that failed; the context rows printed it
    with a width, a TypeError that exited 1, "the traces differ"."""
    events = [json.loads(line) for line in BASE.read_text().splitlines()]
    events[2]["step"] = None
    a = tmp_path / "a.jsonl"
    a.write_text("".join(json.dumps(e) + "\n" for e in events))
    events[4]["grad_inputs"][0]["norm"] = 99.0
    b = tmp_path / "b.jsonl"
    b.write_text("".join(json.dumps(e) + "\n" for e in events))
    code, out, err = run("diff", a, b)
    assert (code, err) == (1, "")
    assert "    step None SumBackward0" in out


def test_a_sign_flip_shows_the_statistic_that_differs_not_equal_norms(tmp_path: Path) -> None:
    """A gradient with its sign flipped keeps its norm: the context row read
    ``5.24979 | 5.24979  DIFFERS``; it shows the first statistic out of tolerance instead."""
    events = [json.loads(line) for line in BASE.read_text().splitlines()]
    a = tmp_path / "a.jsonl"
    a.write_text("".join(json.dumps(e) + "\n" for e in events))
    grad = events[4]["grad_inputs"][0]  # SquareBackward's outgoing gradient
    assert events[4]["name"] == "SquareBackward"
    low, high = grad["min"], grad["max"]
    grad.update(min=-high, max=-low, mean=-grad["mean"], values=[-v for v in grad["values"]])
    b = tmp_path / "b.jsonl"
    b.write_text("".join(json.dumps(e) + "\n" for e in events))
    code, out, err = run("diff", a, b)
    assert (code, err) == (1, "")
    row = next(x for x in out.splitlines() if "step" in x and "SquareBackward" in x)
    assert row.lstrip().startswith(">"), row
    assert f"max {high:.6g} | max {-low:.6g}  DIFFERS" in row, row
    code, data_out, _ = run("diff", a, b, "--json")
    rows = {r["node"]: r for r in json.loads(data_out)["context"]}
    assert rows["SquareBackward"]["stat"] == "max"
    assert rows["SumBackward0"]["stat"] == "norm" and rows["SumBackward0"]["same"]
