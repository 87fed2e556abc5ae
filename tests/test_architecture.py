"""The layering rules, checked on the source: the engine never imports textual, the UI never
imports torch, the UI's state is plain Python, the wire protocol and the event format
(``backstep/events/``) are stdlib only, and backstep's modules import no circle.

Imports are read with ``ast``, so nothing is imported to check them. The library rules count
every import, those inside functions too (a lazy import still loads the library). The circle
check counts every import as well, lazy ones and those under ``if TYPE_CHECKING`` included: a
lazy import cannot see a half-initialised module, but two modules that need each other are one
module split in two places, and a mixin that imports the app it is mixed into for its type is the
same knot. An edge goes to the module named (``from a.b import c`` goes to ``a.b.c`` when that is
a module, else to ``a.b``), not to its parent packages, whose ``__init__`` importing its own
submodules would otherwise count as a circle everywhere.
"""
from __future__ import annotations

import ast
import sys

from tests.package_modules import MODULES, resolve

Import = tuple[str, bool]  # (module name, at module level)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(module: str, *, type_checking: bool = False) -> list[Import]:
    """Every module ``module`` imports, each with whether the import runs at import time; those
    under ``if TYPE_CHECKING`` too when ``type_checking``."""
    found: list[Import] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child) and not type_checking:
                continue
            if isinstance(child, ast.Import):
                found.extend((alias.name, top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = resolve(module, child)
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    found.append((full if full in MODULES else base, top))
            inner = top and not isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, inner)

    visit(ast.parse(MODULES[module].read_text()), True)
    return found


def _roots(module: str) -> set[str]:
    return {name.split(".")[0] for name, _ in imports(module)}


def test_the_checker_sees_imports() -> None:
    """Guards the rules below against passing on an empty reading."""
    assert {"backstep.protocol", "backstep.engine.capture", "backstep.tui.app"} <= set(MODULES)
    assert ("torch", True) in imports("backstep.engine.capture")
    assert "textual" in _roots("backstep.tui.app")


def test_engine_never_imports_textual() -> None:
    bad = {m for m in MODULES if m.startswith("backstep.engine") and "textual" in _roots(m)}
    assert not bad


def test_tui_never_imports_torch() -> None:
    bad = {m for m in MODULES if m.startswith("backstep.tui") and "torch" in _roots(m)}
    assert not bad


def test_protocol_and_safe_text_are_stdlib_only() -> None:
    for shared in ("backstep.protocol", "backstep.safe_text"):  # both sides import them
        outside = _roots(shared) - set(sys.stdlib_module_names) - {"__future__"}
        assert not outside, shared


def test_events_are_stdlib_only() -> None:
    """``backstep/events/`` states the event format and the stop rules for the engine, the trace
    readers and the UI alike: it imports the standard library, itself and the line framing
    (``protocol``), nothing else of backstep."""
    events = [m for m in MODULES if m == "backstep.events" or m.startswith("backstep.events.")]
    assert "backstep.events.spec" in events
    for module in events:
        outside = _roots(module) - set(sys.stdlib_module_names) - {"__future__", "backstep"}
        assert not outside, module
        ours = {name for name, _ in imports(module, type_checking=True)
                if name.startswith("backstep")}
        assert ours <= {"backstep.protocol", *events}, (module, ours)


def test_tui_state_never_imports_textual() -> None:
    """``tui/state/`` is the UI's plain data (snapshots, pass logs, the replay timeline): a new
    piece of state belongs there only if it needs no widget."""
    bad = {m for m in MODULES if m.startswith("backstep.tui.state") and "textual" in _roots(m)}
    assert not bad


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        for n in sorted(edges[m]):
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            component = []
            while True:
                n = stack.pop()
                component.append(n)
                if n == m:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for m in sorted(edges):
        if m not in index:
            visit(m)
    return found


def import_edges() -> dict[str, set[str]]:
    """Every import between backstep's modules, lazy and TYPE_CHECKING ones included."""
    return {m: {name for name, _ in imports(m, type_checking=True) if name in MODULES} - {m}
            for m in MODULES}


def test_the_circle_check_finds_a_circle() -> None:
    """Guards the check below against passing on a reading that finds none."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    edges = import_edges()
    assert "backstep.process.quick_exit" in edges["backstep.cli"]  # lazy, in a function
    assert "backstep.tui.state.records" in edges["backstep.tui.state.pass_log"]  # TYPE_CHECKING


def test_no_import_circles() -> None:
    found = circles(import_edges())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)

