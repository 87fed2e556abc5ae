"""The state of one backward pass, and the small per-pass helpers the capture modules share.

A ``Pass`` holds a pass's graph, which nodes have run, and what waits to be written; the hook
factories gate every hook on its pass being active, under the pass's lock.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

from backstep.engine import device_checks
from backstep.engine.graph import Graph
from backstep.engine.summary import SummaryBatch

BATCH_NODES = 256
BATCH_BYTES = 8 << 20
RETAINED_KEY = "backstep.retained_by"
HELD_NODES = 64  # gradients kept for on-demand tensor views while the live UI steps
ACCUMULATE = "torch::autograd::AccumulateGrad"


class Pass:
    """One backward pass: its graph, what has run, and what is waiting to be written."""

    def __init__(self, number: int, parent: int | None, api: str, graph: Graph) -> None:
        self.number = number
        self.parent = parent
        self.api = api
        self.graph = graph
        self.active = True
        self.ran = [0] * len(graph)  # step number once run, else 0
        self.completed = 0
        self.current: int | None = None  # entered (pre-hook) but not finished
        self.handles: list[Any] = []
        self.records: list[tuple[Any, ...]] = []
        self.batch = SummaryBatch()
        self.leaf_names: dict[int, str] = {}
        self.leaf_order: list[int] = []  # the leaves' node ids in model order (pass_begin's leaves)
        self.before: dict[int, dict[str, Any] | None] = {}  # leaf index -> .grad summary at start
        self.retained: list[tuple[Any, int, str, dict[str, Any] | None]] = []
        # leaf index -> the sharded parameter an FSDP leaf's unsharded one stands for
        self.shards: dict[int, Any] = {}
        self.stepping = False
        self.finishing = False
        self.record = False  # summaries and node events for every node
        self.announced = False  # pass_begin written
        self.has_pre = False
        self.has_post = False
        self.post_on: list[bool] | None = None  # which nodes carry a post-hook
        self.leaf: list[bool] | None = None  # which nodes are AccumulateGrad (with post-hooks)
        self.partial = False  # some nodes run without hooks: their steps come from the replay
        self.options: dict[str, Any] = {}
        self.announced_stop = False
        self.annotated = False
        self.held: dict[int, tuple[Any, Any]] = {}  # node id -> (grad_outputs, grad_inputs)
        # A pass's nodes may run on several threads at once (CPU and CUDA device threads): its
        # hooks take turns, and a paused hook lets the others go while it waits.
        self.lock = threading.RLock()
        self.checks: device_checks.GradientChecks | None = None  # gradient checks in flight
        self.thread: int | None = None  # ident of the thread that announced the pass
        self.memory: Any = None  # capture/memory.PassMemory, once its memory event is out



# Backward nodes whose outgoing gradients are their one incoming gradient rearranged: viewed,
# copied, sliced, or padded with zeros. No value is computed there, so a NaN cannot be born in
# them and no outgoing gradient has a larger norm than the incoming one.
_PASSTHROUGH = frozenset({
    "AliasBackward0", "CatBackward0", "CloneBackward0", "DiagonalBackward0", "FlipBackward0",
    "NarrowBackward0", "PermuteBackward0", "ReshapeAliasBackward0", "RollBackward0",
    "SelectBackward0", "SliceBackward0", "SqueezeBackward0", "SqueezeBackward1",
    "SqueezeBackward2", "SqueezeBackward3", "SqueezeBackward4", "StackBackward0", "TBackward0",
    "TransposeBackward0", "TransposeBackward1", "UnsafeViewBackward0", "UnsqueezeBackward0",
    "ViewBackward0", "ViewAsComplexBackward0", "ViewAsRealBackward0", ACCUMULATE,
})


def gradient_nodes(p: Pass) -> list[bool] | None:
    """Which nodes a pass that only checks gradient breakpoints must hook, or None for all.

    A pass-through node (``_PASSTHROUGH``; AccumulateGrad has no outgoing gradient) can be left
    bare when its incoming gradient is exactly what its one consumer produced, and so was already
    checked there: one in-graph consumer edge, not a root. Passes that prune nodes
    (``inputs=``, ``autograd.grad``) hook everything, so the engine's order stays replayable.
    """
    if p.api != "backward" or p.options.get("inputs"):
        return None
    graph = p.graph
    consumers = [0] * len(graph)
    for out in graph.edges:
        for j in out:
            if j is not None:
                consumers[j] += 1
    for root in p.options.get("roots") or ():
        consumers[root] = 2
    return [not (name in _PASSTHROUGH and consumers[i] == 1 or name == ACCUMULATE)
            for i, name in enumerate(graph.names)]


def freeze_gc() -> bool:
    """Move every existing object out of the collector's reach for the length of a recorded pass.

    Recording allocates a few dicts per node; each full collection that triggers would walk every
    object the program has (torch alone tracks ~150,000), which measured 40% of a trace's cost.
    The pass's own objects are short-lived and acyclic: the youngest generation's threshold is
    raised too, so they are not walked every 700 allocations (7% of a trace). Frozen objects are
    only exempt until ``unfreeze_gc()`` at pass end, which also puts the thresholds back: what
    the program computes is unchanged, only when cyclic garbage is collected. Left alone when the
    program froze objects itself or turned the collector off.

    Passes nest (reentrant checkpoint runs a backward inside a node): the thread whose pass
    froze the heap counts its nested passes in, and its outermost pass thaws it. A pass on
    another thread meanwhile neither freezes nor thaws (as when it found the heap frozen by
    the program): one long pass never keeps the heap frozen for another, so passes that keep
    overlapping on two threads cannot leave old garbage uncollected. No pass asks
    ``gc.get_freeze_count()`` while backstep's freeze holds: it walks every frozen object, the
    whole heap once a pass has frozen it (38 ms a call on a BERT loop).
    Returns whether the caller must call ``unfreeze_gc()`` when its pass ends.
    """
    global _OWNER, _DEPTH
    with _GC_LOCK:
        if _OWNER is not None:
            if _OWNER != threading.get_ident():
                return False  # another thread's pass froze the heap, and thaws it
            _DEPTH += 1
            return True
        if not gc.isenabled() or gc.get_freeze_count():
            return False
        gc.freeze()
        _OWNER, _DEPTH = threading.get_ident(), 1
        _THRESHOLDS[:] = gc.get_threshold()
        first = _THRESHOLDS[0]
        if 0 < first < PASS_GC_THRESHOLD:
            gc.set_threshold(PASS_GC_THRESHOLD, *_THRESHOLDS[1:])
        return True


def unfreeze_gc() -> None:
    """End a pass that ``freeze_gc()`` counted in (on its thread); the outermost thaws."""
    global _OWNER, _DEPTH
    with _GC_LOCK:
        if _OWNER != threading.get_ident():
            return
        _DEPTH -= 1
        if _DEPTH > 0:
            return
        _OWNER = None
        if _THRESHOLDS and gc.get_threshold()[0] == PASS_GC_THRESHOLD:
            gc.set_threshold(*_THRESHOLDS)
        gc.unfreeze()


PASS_GC_THRESHOLD = 100_000
_THRESHOLDS: list[int] = []
_OWNER: int | None = None  # the thread whose pass froze the heap, while it is frozen
_DEPTH = 0  # that thread's passes in flight: the outer one and those nested in it
_GC_LOCK = threading.Lock()


class Retained:
    """Lives in the metadata of every node of a retained graph; dies with the last of them.
    Its ``state`` outlives it, for the finalizer that reports the release."""

    __slots__ = ("state", "__weakref__")

    def __init__(self, number: int) -> None:
        self.state = {"reused": False, "bytes": 0, "pass": number}


def grads_device(grads: tuple) -> str | None:
    """The device of a node's first gradient (where it runs), or None."""
    for g in grads:
        if g is not None:
            return str(g.device)
    return None


def error_message(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def pre_hook(p: Pass, i: int, before: Any) -> Any:
    def hook(grad_outputs: tuple) -> tuple | None:
        """None (autograd's own gradients) unless the person edited them at a stop here."""
        with p.lock:
            if p.active:
                return before(p, i, grad_outputs)
        return None

    return hook
