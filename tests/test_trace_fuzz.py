"""A seeded one-field mutant fuzzer for ``diff``, ``export`` and ``show``: a trace is input nobody
here controls (issue 29), so a wrong-typed field must give one line and exit 2, never a
traceback, and never exit 1 ("the traces differ") for a crash.

Each mutant changes one field of one event of a small real trace (``fixtures/small_trace.jsonl``,
recorded by ``backstep trace``, with a diagnosis and a graph_released added): the field becomes
a list, an object, a string, null, a huge int, another (dangling) int, NaN, Infinity or a bool,
or is removed; or an object gets an extra field. ``diff`` runs both ways against the trace it
came from and against one that differs at its last node (text and ``--json``), and ``export``
once, in-process; ``show`` opens a few mutants in Textual's pilot and steps through them.

In CI a seeded sample runs (a few hundred mutants, well under a minute). The full run, every
mutant of every field, is on demand::

    BACKSTEP_FUZZ=full pytest -q tests/test_trace_fuzz.py
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backstep.cli import main
from backstep.events.spec import check
from backstep.traces.index import TraceIndex
from tests.tui_fixtures import replay_app
from tests.tui_pilot import pilot

BASE = Path(__file__).parent / "fixtures" / "small_trace.jsonl"
FULL = os.environ.get("BACKSTEP_FUZZ") == "full"
SAMPLE = 250  # mutants in the CI run
SHOWN = 6  # mutants opened in the UI in the CI run
MISSING = object()  # the field removed
EXTRA = object()  # an extra field added to the object
VALUES: list[Any] = [[], {"x": 1}, "x", None, 10**30, 987654, float("nan"), float("inf"), True,
                     MISSING, EXTRA]


def events() -> list[dict[str, Any]]:
    return [json.loads(line) for line in BASE.read_text().splitlines()]


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every field and list item of an event (the first two items of a list)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value[:2]):
            yield (*prefix, i)
            yield from paths(item, (*prefix, i))


def mutants() -> list[tuple[int, tuple[Any, ...], int]]:
    """(line, field path, index in VALUES) for every one-field mutant of the base trace."""
    return [(line, path, k) for line, event in enumerate(events())
            for path in paths(event) for k in range(len(VALUES))
            if not (VALUES[k] is MISSING and isinstance(path[-1], int))]


def mutate(line: int, path: tuple[Any, ...], k: int) -> tuple[str, dict[str, Any]]:
    """The mutant trace's text, and its mutated event."""
    all_events = events()
    parent = all_events[line]
    for key in path[:-1]:
        parent = parent[key]
    value = VALUES[k]
    if value is MISSING:
        del parent[path[-1]]
    elif value is EXTRA:
        if isinstance(parent[path[-1]], dict):
            parent[path[-1]]["zz_extra"] = [1, {"y": None}]
        else:
            parent[path[-1]] = [parent[path[-1]]]  # a scalar wrapped in a list
    else:
        parent[path[-1]] = value
    text = "".join(json.dumps(e) + "\n" for e in all_events)  # NaN, Infinity as Python writes
    return text, all_events[line]


def chosen() -> list[tuple[int, tuple[Any, ...], int]]:
    every = mutants()
    return every if FULL else random.Random(29).sample(every, SAMPLE)


def differing(tmp_path: Path) -> Path:
    """The base trace with its last node's gradient changed: a diff against it reports a
    difference, with its context rows and both sides' numbers (what a mutant must not break)."""
    all_events = events()
    last = [e for e in all_events if e["event"] == "node"][-1]
    last["grad_outputs"][0]["norm"] = 1234.5
    path = tmp_path / "other.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in all_events))
    return path


