"""The leaves a replay carries into a pass are what folding every earlier pass gives, however the
fold got there: on demand, in slices, from a remembered point, on a partly indexed file."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from backstep.traces.index import TraceIndex
from backstep.tui.state import carry
from backstep.tui.state.carry import Carry, CarryLog

PASSES = 15


def grad(norm: float | None) -> dict[str, Any] | None:
    return None if norm is None else {"shape": [2], "dtype": "float32", "norm": norm}


def accumulations(number: int) -> list[dict[str, Any]]:
    """Leaf a every pass (zeroed every third), b with no norm now and then, c from pass 5."""
    events = [{"event": "accumulate", "pass": number, "leaf": "a",
               "before": grad(0.0 if number % 3 == 0 else 1.0), "after": grad(number + 0.5)},
              {"event": "accumulate", "pass": number, "leaf": "b",
               "before": None if number == 1 else grad(2.0),
               "after": None if number % 4 == 0 else grad(10.0 * number)}]
    if number >= 5:
        events.append({"event": "accumulate", "pass": number, "leaf": "c", "before": None,
                       "after": grad(float("nan") if number == 7 else 1.0)})
    if number % 5 == 0:
        events.append({"event": "diagnosis", "pass": number, "kind": "k", "message": str(number),
                       "node": number})
    return events


def write(path: Path, interleaved: bool = False) -> Path:
    """The trace; ``interleaved``: passes 2k and 2k+1 line by line (two threads), the later
    one ending first."""
    passes = []
    for number in range(1, PASSES + 1):
        passes.append([{"event": "pass_begin", "pass": number, "api": "backward", "nodes": []},
                       *accumulations(number),
                       {"event": "pass_end", "pass": number, "status": "ok", "skipped": []}])
    lines: list[dict[str, Any]] = [{"event": "session", "version": 1, "argv": ["x"]}]
    lines += passes[0]
    for k in range(1, PASSES, 2):
        pair = passes[k:k + 2]
        if not interleaved or len(pair) < 2:
            lines += [e for p in pair for e in p]
            continue
        a, b = pair[0], pair[1][:-1]
        lines += [e for i in range(max(len(a), len(b))) for e in (a[i:i + 1] + b[i:i + 1])
                  if e["event"] != "pass_end"]
        lines += [pair[1][-1], a[-1]]
    path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in lines))
    return path


def reference(number: int) -> Carry:
    """The plain fold, pass after pass, of everything before pass ``number``."""
    leaves: dict[str, tuple[int, float | None]] = {}
    diagnoses = []
    for n in range(1, number):
        for event in accumulations(n):
            if event["event"] == "diagnosis":
                diagnoses.append(event)
                continue
            before, after = event["before"], event["after"]
            zeroed = before is None or before["norm"] == 0.0
            last = leaves.get(event["leaf"], (1, None))
            norm = after["norm"] if after is not None else None
            leaves[event["leaf"]] = (1 if zeroed else last[0] + 1,
                                     last[1] if norm is None else norm)
    return Carry(tuple((k, c, n) for k, (c, n) in leaves.items()), tuple(diagnoses))


def same(a: Carry, b: Carry) -> bool:
    """Equal, NaN norms included."""
    def norms(c: Carry) -> list[Any]:
        return [(k, n, "nan" if m != m else m) for k, n, m in c.leaves]  # noqa: PLR0124
    return norms(a) == norms(b) and a.diagnoses == b.diagnoses


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    return write(tmp_path / "t.jsonl")


def test_on_demand_in_any_order_matches_the_plain_fold(trace: Path) -> None:
    numbers = list(range(1, PASSES + 2))
    random.Random(0).shuffle(numbers)
    with TraceIndex(trace) as index:
        log = CarryLog(index)
        for number in numbers:
            assert same(log.before(number), reference(number)), number
        assert log.done


def test_folded_in_slices_then_read_from_remembered_points(trace: Path) -> None:
    with TraceIndex(trace) as index:
        log = CarryLog(index)
        while not log.work(0.0):  # one pass per slice
            pass
        assert sorted(log._marks) == list(range(PASSES + 1))  # the state after every pass
        reads: list[int] = []
        real = index.read_kinds
        index.read_kinds = lambda n, kinds: reads.append(n) or real(n, kinds)  # type: ignore
        for number in range(PASSES + 1, 0, -1):
            assert same(log.before(number), reference(number)), number
        assert reads == []  # any pass opens with nothing left to fold
        assert reference(PASSES).leaves[1][2] == 10.0 * (PASSES - 1)  # the fold is not trivial


@pytest.mark.parametrize("states", [1.5, 3.5, 6.5])
def test_remembered_states_stay_within_their_budget(trace: Path, states: float,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the budget every other state is let go (then every 4th kept, ...): what is kept
    stays within it, and every pass's carry is still the plain fold's."""
    with TraceIndex(trace) as index:
        size = CarryLog(index)._marks[0].nbytes() + 13 * 3  # a state of the 3 leaves
        monkeypatch.setattr(carry, "MARKS_BUDGET", int(states * size))
        log = CarryLog(index)
        while not log.work(0.0):
            assert log._marks_bytes <= carry.MARKS_BUDGET
        assert log.every > 1 and len(log._marks) <= states
        assert sorted(log._marks) == list(range(0, PASSES + 1, log.every))
        assert log._marks_bytes == sum(m.nbytes() for m in log._marks.values())
        for number in range(PASSES + 1, 0, -1):
            assert same(log.before(number), reference(number)), number


