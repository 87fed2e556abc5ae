"""What torch.compile says about each graph it compiles, read from torch's own structured log.

Dynamo writes every graph it captures to the structured trace logger (``TORCH_TRACE`` uses the
same logger) as ``dynamo_output_graph``: the graph as Python, each node under a
``# File: x.py:12 in forward, code: ...`` comment naming the forward line it came from, and
``dynamo_start``, the stack of the frame it compiles. A handler on that logger keeps those two
per compile id (``frame_id``, ``frame_compile_id``). Nothing about what is compiled changes: the
backend, its kernels and the numbers are the user's; a logger with a handler only makes torch
format the payloads it would write for ``TORCH_TRACE``.

A region loaded from torch's AOTAutograd cache has a backward graph without node metadata, but
torch still logs the graph as it printed it when it compiled it (``aot_backward_graph``, from
the cache entry): each op under the ``# File:`` comment of the forward line it came from. That
payload is kept per AOT id (only on a cache hit) so such a region keeps its forward lines.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

CompileKey = tuple[int, int]  # (frame_id, frame_compile_id)

_FILE = re.compile(r"^\s*# File: (.*):(\d+) in ([^,]+), code: (.*)$")
_NO_TRACE = re.compile(r"^\s*# No stacktrace found")
_FRAME = re.compile(r'^\s*File "(.*)", line (\d+), in (.*)$')
_OURS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_NODE = re.compile(r"^\s+([A-Za-z_]\w*)(?:: \"[^\"]*\")? = ")
_OP = re.compile(r"= torch\.ops\.([A-Za-z_][\w.]*)\(")
_GETITEM = re.compile(r"= [A-Za-z_]\w*\[\d+\]")
KEPT = 64  # compile ids kept: a script that recompiles without end keeps only the latest


@dataclass
class CompiledGraph:
    """One graph Dynamo compiled: where its frame is, and each node's forward line."""

    function: dict[str, Any] | None = None  # {"file", "line", "name"} of the compiled frame
    payload: str | None = None  # dynamo_output_graph, parsed on first use
    _sources: dict[str, dict[str, Any]] | None = field(default=None, repr=False)

    def sources(self) -> dict[str, dict[str, Any]]:
        """Node name -> {"file", "line", "code", "function"} as the graph's comments say."""
        if self._sources is None:
            self._sources = parse_sources(self.payload or "")
            self.payload = None
        return self._sources


def logged_graph(frame: FrameType | None) -> Any:
    """The GraphModule whose ``dynamo_output_graph`` is being logged: a local ``gm`` of the
    frame that logs it (its nodes keep whole stacks; the payload prints only the innermost
    frame, which is backstep's own torch-function mode when provenance is on)."""
    for _ in range(12):
        if frame is None:
            return None
        gm = frame.f_locals.get("gm")
        if gm is not None and hasattr(gm, "graph") and hasattr(gm.graph, "nodes"):
            return gm
        frame = frame.f_back
    return None


def sources_of(gm: Any) -> dict[str, dict[str, Any]]:
    """Node name (and the name it was created under, which the backward graph's ops refer
    to) -> the innermost frame of its stack outside backstep (Dynamo leaves torch's out)."""
    out: dict[str, dict[str, Any]] = {}
    if gm is None:
        return out
    for node in gm.graph.nodes:
        trace = node.meta.get("stack_trace")
        if isinstance(trace, str):
            source = _innermost(trace)
            if source is not None:
                out[node.name] = source
                created = node.meta.get("source_fn_stack")  # the name a renamed node began with
                if isinstance(created, list) and created and isinstance(created[-1], tuple):
                    out.setdefault(str(created[-1][0]), source)
    return out


def traced_function(gm: Any) -> dict[str, Any] | None:
    """The user's function Dynamo compiled: the outermost frame of its graph's first stack
    (Dynamo's own frame, for a compiled module, is torch's wrapper around it)."""
    for node in gm.graph.nodes if gm is not None else ():
        trace = node.meta.get("stack_trace")
        frames = _frames(trace) if isinstance(trace, str) else []
        if frames:
            first = frames[0]
            return {"file": first["file"], "line": first["line"], "name": first["function"]}
    return None


