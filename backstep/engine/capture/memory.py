"""Where a pass's memory goes: the activation bytes its graph holds, and graphs kept alive.

At a recorded pass's start (``memory_event``) every node's saved tensors are read once, as
storages: ``untyped_storage().data_ptr()`` and ``.nbytes()``, so views and tensors that share
a storage (tanh's ``result`` is the next Linear's ``mat1``) count once. The storages of the
graph's leaves (parameters, and inputs that require grad) are left out: they outlive the graph.
Each storage goes to the node whose forward made it: the ``grad_fn`` a saved input carries, or
the node itself for a saved output (``result``); its module and forward line are that node's.
A storage no node of the graph made (the batch, the target) goes to the line of the first node
that saved it, with no module. Lines are not repeated here: a storage names its node (``node``,
else the first of ``held_by``), whose line ``pass_begin`` lists. Each storage says the names
each of its holders saves it under (``names``, beside ``held_by``), and ``leaf_saved`` which
saved tensors are leaves' storages: the Saved panel tells from them what each saved tensor
costs and which share a storage, read here once a pass rather than in every node's hook.

Only ints and strings are kept between the start and the end of a pass (storage sizes and the
local indices of the nodes that hold each one), never a tensor or a node. At the end
(``end_event``) a storage is released at the step of the last of its nodes to run, unless the
pass retained the graph or one of them never ran; ``held`` is the bytes still held after each
step that released something.

Graphs kept alive (``KeptGraphs``): a top-level pass that frees its graph (no ``retain_graph``,
no ``create_graph``) leaves a marker in its roots' ``metadata``; the marker dies with the root
node. Any marker still alive at a later pass's end is a graph something still holds (the FAQ's
``total_loss += loss``, ``losses.append(loss)``). Its count, and the variable of the caller's
frame that reaches one, go in ``memory_end``; ``diagnostics/kept_alive`` judges them.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from backstep.engine.graph import SOURCE_KEY
from backstep.engine.pending_tags import metadata as node_metadata
from backstep.engine.saved import saved_tensors

ACCUMULATE = "torch::autograd::AccumulateGrad"
KEPT_KEY = "backstep.kept_graph"
SEARCH_NODES = 4096  # nodes walked per variable when looking for what keeps a graph
SEARCH_BUDGET = 65536  # nodes walked in all, per search
SEARCH_ITEMS = 256  # items of a list, tuple or dict looked into


class PassMemory:
    """What a pass's end needs of its start: storage sizes and their holders (local indices)."""

    __slots__ = ("sizes", "holders")

    def __init__(self, sizes: list[int], holders: list[list[int]]) -> None:
        self.sizes = sizes
        self.holders = holders


def cuda_figures() -> dict[str, int] | None:
    """The CUDA allocator's bytes now and at its peak (the allocator's own counters: no
    device sync); None without an initialised CUDA."""
    try:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        return {"allocated": int(torch.cuda.memory_allocated()),
                "peak": int(torch.cuda.max_memory_allocated())}
    except Exception:  # noqa: BLE001 - informative only
        return None


def memory_event(number: int, graph: Any, listed: list[dict[str, Any]]
                 ) -> tuple[dict[str, Any], PassMemory]:
    """The ``memory`` event of a pass at its start (``listed``: pass_begin's nodes)."""
    nodes, names, index, ids = graph.nodes, graph.names, graph.index, graph.ids
    leaves: set[int] = set()
    for i, name in enumerate(names):
        if name == ACCUMULATE:
            try:
                leaves.add(nodes[i].variable.untyped_storage().data_ptr())
            except Exception:  # noqa: BLE001 - a leaf without storage (meta, sparse)
                pass
    order: dict[int, int] = {}  # storage pointer -> its index in ``found``
    # [bytes, maker index or None, first saver, holders, the names each holder saves it as]
    found: list[list[Any]] = []
    left_out = 0
    left_seen: set[int] = set()
    left_saved: dict[int, list[Any]] = {}  # node index -> [its id, the names of leaves it saves]
    for i, node in enumerate(nodes):
        for name, data in saved_tensors(node):
            try:
                storage = data.untyped_storage()
                pointer = storage.data_ptr()
                size = storage.nbytes()
            except Exception:  # noqa: BLE001 - sparse, nested, a subclass without storage
                continue
            if pointer in leaves:
                if pointer not in left_seen:
                    left_seen.add(pointer)
                    left_out += size
                saver = left_saved.get(i)
                if saver is None:
                    left_saved[i] = [ids[i], name]
                else:
                    saver.append(name)
                continue
            if not size:
                continue
            at = order.get(pointer)
            fn = data.grad_fn
            maker = index.get(fn) if fn is not None else (i if name.startswith("result") else None)
            if at is None:
                order[pointer] = len(found)
                found.append([size, maker, i, [i], [[name]]])
            else:
                entry = found[at]
                if entry[1] is None:
                    entry[1] = maker
                if entry[3][-1] != i:
                    entry[3].append(i)
                    entry[4].append([name])
                else:
                    entry[4][-1].append(name)
    storages = []
    for size, maker, _first, holders, saved_as in found:
        storage: dict[str, Any] = {"bytes": size}
        if maker is not None:  # its module and node type; its line is the node's (pass_begin)
            where = listed[maker]
            if where.get("module") is not None:
                storage["module"] = where["module"]
            storage["op"] = where.get("name")
            storage["node"] = ids[maker]
        storage["held_by"] = [ids[j] for j in holders]
        storage["names"] = saved_as
        storages.append(storage)
    event = {"event": "memory", "pass": number, "bytes": sum(s[0] for s in found),
             "storages": storages, "leaves": left_out, "leaf_saved": list(left_saved.values()),
             "cuda": cuda_figures()}
    return event, PassMemory([s[0] for s in found], [s[3] for s in found])