def test_a_partly_indexed_file_is_indexed_before_folding_an_unfinished_pass(trace: Path) -> None:
    with TraceIndex(trace, partial=True) as index:
        log = CarryLog(index)
        assert not index.done
        assert not log.work(1.0)  # only what is indexed so far
        assert same(log.before(PASSES), reference(PASSES))
        assert index.done


@pytest.mark.parametrize("interleaved", [False, True])
def test_passes_folded_as_the_scan_finds_them(tmp_path: Path, interleaved: bool) -> None:
    """While the file is indexed in slices, each pass is folded when it ends (in pass order,
    two threads' passes too), from the lines the scan found: nothing is read twice."""
    path = write(tmp_path / "t.jsonl", interleaved)
    with TraceIndex(path, partial=True) as index:
        log = CarryLog(index)
        reads: list[int] = []
        real = index.read_kinds
        index.read_kinds = lambda n, kinds: reads.append(n) or real(n, kinds)  # type: ignore
        while not index.scan(300):
            assert all(n > log._folded for n in log._lines)  # buffered: not folded yet
        assert log.work(None)
        assert reads == [1]  # only the pass indexed before the log was made
        for number in range(1, PASSES + 2):
            assert same(log.before(number), reference(number)), number


def test_a_snapshot_keeps_the_leaf_norms_of_its_moment() -> None:
    """Snapshots share one history of norms (no copy per accumulation): each still reads the
    norms as they were when it was made, in first-seen order, across passes."""
    from backstep.tui.state.model import SessionModel

    model = SessionModel()
    seen: list[dict[str, float]] = []
    shown = []
    for number, leaves in ((1, [("a", 1.0), ("b", 2.0)]), (2, [("b", 3.0), ("c", 4.0)]),
                           (3, [("a", 5.0)])):
        model.apply({"event": "pass_begin", "pass": number, "nodes": []})
        for leaf, norm in leaves:
            model.apply({"event": "accumulate", "pass": number, "leaf": leaf, "before": None,
                         "after": grad(norm)})
            shown.append(model.snapshot().leaf_norms)
            seen.append(dict(shown[-1]))
        model.apply({"event": "pass_end", "pass": number, "status": "ok", "skipped": []})
    assert seen == [{"a": 1.0}, {"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 3.0},
                    {"a": 1.0, "b": 3.0, "c": 4.0}, {"a": 5.0, "b": 3.0, "c": 4.0}]
    assert [list(s) for s in shown] == [list(d) for d in seen]  # first-seen order
    assert [dict(s) for s in shown] == seen  # made later, read now: still their own moment
    assert "c" not in shown[2] and shown[2].get("c") is None and len(shown[2]) == 2


def test_going_back_pass_by_pass_folds_each_pass_at_most_once(
        trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With states remembered only every few passes, [ back from a pass finds the state before
    it among those folded on the way to it: a walk back over every pass reads each pass's
    lines at most once (it would read up to ``every - 1`` for each pass before)."""
    with TraceIndex(trace) as index:
        monkeypatch.setattr(carry, "MARKS_BUDGET", 4 * CarryLog(index)._marks[0].nbytes())
        log = CarryLog(index)
        while not log.work(1.0):
            pass
        reads: list[int] = []
        real = index.read_kinds

        def counting(number: int, kinds: set[str]) -> list:
            reads.append(number)
            return real(number, kinds)

        index.read_kinds = counting  # type: ignore[method-assign]
        assert log.every >= 4
        for number in range(PASSES + 1, 0, -1):
            assert same(log.before(number), reference(number)), number
        assert len(reads) == len(set(reads)) <= PASSES, reads
        assert reads  # states were missing: some passes were folded again