def _frames(trace: str) -> list[dict[str, Any]]:
    """The frames of a formatted stack, outermost first, backstep's own left out."""
    found = []
    lines = trace.splitlines()
    for i, line in enumerate(lines):
        frame = _FRAME.match(line)
        if frame is None or frame.group(1).startswith(_OURS):
            continue
        code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) \
            else ""
        found.append({"file": frame.group(1), "line": int(frame.group(2)), "code": code,
                      "function": frame.group(3)})
    return found


def _innermost(trace: str) -> dict[str, Any] | None:
    frames = _frames(trace)
    return frames[-1] if frames else None


def parse_statements(payload: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Each node of a graph printed by ``print_readable``, in order: its name, its line, and
    the forward line in the ``# File:`` comment above it (None under "No stacktrace")."""
    out: list[tuple[str, str, dict[str, Any] | None]] = []
    current: dict[str, Any] | None = None
    for line in payload.splitlines():
        found = _FILE.match(line)
        if found is not None:
            current = {"file": found.group(1), "line": int(found.group(2)),
                       "code": found.group(4).strip(), "function": found.group(3)}
            continue
        if _NO_TRACE.match(line):
            current = None
            continue
        node = _NODE.match(line)
        if node is not None:
            out.append((node.group(1), line, current))
    return out


def parse_sources(payload: str) -> dict[str, dict[str, Any]]:
    """The forward line above each node of a graph printed by ``print_readable``."""
    out: dict[str, dict[str, Any]] = {}
    for name, _, source in parse_statements(payload):
        if source is not None:
            out.setdefault(name, source)
    return out


@dataclass
class CachedBackward:
    """A region loaded from torch's cache: its compile id and its printed backward graph."""

    key: CompileKey
    payload: str | None
    _statements: list[tuple[str, str, dict[str, Any] | None]] | None = field(default=None,
                                                                            repr=False)

    def sources(self, ops: list[str]) -> list[tuple[str | None, dict[str, Any] | None]]:
        """The name and forward line of each of ``ops`` (the graph's nodes in order, as
        ``aten.mm.default`` or a name): matched by position with the printed graph, whose names
        and lines the cache's copy does not keep; none when the two do not line up op for op."""
        if self._statements is None:
            self._statements = parse_statements(self.payload or "")
            self.payload = None
        printed = self._statements
        if len(printed) == len(ops) and not any(
                op.startswith("aten.") and f"torch.ops.{op}(" not in line
                for op, (_, line, _) in zip(ops, printed, strict=True)):
            return [_named(name, source) for name, _, source in printed]
        return self._aligned(ops, printed)

    @staticmethod
    def _aligned(ops: list[str], printed: list[tuple[str, str, dict[str, Any] | None]]
                 ) -> list[tuple[str | None, dict[str, Any] | None]]:
        """The ops matched with the printed graph's where the two differ by constants (the
        cache's copy of a graph warmed by another process holds ``_tensor_constant0`` where the
        printed one has the ``aten.full``, ``iota`` or ``scalar_tensor`` that made it): every
        op of ``ops`` must be found, in order, as the same op, and the printed nodes left over
        be few enough for the constants to account for (two each); then each op gets its line,
        and a constant none. Otherwise none gets one (nothing is guessed)."""
        out: list[tuple[str | None, dict[str, Any] | None]] = [(None, None)] * len(ops)
        mine = [op if op.count(".") >= 2 or op == "getitem" else object() for op in ops]
        theirs = [found.group(1) if (found := _OP.search(line)) else
                  "getitem" if _GETITEM.search(line) else object() for _, line, _ in printed]
        required = sum(1 for op in ops if op.count(".") >= 2)
        blocks = difflib.SequenceMatcher(None, mine, theirs, autojunk=False).get_matching_blocks()
        matched = sum(1 for block in blocks for k in range(block.size)
                      if ops[block.a + k].count(".") >= 2)
        constants = sum(1 for op in ops if op.startswith("_tensor_constant"))
        extra = len(printed) - sum(block.size for block in blocks)  # printed, unmatched
        if not required or matched != required or extra > 2 * constants:
            return out  # an op missing, or printed nodes no folded constant accounts for
        for block in blocks:
            for k in range(block.size):
                name, _, source = printed[block.b + k]
                out[block.a + k] = _named(name, source)
        return out


def _named(name: str, source: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
    """A printed node's name and forward line (none of backstep's own)."""
    return name, None if source is None or str(source.get("file", "")).startswith(_OURS) \
        else source


def cached_aot_id(frame: FrameType | None) -> int | None:
    """The AOT id of a graph torch logs from its cache (``_log_cached_graphs``'s
    ``aot_config``), or None when the log is not a cache hit's."""
    for _ in range(16):
        if frame is None:
            return None
        if frame.f_code.co_name == "_log_cached_graphs":
            aot_id = getattr(frame.f_locals.get("aot_config"), "aot_id", None)
            return aot_id if isinstance(aot_id, int) else None
        frame = frame.f_back
    return None


class CompileLog(logging.Handler):
    """A handler on torch's structured trace logger that keeps what regions need, per compile."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.graphs: dict[CompileKey, CompiledGraph] = {}
        self.strings: dict[int, str] = {}  # torch interns file names: index -> name
        self.cached: dict[int, CachedBackward] = {}  # AOT id -> a cache hit's backward graph
        self._guard = threading.Lock()
        self._logger: logging.Logger | None = None
        self._level: int | None = None  # the logger's level, when install had to lower it

    def install(self) -> None:
        """Listen on torch's trace logger (left as it was, level included, by ``uninstall``)."""
        if self._logger is not None:
            return
        try:
            from torch._logging._internal import trace_log
        except ImportError:  # a torch without structured logs: regions say so
            return
        self._logger = trace_log
        if trace_log.level != logging.DEBUG:  # torch sets DEBUG when it sets its logs up
            self._level = trace_log.level
            trace_log.setLevel(logging.DEBUG)
        trace_log.addHandler(self)

    def uninstall(self) -> None:
        logger, self._logger = self._logger, None
        if logger is None:
            return
        logger.removeHandler(self)
        if self._level is not None and logger.level == logging.DEBUG:
            logger.setLevel(self._level)
        self._level = None

    def graph(self, key: CompileKey | None) -> CompiledGraph | None:
        return self.graphs.get(key) if key is not None else None

    def emit(self, record: logging.LogRecord) -> None:  # never raises into torch's compile
        try:
            self._keep(getattr(record, "metadata", None), getattr(record, "payload", None))
        except Exception:  # noqa: BLE001 - a log we cannot read is a region without lines
            pass

    def _keep(self, metadata: Any, payload: Any) -> None:
        if not isinstance(metadata, dict):
            return
        if "str" in metadata:  # ["file name", index]
            item = metadata["str"]
            if isinstance(item, (list, tuple)) and len(item) == 2:
                self.strings[int(item[1])] = str(item[0])
            return
        if "dynamo_start" not in metadata and "dynamo_output_graph" not in metadata \
                and "aot_backward_graph" not in metadata:
            return
        frame, attempt = metadata.get("frame_id"), metadata.get("frame_compile_id")
        if not isinstance(frame, int) or not isinstance(attempt, int):
            return
        if "aot_backward_graph" in metadata:
            aot_id = cached_aot_id(sys._getframe(1))
            if aot_id is not None and isinstance(payload, str):
                with self._guard:
                    self.cached[aot_id] = CachedBackward((frame, attempt), payload)
                    while len(self.cached) > KEPT:
                        del self.cached[next(iter(self.cached))]
            return
        with self._guard:
            graph = self.graphs.get((frame, attempt))
            if graph is None:
                graph = self.graphs[(frame, attempt)] = CompiledGraph()
                while len(self.graphs) > KEPT:
                    del self.graphs[next(iter(self.graphs))]
            if "dynamo_start" in metadata:
                graph.function = graph.function or self._function(metadata["dynamo_start"])
                return
            gm = logged_graph(sys._getframe(1))
            graph._sources = sources_of(gm)
            graph.function = traced_function(gm) or graph.function
            if not graph._sources and isinstance(payload, str):
                graph.payload, graph._sources = payload, None

    def _function(self, start: Any) -> dict[str, Any] | None:
        """The compiled frame: the innermost frame of ``dynamo_start``'s stack."""
        stack = start.get("stack") if isinstance(start, dict) else None
        if not stack or not isinstance(stack[-1], dict):
            return None
        frame = stack[-1]
        name = frame.get("filename")
        if isinstance(name, int):
            name = self.strings.get(name)
        return {"file": name if isinstance(name, str) else None,
                "line": frame.get("line") if isinstance(frame.get("line"), int) else None,
                "name": str(frame.get("name")) if frame.get("name") is not None else None}
