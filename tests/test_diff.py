"""``backstep diff`` on real pairs of traces: where two runs part ways, and the exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backstep.cli import main
from tests.replay_traces import VARIANTS, record_all


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("diff")
    return record_all(directory, {
        "ref": (VARIANTS, (), {}),
        "again": (VARIANTS, (), {}),
        "buggy": (VARIANTS, (), {"BUGGY": "1"}),
        "sigmoid": (VARIANTS, (), {"OP": "sigmoid"}),
        "scale": (VARIANTS, (), {"SCALE": "3"}),
        "f64": (VARIANTS, (), {"DTYPE": "float64"}),
        "twice": (VARIANTS, (), {"ITERS": "2"}),
    })


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main(["diff", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def report(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, dict]:
    code, out, _ = run(capsys, *argv, "--json")
    return code, json.loads(out)


def test_identical_runs_have_no_difference(traces: dict[str, Path], capsys) -> None:
    code, out, _ = run(capsys, traces["ref"], traces["again"])
    assert code == 0
    assert "no difference (1 pass(es) compared)" in out
    code, data = report(capsys, traces["ref"], traces["again"])
    assert code == 0 and data["same"] and data["difference"] is None


def test_a_buggy_custom_backward_is_named_as_the_birth_node(traces, capsys) -> None:
    code, data = report(capsys, traces["ref"], traces["buggy"])
    assert code == 1
    found = data["difference"]
    assert found["kind"] == "gradient"
    assert found["node"] == "SquareBackward" and found["pass"] == 1 and found["step"] == 3
    assert "incoming gradients and saved tensors agree" in found["what"]
    assert found["source"]["code"].strip().startswith("h = Square.apply(act(lin(x)))")
    assert found["hint"].startswith("a custom backward: either its backward() differs or its "
                                    "saved tensor(s) tensors[0] differ")
    side = found["sides"][0]
    assert side["a"]["norm"] == pytest.approx(2 * side["b"]["norm"], rel=1e-5)
    # the nodes after it differ too, but only because they inherit the difference
    rows = {row["node"]: row["same"] for row in data["context"]}
    assert rows["MulBackward0"] is True and rows["TanhBackward0"] is False
    code, out, _ = run(capsys, traces["ref"], traces["buggy"])
    assert code == 1
    assert "difference born at pass 1, step 3: outgoing gradients differ" in out
    assert "forward  ref.py:23  h = Square.apply(act(lin(x)))" in out
    assert "> step 3    SquareBackward" in out


def test_a_changed_op_is_a_structural_difference_where_it_occurs(traces, capsys) -> None:
    code, data = report(capsys, traces["ref"], traces["sigmoid"])
    assert code == 1
    found = data["difference"]
    assert found["kind"] == "structure"
    assert found["what"] == "a different op: TanhBackward0 in A, SigmoidBackward0 in B"
    assert found["step"] == 4  # Sum, Square, Mul, then the activation
    assert found["node_b"] == "SigmoidBackward0"
    assert found["source_b"]["file"].endswith("sigmoid.py")
    code, out, _ = run(capsys, traces["ref"], traces["sigmoid"])
    assert "  node     A: TanhBackward0   module -\n           B: SigmoidBackward0" in out
    assert "  forward  A: ref.py:23  h = Square.apply(" in out
    assert "           B: sigmoid.py:23  h = Square.apply(" in out


def test_a_changed_constant_is_traced_to_the_saved_scalar(traces, capsys) -> None:
    code, data = report(capsys, traces["ref"], traces["scale"])
    assert code == 1
    found = data["difference"]
    assert found["kind"] == "gradient" and found["node"].startswith("MulBackward")
    assert found["step"] == 2
    # the wrapped scalar is a 0-dim saved tensor: its value is recorded, so diff names it
    assert found["what"] == "saved tensors and outgoing gradients differ"
    assert found["details"][0] == "other: value 2.0 vs 3.0"
    code, out, _ = run(capsys, traces["ref"], traces["scale"])
    assert "  differs  other: value 2.0 vs 3.0" in out


def test_float32_against_float64_agrees_within_float32_tolerance(traces, capsys) -> None:
    code, out, _ = run(capsys, traces["ref"], traces["f64"])
    assert code == 0, out
    assert "note: dtypes differ (float32 in A, float64 in B): compared with rtol=1e-05" in out
    code, data = report(capsys, traces["ref"], traces["f64"], "--rtol", "1e-12", "--atol", "0")
    assert code == 1 and data["difference"]["kind"] == "gradient"
    assert data["difference"]["step"] == 1  # float32's rounding shows at the first node


def test_a_different_number_of_passes_is_structural(traces, capsys) -> None:
    code, data = report(capsys, traces["ref"], traces["twice"])
    assert code == 1
    assert data["difference"] == {**data["difference"], "kind": "structure",
                                  "what": "1 passes in A, 2 in B"}


def test_a_file_that_is_not_a_trace_exits_2_without_a_traceback(traces, tmp_path,
                                                                capsys) -> None:
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not a trace\n")
    code, out, err = run(capsys, traces["ref"], junk)
    assert code == 2 and out == ""
    assert err.strip() == f"backstep diff: {junk} is not a backstep trace (line 1 is not a " \
        "JSON event; write one with `backstep trace`)"
    code, _, err = run(capsys, tmp_path / "missing.jsonl", traces["ref"])
    assert code == 2 and "cannot open" in err and "Traceback" not in err


def test_a_truncated_trace_is_compared_as_far_as_it_goes(traces, tmp_path, capsys) -> None:
    data = traces["again"].read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[: data.rindex(b'{"event":"pass_end"') + 30])  # into the pass's end
    code, out, _ = run(capsys, traces["ref"], cut)
    assert "note: cut.jsonl: " in out and "did not finish" in out
    assert code == 1
    assert "structural difference at pass 1: the pass ended ok in A, did not finish in B" in out


def test_diff_and_export_work_where_torch_is_not_installed(traces) -> None:
    import subprocess
    import sys

    block = "import sys; sys.modules['torch'] = None; from backstep.cli import main; "
    for argv in (["diff", str(traces["ref"]), str(traces["buggy"])],
                 ["export", str(traces["ref"]), "--dot"]):
        done = subprocess.run([sys.executable, "-c", block + f"raise SystemExit(main({argv!r}))"],
                              capture_output=True, text=True, timeout=60)
        assert "Traceback" not in done.stderr
        assert done.returncode == (1 if argv[0] == "diff" else 0)


def test_a_node_that_sends_no_gradient_is_shown_by_what_it_received(traces, capsys) -> None:
    """AccumulateGrad has no outgoing gradient: its context row shows the gradient it received
    (marked "in"), not "(none) | (none) DIFFERS"."""
    rows = []
    for other in ("buggy", "sigmoid", "scale"):
        _, data = report(capsys, traces["ref"], traces[other])
        rows += [(other, row) for row in data["context"] if row["node"] == "AccumulateGrad"]
    assert rows, "no AccumulateGrad in any context"
    other, row = rows[0]
    assert row["incoming"] and row["a"] and row["a"][0] is not None
    _, out, _ = run(capsys, traces["ref"], traces[other])
    line = next(x for x in out.splitlines() if "AccumulateGrad" in x and "step" in x)
    assert " in " in line and "(none)" not in line, line
