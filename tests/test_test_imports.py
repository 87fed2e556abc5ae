"""No test module imports another test module: helpers tests share live in helper modules named
for what they hold (tests/engine_fixtures.py, tests/trace_runs.py, ...), pytest fixtures in
tests/conftest.py. Importing a test module runs its collection-time code and makes its tests
depend on the other's private helpers. Read with ``ast``, nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _is_test_module(name: str) -> bool:
    return name.rsplit(".", 1)[-1].startswith("test_")


def imported_test_modules(source: str) -> list[str]:
    """Each test module ``source`` imports, by the name it is imported as."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            if node.module and _is_test_module(node.module):
                found.append(base)
            elif node.module in (None, "tests"):  # from tests import test_x, from . import test_x
                found += [f"{base}.{a.name}".replace("..", ".") for a in node.names
                          if _is_test_module(a.name)]
    return sorted(set(found))


def test_the_check_finds_a_test_module_import() -> None:
    source = ("from tests.test_engine_fidelity import captured\n"
              "import tests.test_trace_cli\n"
              "from tests import test_remote_auth, tui_pilot\n"
              "from .test_diagnostics import diagnose\n"
              "def f():\n    from tests.test_ranks_torchrun import descendants\n"
              "from tests.engine_fixtures import captured\nimport tests.tui_pilot\n")
    assert imported_test_modules(source) == sorted([
        ".test_diagnostics", "tests.test_ranks_torchrun", "tests.test_remote_auth",
        "tests.test_trace_cli", "tests.test_engine_fidelity"])
    assert imported_test_modules("from tests.engine_fixtures import captured\n") == []


def test_no_test_module_imports_another() -> None:
    bad = {p.name: names for p in sorted(TESTS.glob("*.py"))
           if (names := imported_test_modules(p.read_text()))}
    assert not bad, "\n".join(f"{m}: {', '.join(n)}" for m, n in sorted(bad.items()))
