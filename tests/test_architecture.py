"""The layering rules, checked on the source: the engine never imports textual, the UI never
imports torch, the wire protocol is stdlib only, and backstep's modules import no cycle.

Imports are read with ``ast``, so nothing is imported to check them. The first three rules count
every import, those inside functions too (a lazy import still loads the library). The cycle check
counts only imports that run when a module is first imported (module level, not under
``if TYPE_CHECKING``): an import inside a function runs after every module involved is complete,
so it cannot see a half-initialised module. An edge goes to the module named (``from a.b import
c`` goes to ``a.b.c`` when that is a module, else to ``a.b``), not to its parent packages, whose
``__init__`` importing its own submodules would otherwise count as a cycle everywhere.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "backstep"
Import = tuple[str, bool]  # (module name, at module level)


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".")
    if not MODULES[module].name == "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(module: str) -> list[Import]:
    """Every module ``module`` imports, each with whether the import runs at import time."""
    found: list[Import] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue
            if isinstance(child, ast.Import):
                found.extend((alias.name, top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(module, child)
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


def _cycle() -> list[str] | None:
    edges = {m: sorted({name for name, top in imports(m) if top and name in MODULES} - {m})
             for m in MODULES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in edges[m]:
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (found := walk(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in MODULES:
        if m not in state and (found := walk(m)):
            return found
    return None


def test_no_import_cycles_at_module_level() -> None:
    assert _cycle() is None
