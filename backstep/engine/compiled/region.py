"""A compiled region's backward, described from what torch keeps about it.

A ``torch.compile``d region's whole backward is one ``CompiledFunctionBackward`` node. Its
``_forward_cls`` is AOTAutograd's ``CompiledFunction``: ``_aot_id`` names it, and until (and
after) the backward is lowered it keeps the backward graph (``_lazy_backward_info.bw_module``),
each op with the forward op it differentiates (``fwd_source_fn_stack``) and that op's module
(``fwd_nn_module_stack``). The forward line of that op comes from Dynamo's own graph
(``artifacts``). Nothing is called but readers: the backward that runs is torch's, unchanged.

A region loaded from torch's compile cache keeps only a serialized graph, without the forward
ops: its ops take their forward lines from the graph torch logs from the cache entry
(``artifacts.CachedBackward``), their modules are lost, and the region says so. One that cannot be read at all
(another backend, a custom op) is described by a one-line reason, never an error.
"""

from __future__ import annotations

import re
import weakref
from typing import Any

from backstep.engine.compiled.artifacts import CompileKey, CompileLog

NAME = "CompiledFunctionBackward"
MAX_OPS = 4000  # ops listed per region; a longer backward says how many were left out
_PREFIX = re.compile(r"^L\['[^']*'\]\.?")
_ITEM = re.compile(r"\._modules\['([^']*)'\]|\[(\d+)\]")
_cache: weakref.WeakKeyDictionary[type, dict[str, Any]] = weakref.WeakKeyDictionary()


def module_path(stack: Any) -> str | None:
    """``{"id": ("L['self'].blocks.1.attn", cls)}``'s innermost path, as ``blocks.1.attn``."""
    if not isinstance(stack, dict) or not stack:
        return None
    last = list(stack.values())[-1]
    path = last[0] if isinstance(last, tuple) and last else None
    if not isinstance(path, str):
        return None
    path = _ITEM.sub(lambda m: "." + (m.group(1) or m.group(2)), path)
    return _PREFIX.sub("", path) or None


def forward_op(meta: dict[str, Any]) -> str | None:
    """The name of the forward graph node this backward op differentiates (or recomputes)."""
    stack = meta.get("fwd_source_fn_stack") or meta.get("source_fn_stack")
    if isinstance(stack, list) and stack and isinstance(stack[-1], tuple) and stack[-1]:
        return str(stack[-1][0])
    return None


def describe(node: Any, log: CompileLog | None) -> dict[str, Any]:
    """The region behind ``node``: {"aot_id", "function", "ops", "reason"}, read once per
    region (its class lives as long as its compiled code)."""
    cls = getattr(node, "_forward_cls", None)
    if cls is None or not hasattr(cls, "_aot_id"):
        return {"aot_id": None, "function": None, "ops": [],
                "reason": "not an AOTAutograd region: its backward graph is not readable"}
    known = _cache.get(cls)
    if known is not None:
        return known
    try:
        found = _read(cls, log)
    except Exception as exc:  # noqa: BLE001 - a region we cannot read is one opaque node
        found = {"aot_id": getattr(cls, "_aot_id", None), "function": None, "ops": [],
                 "reason": f"backward graph not readable ({type(exc).__name__})"}
    _cache[cls] = found
    return found


def _read(cls: type, log: CompileLog | None) -> dict[str, Any]:
    aot_id = cls._aot_id  # type: ignore[attr-defined]
    info = getattr(cls, "_lazy_backward_info", None)
    graph = getattr(info, "bw_module", None)
    reason = None
    cached = None
    if graph is None and callable(getattr(info, "bw_module_fn", None)):
        graph = info.bw_module_fn()  # type: ignore[union-attr]  # a copy, unpickled
        cached = log.cached.get(aot_id) if log is not None else None
        reason = ("loaded from torch's compile cache: ops without their modules"
                  if cached is not None else
                  "loaded from torch's compile cache: ops without their forward lines")
    if graph is None:
        return {"aot_id": aot_id, "function": None, "ops": [],
                "reason": "torch kept no backward graph for this region"}
    context = getattr(info, "saved_compile_context", None)
    key = _key(getattr(context, "compile_id", None)) or (cached.key if cached else None)
    compiled = log.graph(key) if log is not None else None
    sources = compiled.sources() if compiled is not None else {}
    if compiled is None and reason is None:
        reason = "torch's compile log was not seen: ops without their forward lines"
    nodes = [n for n in graph.graph.nodes if n.op not in ("placeholder", "output")]
    by_position = (cached.sources([_target(n.target) for n in nodes]) if cached is not None
                   else [(None, None)] * len(nodes))  # a cache hit's names and lines, printed
    printed = dict(zip(map(id, nodes), by_position, strict=True))
    ops: list[dict[str, Any]] = []
    count = 0
    for fx_node in graph.graph.nodes:
        if fx_node.op != "call_function":
            continue
        count += 1
        if len(ops) >= MAX_OPS:
            continue
        meta = fx_node.meta
        fwd = forward_op(meta)
        name, line = printed[id(fx_node)]
        ops.append({
            "name": name or fx_node.name,
            "op": _target(fx_node.target),
            "module": module_path(meta.get("fwd_nn_module_stack") or meta.get("nn_module_stack")),
            "forward": fwd,
            "source": sources.get(fwd) if fwd is not None else line,
        })
    found: dict[str, Any] = {"aot_id": aot_id,
                             "function": compiled.function if compiled is not None else None,
                             "compile_id": f"{key[0]}/{key[1]}" if key is not None else None,
                             "ops": ops, "reason": reason}
    if count > len(ops):
        found["ops_left_out"] = count - len(ops)
    return found


def _key(compile_id: Any) -> CompileKey | None:
    frame, attempt = (getattr(compile_id, "frame_id", None),
                      getattr(compile_id, "frame_compile_id", None))
    return (frame, attempt) if isinstance(frame, int) and isinstance(attempt, int) else None


def _target(target: Any) -> str:
    """``aten.mm.default`` for an OpOverload, the callable's name for anything else."""
    if isinstance(target, str):
        return target
    name = getattr(target, "__name__", None)
    text = str(target)
    return text if "." in text and " " not in text else (name or text)
