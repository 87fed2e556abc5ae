"""torch's own ``Module._call_impl``, recompiled with a tracker's enter and leave woven in.

A wrapper function around ``_call_impl`` is one more Python frame in every module call, and
scripts can tell: a ``warnings.warn(stacklevel=N)`` that crosses it (``nn.LogSoftmax()`` without
``dim``) names backstep's file instead of torch's line, and a recursion through modules runs out
of depth sooner than without backstep. So the function provenance_calls installs is compiled from
torch's own source, under torch's file name and line numbers, in torch's module globals, with
its statements unchanged; what is added sits on the lines of the statements around it: the
enter before the body, the leave before each ``return`` (with the value it returns) and in an
``except BaseException`` around the body (with None, then the exception goes on). Same frames,
same file and line for every warning and traceback entry, same carets.

Used only when the source compiles back to exactly the code torch runs (same bytecode and line
table); otherwise ``weave`` returns None and provenance_calls keeps its wrapper.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import sys
import textwrap
from collections.abc import Callable
from types import CodeType, FunctionType
from typing import Any

# the names the woven code adds: closure cells of its factory, and two locals
_STATE, _DYNAMO, _COMPILER = "_backstep_state", "_backstep_dynamo", "_backstep_compiler"
_ACTIVE, _RESULT = "_backstep_active", "_backstep_result"
_FACTORY = "_backstep_weave"


def _statements(text: str, at: ast.AST) -> list[ast.stmt]:
    """``text`` parsed, every node placed at ``at``'s position (its line, its columns)."""
    body = ast.parse(textwrap.dedent(text)).body
    for statement in body:
        for node in ast.walk(statement):
            if "lineno" in node._attributes:
                ast.copy_location(node, at)
    return body


