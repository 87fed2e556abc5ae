"""The pitfall scripts (tests/pitfalls/) and how to check one: run it in-process with diagnostics
as ``backstep trace`` would, and compare its diagnoses with the markers in its source."""

from __future__ import annotations

import contextlib
import gc
import io
import re
import runpy
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from backstep.engine.capture import Capture
from backstep.engine.diagnostics import Diagnostician
from backstep.engine.provenance import Provenance
from backstep.engine.recorder import ListRecorder

PITFALLS = Path(__file__).parent / "pitfalls"
_EXPECT = re.compile(r"#\s*expect:\s*(\w+)\s+(\S+)")
_RELATED = re.compile(r"#\s*related:\s*(\w+)")


def expectations(path: Path) -> tuple[Counter, dict[str, int]]:
    expected: Counter = Counter()
    related: dict[str, int] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if match := _EXPECT.search(line):
            node = None if match.group(2) == "-" else match.group(2)
            expected[(match.group(1), node, number)] += 1
        if match := _RELATED.search(line):
            related[match.group(1)] = number
    return expected, related


def diagnose(path: Path) -> list[dict[str, Any]]:
    """Run a script in-process as ``backstep trace`` would, with diagnostics; its events."""
    recorder = ListRecorder()
    doctor = Diagnostician(recorder)
    capture, provenance = Capture(doctor), Provenance()
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # a warning shows on every run, not once per process
        warnings._showwarnmsg_impl = lambda msg: None  # type: ignore[attr-defined] # quiet
        capture.install()
        provenance.install()
        doctor.install()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                runpy.run_path(str(path), run_name="__main__")
            doctor.emit({"event": "exit", "code": 0, "traceback": None})
            if any(e.get("retain_graph") for e in recorder.of("pass_begin")):
                gc.collect()  # retained graphs caught in reference cycles report release now
        finally:
            doctor.uninstall()
            provenance.uninstall()
            capture.uninstall()
    return recorder.events


def node_names(events: list[dict[str, Any]]) -> dict[int, str]:
    return {n["id"]: n["name"] for e in events if e["event"] == "pass_begin" for n in e["nodes"]}


def check_script(script: Path) -> None:
    """The script's diagnoses are exactly those its markers expect, at their lines."""
    expected, related = expectations(script)
    events = diagnose(script)
    names = node_names(events)
    diags = [e for e in events if e["event"] == "diagnosis"]
    got = Counter(
        (d["kind"], names.get(d["node"]) if d["node"] is not None else None,
         d["source"]["line"] if d["source"] else None)
        for d in diags
    )
    assert got == expected, [d["message"] for d in diags]
    for d in diags:
        assert d["source"]["file"] == str(script)
        assert d["message"] and d["title"] and d["severity"] in ("error", "warning", "info")
        assert set(d) >= {"event", "pass", "kind", "message", "node", "source"}
    lines = {(r["role"], r["line"]) for d in diags for r in d["related"]}
    for role, line in related.items():
        assert (role, line) in lines, (role, line, lines)
