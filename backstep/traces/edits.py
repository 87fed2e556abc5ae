"""Gradient edits a trace records: where the person replaced a gradient at a stop, in words.

A pass with an ``edit`` event computed gradients that are not the program's own from that node
on; ``diff`` says so beside its finding, so a difference born at an edited node is not taken for
a bug. The index counts edits as it scans, so a trace without any costs nothing here. Stdlib
only; a trace's strings are data, made printable where they are shown.
"""

from __future__ import annotations

from typing import Any

from backstep.traces.index import TraceIndex


def edits_of(index: TraceIndex) -> list[dict[str, Any]]:
    """Every ``edit`` event of the trace, in pass order."""
    out: list[dict[str, Any]] = []
    for number in index.numbers():
        place = index.passes.get(number)
        if place is not None and place.edits:
            out.extend(index.read_kinds(number, {"edit"}))
    return out


def edit_text(edit: dict[str, Any]) -> str:
    """One edit in words: "pass 1 step 3 SumBackward0 #2: scale(2) on grad_outputs"."""
    return (f"pass {edit.get('pass')} step {edit.get('step')} {edit.get('name')} "
            f"#{edit.get('id')}: {edit.get('what')} on {edit.get('slot')}")


def edit_hint(sides: list[tuple[str, TraceIndex, int | None]], step: int | None) -> str | None:
    """Why a difference is born at ``step``, when an edit made at or before it in that pass
    explains it: ``sides`` is (label, trace, pass number) for A and B."""
    for label, index, number in sides:
        for edit in edits_of(index):
            at = edit.get("step")
            if edit.get("pass") == number and isinstance(at, int) and (step is None or at <= step):
                return (f"{label}'s gradients were edited by you at {edit_text(edit)}: the "
                        "difference comes from that edit, not from the program")
    return None


def edit_notes(index: TraceIndex, label: str) -> list[str]:
    """Notes for a diff report: each edit in trace ``label`` (A or B)."""
    return [f"{label} was edited by you at {edit_text(e)}: its gradients from there on are not "
            "the program's own" for e in edits_of(index)]