def end_event(number: int, memory: PassMemory, ran: list[int], retained: bool,
              kept: dict[str, Any] | None) -> dict[str, Any]:
    """The ``memory_end`` event: when each storage was released, and what stayed held."""
    freed: list[int | None] = []
    for holders in memory.holders:
        steps = [ran[j] for j in holders]
        freed.append(None if retained or not all(steps) else max(steps))
    total = sum(memory.sizes)
    by_step: dict[int, int] = {}
    for size, step in zip(memory.sizes, freed, strict=True):
        if step is not None:
            by_step[step] = by_step.get(step, 0) + size
    held = []
    for step in sorted(by_step):
        total -= by_step[step]
        held.append([step, total])
    return {"event": "memory_end", "pass": number, "freed": freed, "held": held,
            "cuda": cuda_figures(), "kept": kept}


class _Marker:
    """Lives in a freed graph's roots' metadata; dies with the last of them."""

    __slots__ = ("number", "__weakref__")

    def __init__(self, number: int) -> None:
        self.number = number


class KeptGraphs:
    """Earlier passes' graphs still alive (see the module docstring). Holds weak references
    to markers only."""

    def __init__(self) -> None:
        self._alive: dict[int, weakref.ref] = {}  # pass -> its marker
        self._held: dict[int, int] = {}  # pass -> bytes its graph did not release
        self._last = 0
        self._by: dict[str, Any] | None = None

    def _gone(self, number: int) -> None:
        self._alive.pop(number, None)
        self._held.pop(number, None)

    def end(self, number: int, graph: Any, roots: list[int], frees: bool, held: int,
            frame: Any) -> dict[str, Any] | None:
        """At a top-level pass's end: mark its graph (when it frees it) and say how many
        earlier graphs are alive, their bytes and what keeps one (None when none is)."""
        kept = [n for n in list(self._alive) if n < number]
        answer = None
        if kept:
            count = len(kept)
            if count > self._last and count >= 3 and (self._by is None or count <= 16):
                self._by = holder(frame, {n for n in kept}) or self._by
            answer = {"graphs": count, "bytes": sum(self._held.get(n, 0) for n in kept),
                      "passes": kept[-8:], "by": self._by}
            self._last = count
        else:
            self._last, self._by = 0, None
        if frees and roots:
            marker = _Marker(number)
            for r in roots:
                graph.nodes[r].metadata[KEPT_KEY] = marker
            self._alive[number] = weakref.ref(marker, lambda _r, n=number: self._gone(n))
            if held:
                self._held[number] = held
        return answer


def holder(frame: Any, passes: set[int]) -> dict[str, Any] | None:
    """The first variable of ``frame`` (and its callers) whose tensors reach the root of one
    of ``passes``: {name, source} (the line that made the tensor's grad_fn), or None. Walks
    at most ``SEARCH_BUDGET`` nodes in all."""
    budget = [SEARCH_BUDGET]
    while frame is not None and budget[0] > 0:
        for scope in (frame.f_locals, frame.f_globals):
            for name, value in list(scope.items())[:4096]:
                fn = _reaches(value, passes, budget)
                if fn is not None:
                    source = node_metadata(fn).get(SOURCE_KEY) if fn is not True else None
                    if source is None:
                        code = frame.f_code
                        source = {"file": code.co_filename, "line": frame.f_lineno,
                                  "code": None}
                    return {"name": str(name)[:200], "source": source,
                            "kind": type(value).__name__}
        frame = frame.f_back
        if frame is not None and frame.f_code.co_filename.startswith("<frozen"):
            break
    return None


def _reaches(value: Any, passes: set[int], budget: list[int]) -> Any:
    """The grad_fn of ``value`` (a tensor, or one in a list, tuple or dict) from which a
    marked root of ``passes`` is reachable; True for a container; else None."""
    if isinstance(value, torch.Tensor):
        fn = value.grad_fn
        return fn if fn is not None and _walk(fn, passes, budget) else None
    if isinstance(value, (list, tuple, dict)):
        items = value.values() if isinstance(value, dict) else value
        for k, item in enumerate(items):
            if k >= SEARCH_ITEMS:
                break
            if isinstance(item, torch.Tensor) and item.grad_fn is not None \
                    and _walk(item.grad_fn, passes, budget):
                return True
    return None


def _walk(fn: Any, passes: set[int], budget: list[int]) -> bool:
    seen = {fn}
    stack = [fn]
    while stack and len(seen) < SEARCH_NODES and budget[0] > 0:
        budget[0] -= 1
        node = stack.pop()
        try:
            marker = node.metadata.get(KEPT_KEY)
        except Exception:  # noqa: BLE001
            marker = None
        if marker is not None and marker.number in passes:
            return True
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                stack.append(child)
    return False
