"""A compiled region as the UI shows it: the ``region`` event read defensively (stdlib + rich).

Every string here comes from a trace (op names, module paths, forward lines torch recorded): it
reaches the screen as ``rich.text.Text`` built from plain strings (never parsed as markup), with
control characters shown as escapes (``safe_text.printable``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from backstep import safe_text

NOT_STEPS = "fused by torch.compile: not individually steppable"


@dataclass(frozen=True)
class RegionOp:
    """One op of the region's backward graph, with the forward line it differentiates."""

    name: str
    op: str
    module: str | None
    source: Mapping[str, Any] | None


@dataclass(frozen=True)
class RegionInfo:
    """What a ``region`` event says about one ``CompiledFunctionBackward`` node."""

    id: int
    function: Mapping[str, Any] | None  # {"file", "line", "name"} of the frame Dynamo compiled
    ops: tuple[RegionOp, ...]
    reason: str | None
    left_out: int = 0
    outputs: tuple[str, ...] = ()  # per incoming gradient: what took that forward output

    def title(self) -> str:
        """``forward (net.py:22) · 56 ops`` (or the reason it cannot be read)."""
        where = function_text(self.function)
        count = len(self.ops) + self.left_out
        head = f"compiled region {where}" if where else "compiled region"
        return f"{head} · {count} op{'s' if count != 1 else ''}" if count else head


def _str(value: Any) -> str | None:
    return safe_text.printable(value) if isinstance(value, str) else None


def _source(value: Any) -> Mapping[str, Any] | None:
    if not isinstance(value, Mapping):
        return None
    file, line = value.get("file"), value.get("line")
    if not isinstance(file, str) or type(line) is not int:
        return None
    code = value.get("code")
    return {"file": file, "line": line, "code": code if isinstance(code, str) else None}


def function_text(function: Mapping[str, Any] | None) -> str:
    if not isinstance(function, Mapping):
        return ""
    name, file, line = function.get("name"), function.get("file"), function.get("line")
    where = f"{os.path.basename(file)}:{line}" if isinstance(file, str) and type(line) is int \
        else ""
    name = name if isinstance(name, str) else ""
    text = f"{name} ({where})" if name and where else name or where
    return safe_text.printable(text)


def from_event(ev: Mapping[str, Any]) -> RegionInfo | None:
    """The region an event describes; None for one without a node id."""
    node = ev.get("id")
    if type(node) is not int:
        return None
    ops: list[RegionOp] = []
    raw_ops = ev.get("ops")
    for raw in raw_ops if isinstance(raw_ops, list) else ():
        if not isinstance(raw, Mapping):
            continue
        ops.append(RegionOp(name=_str(raw.get("name")) or "?", op=_str(raw.get("op")) or "?",
                            module=_str(raw.get("module")), source=_source(raw.get("source"))))
    function = ev.get("function")
    left = ev.get("ops_left_out")
    raw_outputs = ev.get("outputs")
    outputs = tuple(_str(o) or f"output {k}" for k, o in
                    enumerate(raw_outputs if isinstance(raw_outputs, list) else ()))
    return RegionInfo(id=node, function=function if isinstance(function, Mapping) else None,
                      ops=tuple(ops), reason=_str(ev.get("reason")),
                      left_out=left if type(left) is int and left > 0 else 0, outputs=outputs)


def incoming_title(region: RegionInfo | None, index: int) -> str:
    """``grad_output[0] ← output 0 → AddmmBackward0 #7 in head (net.py:24)``: an incoming
    gradient of a region, named by what consumed that forward output (plain text)."""
    title = f"grad_output[{index}]"
    if region is None or index >= len(region.outputs):
        return title
    name = region.outputs[index]
    return title if name == f"output {index}" else f"{title} ← {name}"


def op_label(op: RegionOp, index: int) -> Text:
    """``3 mm_2 aten.mm.default blocks.1.b :13``: one row of the region's group."""
    text = Text.assemble((f"{index + 1} ", "dim"), ("▫ ", "magenta"), (op.op, ""))
    if op.module:
        text.append(f" {op.module}", style="dim cyan")
    if op.source is not None:
        text.append(f" :{op.source['line']}", style="dim")
    return text


def group_label(region: RegionInfo) -> Text:
    """The graph panel's folded row: short, the count and "not steps" first (panels are narrow;
    the whole note is in the Gradients panel)."""
    if not region.ops:
        return Text(f"◆ {region.reason or 'backward graph not readable'}", style="dim italic")
    count = len(region.ops) + region.left_out
    text = Text(f"◆ {count} fused op{'s' if count != 1 else ''}, not steps", style="magenta")
    where = function_text(region.function)
    if where:
        text.append(f" · {where}", style="dim")
    return text


def note_label(region: RegionInfo) -> Text:
    """The group's first row: what the ops are, or the one line saying why there are none."""
    if not region.ops:
        return Text(f"◆ {region.reason or 'backward graph not readable'}", style="dim italic")
    text = Text(f"◆ {region.title()} · {NOT_STEPS}", style="magenta")
    if region.reason:
        text.append(f" ({region.reason})", style="dim")
    if region.left_out:
        text.append(f" (+{region.left_out} not listed)", style="dim")
    return text