class _Returns(ast.NodeTransformer):
    """``return X`` in the function itself (not in nested functions) becomes: X into a local,
    leave called with it, the local returned; each on the return's own position."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return node  # a nested function's returns are its own

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return node

    def visit_Return(self, node: ast.Return) -> list[ast.stmt]:
        value = node.value if node.value is not None else ast.Constant(None)
        store = ast.Assign(targets=[ast.Name(_RESULT, ast.Store())], value=value)
        ast.copy_location(store, node)
        store.targets[0] = ast.copy_location(store.targets[0], node)
        tail = _statements(
            f"if {_ACTIVE} is not None:\n    try:\n        {_ACTIVE}[1](self, {_RESULT})\n"
            "    except RecursionError:\n        pass\n"
            f"return {_RESULT}\n",
            node,
        )
        return [store, *tail]


def _weave(function: ast.FunctionDef) -> None:
    """Rewrite ``function`` (torch's ``_call_impl``) in place."""
    first = function.body[0]
    body = [_Returns().visit(statement) for statement in function.body]
    flat: list[ast.stmt] = []
    for item in body:
        flat.extend(item if isinstance(item, list) else [item])
    prologue = _statements(
        f"{_ACTIVE} = {_STATE}[0]\n"
        f"if {_ACTIVE} is not None:\n"
        "    try:\n"
        f"        if {_DYNAMO}() or {_COMPILER}._is_compiling_flag:\n"
        f"            {_ACTIVE} = None\n"
        "        else:\n"
        f"            {_ACTIVE}[0](self, args)\n"
        "    except RecursionError:\n        pass\n",
        first,
    )
    guard = _statements(
        f"try:\n    pass\nexcept BaseException:\n"
        f"    if {_ACTIVE} is not None:\n        try:\n            {_ACTIVE}[1](self, None)\n"
        "        except RecursionError:\n            pass\n    raise\n",
        first,
    )[0]
    assert isinstance(guard, ast.Try)
    guard.body = flat
    function.body = [*prologue, guard]


def _imports(path: str) -> list[ast.stmt]:
    """The top-level import statements of the file (never run: see ``_parse``)."""
    lines = linecache.getlines(path)
    found: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.startswith(("import ", "from ")):
            continue
        statement = line
        while statement.count("(") > statement.count(")") and index < len(lines):
            statement += lines[index]
            index += 1
        found.append(statement)
    return ast.parse("".join(found)).body


def _parse(original: FunctionType) -> tuple[ast.Module, ast.FunctionDef] | None:
    """A module holding ``original``'s def alone, at its own lines and columns.

    Python 3.11 compiles ``name.method()`` differently when ``name`` was imported in the module,
    so the file's top-level imports come first, under an ``if False:`` that never runs them."""
    lines, first = inspect.getsourcelines(original)
    source = "".join(lines)
    indent = len(source) - len(source.lstrip(" "))
    # kept indented (columns are what carets are drawn from) under an ``if`` of the same depth
    prefix = "if True:\n" if indent else ""
    tree = ast.parse(prefix + source)
    ast.increment_lineno(tree, first - (2 if prefix else 1))
    holder: list[ast.stmt] = tree.body[0].body if prefix else tree.body  # type: ignore[attr-defined]
    if len(holder) != 1 or not isinstance(holder[0], ast.FunctionDef):
        return None
    function = holder[0]
    if function.decorator_list:
        return None
    imports = _imports(original.__code__.co_filename)
    if imports:
        never = ast.If(test=ast.Constant(False), body=imports, orelse=[])
        ast.copy_location(never, tree.body[0])
        ast.fix_missing_locations(never)
        tree.body.insert(0, never)
    return tree, function


def _same_code(compiled: CodeType, original: CodeType) -> bool:
    return (
        compiled.co_code == original.co_code
        and compiled.co_linetable == original.co_linetable
        and compiled.co_names == original.co_names
        and compiled.co_varnames == original.co_varnames
    )


def weave(
    original: Callable[..., Any], state: list[Any], dynamo_compiling: Callable[[], bool],
    compiler: Any,
) -> FunctionType | None:
    """``original`` (torch's ``Module._call_impl``) with ``state[0]``'s (enter, leave) woven in
    (None in ``state[0]``, or compiling: torch's code alone), or None where that is not possible
    exactly (see the module docstring)."""
    try:
        return _build(original, state, dynamo_compiling, compiler)
    except Exception:
        return None


def _build(
    original: Callable[..., Any], state: list[Any], dynamo_compiling: Callable[[], bool],
    compiler: Any,
) -> FunctionType | None:
    if not isinstance(original, FunctionType) or original.__closure__:
        return None
    code = original.__code__
    module = sys.modules.get(original.__module__)
    if module is None or module.__dict__ is not original.__globals__:
        return None
    parsed = _parse(original)
    if parsed is None:
        return None
    tree, function = parsed
    if _names(code) & {_STATE, _DYNAMO, _COMPILER, _ACTIVE, _RESULT, "super", "__class__"}:
        return None
    plain = compile(tree, code.co_filename, "exec", dont_inherit=True)
    inner = _nested_code(plain, code.co_name)
    if inner is None or not _same_code(inner, code):
        return None  # the source on disk is not the code that runs
    woven = function  # compiled as it was already: rewritten in place from here
    _weave(woven)
    factory = ast.FunctionDef(
        name=_FACTORY,
        args=ast.arguments(
            posonlyargs=[], args=[ast.arg(_STATE), ast.arg(_DYNAMO), ast.arg(_COMPILER)],
            kwonlyargs=[], kw_defaults=[], defaults=[],
        ),
        body=[woven, ast.Return(ast.Name(woven.name, ast.Load()))],
        decorator_list=[],
    )
    ast.copy_location(factory, function)
    for node in ast.walk(factory):
        if "lineno" in node._attributes and not hasattr(node, "lineno"):
            ast.copy_location(node, function)
    ast.fix_missing_locations(factory)
    holder = ast.Module(body=[*tree.body[:-1], factory], type_ignores=[])
    namespace: dict[str, Any] = {}
    exec(compile(holder, code.co_filename, "exec", dont_inherit=True),  # noqa: S102
         original.__globals__, namespace)
    built = namespace[_FACTORY](state, dynamo_compiling, compiler)
    built.__qualname__ = original.__qualname__
    built.__doc__ = original.__doc__
    built.__defaults__ = original.__defaults__
    built.__kwdefaults__ = original.__kwdefaults__
    return built


def _names(code: CodeType) -> set[str]:
    """Every name ``code`` and the functions defined in it use."""
    found = {*code.co_names, *code.co_varnames, *code.co_cellvars, *code.co_freevars}
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            found |= _names(constant)
    return found


def _nested_code(module_code: CodeType, name: str) -> CodeType | None:
    """The code object of the function ``name`` that ``module_code`` defines."""
    for constant in module_code.co_consts:
        if isinstance(constant, CodeType) and constant.co_name == name:
            return constant
    return None