def run(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


def malformed(event: dict[str, Any], path: tuple[Any, ...], k: int) -> bool:
    """Whether diff and export must refuse the mutant (exit 2): its event breaks the schema
    and is one they read (an ``output`` line is not; an event whose pass number became another
    int belongs to no pass and is skipped with a note; one with no ``event`` is not an event,
    an unreadable line)."""
    if check(event) is None or "event" not in event or event.get("event") == "output":
        return False
    return not (path == ("pass",) and type(VALUES[k]) is int)


@pytest.mark.parametrize("batch", range(5))
def test_one_field_mutants_never_crash_diff_or_export(tmp_path: Path, batch: int) -> None:
    cases = chosen()[batch::5]
    other = str(differing(tmp_path))
    failures = []
    for line, path, k in cases:
        text, event = mutate(line, path, k)
        mutant = tmp_path / "m.jsonl"
        mutant.write_text(text)
        label = f"line {line + 1} {'.'.join(map(str, path))} = {VALUES[k]!r}"
        must_refuse = malformed(event, path, k)
        for argv in (("diff", str(mutant), str(BASE)), ("diff", str(BASE), str(mutant)),
                     ("diff", str(mutant), other, "--json"), ("diff", other, str(mutant)),
                     ("export", str(mutant), "-o", str(tmp_path / "out.dot"))):
            try:
                code, err = run(*argv)
            except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
                failures.append(f"{label}: {argv[0]} raised {exc!r}")
                continue
            lines = [x for x in err.splitlines() if "note:" not in x]
            if code not in (0, 1, 2) or "a bug in backstep" in err:
                failures.append(f"{label}: {argv[0]} exit {code}: {err.strip()}")
            elif code == 2 and len(lines) != 1:
                failures.append(f"{label}: {argv[0]} said {len(lines)} lines: {err.strip()}")
            elif must_refuse and code != 2:
                failures.append(f"{label}: {argv[0]} exit {code} for a malformed event")
            elif must_refuse and "field " not in err:
                failures.append(f"{label}: {argv[0]} did not name the field: {err.strip()}")
    assert not failures, "\n".join(failures[:20])


def test_a_refusal_names_the_file_line_and_field(tmp_path: Path) -> None:
    all_events = events()
    all_events[2]["grad_outputs"] = ["x"]
    mutant = tmp_path / "m.jsonl"
    mutant.write_text("".join(json.dumps(e) + "\n" for e in all_events))
    code, err = run("diff", str(BASE), str(mutant))
    assert code == 2
    assert err == (f"backstep diff: {mutant}:3: field grad_outputs[0]: expected summary object "
                   "or null, got str\n")
    code, err = run("export", str(mutant))
    assert (code, err.splitlines()[-1]) == (2, f"backstep export: {mutant}:3: field "
                                               "grad_outputs[0]: expected summary object or "
                                               "null, got str")


def shown() -> list[tuple[int, tuple[Any, ...], int]]:
    every = mutants()
    # the fields the UI reads most: a node's name, id and next, a summary's norm, a source
    wanted = [m for m in every if m[1][-1] in ("name", "id", "next", "norm", "source", "event",
                                               "grad_outputs", "saved", "leaf", "module")]
    return wanted if FULL else random.Random(29).sample(wanted, SHOWN)


@pytest.mark.parametrize("case", shown(), ids=lambda m: f"{m[0]}-{'.'.join(map(str, m[1]))}-{m[2]}")
@pilot
async def test_one_field_mutants_never_crash_show(tmp_path: Path,
                                                  case: tuple[int, tuple[Any, ...], int]) -> None:
    text, _ = mutate(*case)
    mutant = tmp_path / "m.jsonl"
    mutant.write_text(text)
    try:
        index = TraceIndex(mutant)
    except Exception:  # noqa: BLE001 - a file that is not a trace: show exits 2 before the UI
        return
    with index:
        if not index.numbers():
            return
        app = replay_app(index, note=index.note())
        async with app.run_test(size=(140, 42)) as pilot:
            for key in ("n", "n", "n", "m", "n", "p", "G", "g", "escape", "tab", "l", "c", "C"):
                await pilot.press(key)
            await pilot.pause()
        assert app.return_code in (None, 0), f"the app failed: {app._exception!r}"
