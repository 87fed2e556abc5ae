"""No module imports another module's private name (``from a import _b``, or ``a._b`` read
through an imported module): a name with a leading underscore is its module's own business, and
two modules that need each other's insides are one module in two files.

Scope: every backstep module (``EXCLUDED`` names packages left out, none today). Read with
``ast``, nothing imported."""

from __future__ import annotations

import ast

from tests.package_modules import MODULES, resolve

EXCLUDED: tuple[str, ...] = ()


def _in_scope(module: str) -> bool:
    return not any(module == p or module.startswith(p + ".") for p in EXCLUDED)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(module: str, source: str | None = None) -> list[str]:
    """Each private name of another backstep module that ``module`` (its ``source``, read
    from its file when None) imports or reads."""
    tree = ast.parse(MODULES[module].read_text() if source is None else source)
    found = []
    aliases: dict[str, str] = {}  # a local name -> the backstep module it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = resolve(module, node)
            if not base.startswith("backstep"):
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in MODULES:
                    aliases[alias.asname or alias.name] = full
                elif _private(alias.name) and base != module:
                    found.append(f"{base}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and _private(node.attr)
                and aliases[node.value.id] != module):
            found.append(f"{aliases[node.value.id]}.{node.attr}")
    return sorted(set(found))


def test_the_check_finds_a_private_import() -> None:
    assert _private("_x") and not _private("__version__") and not _private("x")
    source = ("from backstep.engine.graph import _hidden, display_name\n"
              "from backstep.engine import transfers as t\n"
              "from .passes import _own\n"
              "t._note(); t.read(None)\n")
    assert private_imports("backstep.engine.capture.hooks", source) == [
        "backstep.engine.capture.passes._own", "backstep.engine.graph._hidden",
        "backstep.engine.transfers._note"]
    assert private_imports("backstep.engine.capture.hooks", "import os\nos._exit\n") == []


def test_no_module_imports_another_s_private_name() -> None:
    bad = {m: names for m in MODULES if _in_scope(m) and (names := private_imports(m))}
    assert not bad, "\n".join(f"{m}: {', '.join(n)}" for m, n in sorted(bad.items()))
