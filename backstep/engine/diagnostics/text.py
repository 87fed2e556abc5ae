"""Wording for diagnoses: lines, lists, sizes and op hints in plain autograd language.

Only strings and event dicts go in and out: nothing here sees a tensor.
"""

from __future__ import annotations

import os
import re
from typing import Any

from backstep.units import human_bytes

Source = dict[str, Any]

# What the backward formula of an op does that can turn a finite gradient into NaN/Inf.
_HINTS: tuple[tuple[str, str], ...] = (
    ("Rsqrt", "the slope of 1/sqrt(x) is infinite at x = 0 and NaN for x < 0"),
    ("Sqrt", "the slope of sqrt(x) is 1/(2*sqrt(x)): infinite at x = 0 and NaN for x < 0"),
    ("Log", "the slope of log(x) is 1/x: infinite at x = 0 and NaN for x < 0"),
    ("Div", "it divides by the denominator: a 0 in the denominator gives Inf or NaN"),
    ("Reciprocal", "the slope of 1/x is -1/x**2: infinite at x = 0"),
    ("Pow", "x**p with p < 1 has an infinite slope at x = 0 (and NaN for x < 0)"),
    ("Asin", "asin has an infinite slope at x = +-1"),
    ("Acos", "acos has an infinite slope at x = +-1"),
    ("Norm", "the slope of a norm is x/norm(x): 0/0 = NaN when the norm is 0"),
    ("Cdist", "the slope of a distance is 0/0 = NaN when two points coincide"),
    ("Atan2", "atan2 has no slope at (0, 0): 0/0 = NaN"),
    ("Exp", "exp overflows to Inf for large inputs (about 89 in float32)"),
)

MASKING = ("WhereBackward", "MaskedFillBackward", "IndexBackward", "MaskedScatterBackward")


def where(source: Source | None, near: Source | None = None) -> str:
    """``line 12: `y = x.sqrt()``` — with the file name when it differs from ``near``'s."""
    if not source or not source.get("line"):
        return "an unknown line"
    file = source.get("file") or ""
    place = f"line {source['line']}"
    if file and (near is None or near.get("file") != file):
        place = f"{os.path.basename(file)}:{source['line']}"
    code = code_of(source)
    return f"{place}: `{code}`" if code else place


def code_of(source: Source) -> str:
    """The line's code without its trailing comment (PEP 8 style: two spaces, then ``#``)."""
    code = (source.get("code") or "").strip()
    cut = code.find("  #")
    return code[:cut].rstrip() if cut > 0 else code


def made_at(name: str, source: Source | None) -> str:
    """``SqrtBackward0 (made by line 5: `y = x.sqrt()`)``, or the bare name."""
    if not source:
        return name
    return f"{name} (made by {where(source)})"


def names(items: list[str], limit: int = 4) -> str:
    """```a`, `b` and 3 more`` — short enough for a banner."""
    shown = [f"`{item}`" for item in items[:limit]]
    if len(items) > limit:
        return ", ".join(shown) + f" and {len(items) - limit} more"
    if len(shown) > 1:
        return ", ".join(shown[:-1]) + " and " + shown[-1]
    return shown[0] if shown else ""


def verb(items: list[str], one: str, many: str) -> str:
    return one if len(items) == 1 else many


size = human_bytes  # the one bytes format, shared with the UI


def saved_role(name: str) -> str:
    """A saved tensor as someone who wrote the forward knows it: ``its own output `result```."""
    if name.startswith("result"):
        return f"its own output `{name}`"
    if name == "self":
        return "its input `self`"
    if name == "other":
        return "its second input `other`"
    if name.startswith("tensors["):
        return f"`ctx.saved_tensors{name[len('tensors'):]}`"
    return f"the tensor `{name}`"


def op_hint(node_name: str) -> str:
    for key, hint in _HINTS:
        if node_name.startswith(key):
            return hint
    return ""


def out_of_place(op: str | None, culprit: Source | None = None) -> str:
    """How to avoid modifying the saved tensor, given the op (and line) that did."""
    code = code_of(culprit or {})
    if ".step(" in code or "zero_" in code:
        return ("an optimizer step updated the weights this graph saved: run every backward "
                "through the graph before optimizer.step(), or run the forward again after it")
    clone = ", or `.clone()` the tensor before changing it"
    if not op:
        return "use the out-of-place form of the op (`x = x.add(1)` instead of `x.add_(1)`)" + clone
    if op == "__setitem__":
        return "clone the tensor before assigning into it (`x = x.clone(); x[i] = ...`)"
    if op.startswith("__i") and op.endswith("__"):
        symbol = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "pow": "**",
                  "matmul": "@"}.get(op[3:-2], op[3:-2])
        return f"write `x = x {symbol} ...` instead of `x {symbol}= ...`" + clone
    if op.endswith("_"):
        call = re.search(r"([A-Za-z_][\w.]*)\." + re.escape(op) + r"\(([^()]*)\)", code)
        if call:
            target, args = call.groups()
            return (f"write `{target} = {target}.{op[:-1]}({args})` instead of "
                    f"`{target}.{op}({args})`" + clone)
        return f"use `x = x.{op[:-1]}(...)` instead of `x.{op}(...)`" + clone
    return f"call `{op}` without modifying its input (drop `inplace=True` / `out=`)" + clone


def related(role: str, source: Source | None) -> dict[str, Any] | None:
    """An extra line a diagnosis points at, tagged with why."""
    if not source or not source.get("line"):
        return None
    return {"role": role, "file": source.get("file"), "line": source.get("line"),
            "code": source.get("code")}
