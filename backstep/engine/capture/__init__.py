"""Capture every backward pass, node by node.

``torch.autograd.backward``, ``Tensor.backward`` and ``torch.autograd.grad`` all go through
``torch.autograd._engine_run_backward``; backstep replaces that one name while installed. For each
pass it walks the graph from the roots, then installs hooks only where something needs them:

- recording (a trace, or the live UI): one post-hook per node, which sees both the incoming and
  outgoing gradients; summaries are batched and computed a few hundred nodes at a time;
- stepping or static breakpoints: a pre-hook per node, to stop before it runs;
- nothing can stop and nothing records: no hooks, no walk — the pass costs one function call.

Every handle is removed at pass end and every hook is gated on its pass being active, so a hook
left on a retained graph never blocks a later, unrelated backward. Hooks never return a value.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import weakref
from typing import Any

import torch

from backstep.engine import graph as graph_ids
from backstep.engine import naming, sharded
from backstep.engine.capture.hooks import Hooks, gradient_trip
from backstep.engine.capture.listings import Listings
from backstep.engine.capture.memory import KeptGraphs, memory_event
from backstep.engine.capture.output import Output
from backstep.engine.capture.passes import (
    ACCUMULATE,
    RETAINED_KEY,
    Pass,
    freeze_gc,
    unfreeze_gc,
)
from backstep.engine.capture.values import TensorValues
from backstep.engine.compiled.regions import Regions
from backstep.engine.controller import Controller
from backstep.engine.graph import MODULE_KEY, SOURCE_KEY, Graph, display_name, gradient_edge
from backstep.engine.pending_tags import metadata as node_metadata
from backstep.engine.recorder import Sink
from backstep.engine.summary import SummaryBatch
from backstep.engine.torch_api import compile_tracing
from backstep.events.text import Encoded, compact_json

__all__ = ["Capture", "Pass", "gradient_trip"]

_compile_tracing = compile_tracing(torch)
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_BACKSTEP_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_DEMOS_DIR = _BACKSTEP_DIR + "_demos" + os.sep  # shipped demo scripts: user code
# the frames from the backward API down to its engine call: torch.autograd.backward/grad,
# Tensor.backward, a tensor subclass's dispatch to them
_API_FILES = frozenset(os.path.join(_TORCH_DIR, name) for name in (
    os.path.join("autograd", "__init__.py"), "_tensor.py", "overrides.py"))
# where libraries live: a retain_graph passed from their code is theirs, not the user's
_LIBRARY_DIRS = tuple(sorted({os.path.abspath(p) + os.sep for key in ("purelib", "platlib",
                                                                       "stdlib", "platstdlib")
                              if (p := sysconfig.get_paths().get(key))}))


def api_caller(frame: Any) -> Any:
    """The frame that called the backward API (``Tensor.backward``, ``torch.autograd.backward``
    or ``grad``), walking out from ``frame``, inside the engine call backstep wraps."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not ((name.startswith(_BACKSTEP_DIR) and not name.startswith(_DEMOS_DIR))
                or name in _API_FILES):
            return frame
        frame = frame.f_back
    return None


def passed_by_library(api: Any) -> bool:
    """Whether the backward call ``api`` is running was made by a library's code (torch's
    ``autograd.functional``, a trainer's), so its arguments are not the user's."""
    if api is None:
        return False
    name = api.f_code.co_filename
    return name.startswith(_TORCH_DIR) or (name.startswith(_LIBRARY_DIRS)
                                           and not name.startswith(_BACKSTEP_DIR))


class Capture(Hooks, Output, TensorValues):
    """Installs the backward wrapper and turns passes into events.

    This module starts and ends passes; the hooks (``hooks``), the events written (``output``)
    and tensor values for the UI (``values``) are mixed in; ``passes`` holds the pass state.
    """

    def __init__(
        self,
        sink: Sink | None,
        controller: Controller | None = None,
        *,
        record: bool = True,
    ) -> None:
        self.sink = sink
        self.controller = controller
        # record every pass (a trace); otherwise only passes that step record their nodes
        self.record = record and sink is not None
        self.passes = 0
        self.breaks_checked: set[str] = set()  # breakpoint specs checked against a pass
        self._local = threading.local()
        self._lock = threading.Lock()
        self._original: Any = None
        self._original_retain: Any = None
        self._retained: dict[int, Any] = {}  # id -> weakref of tensors that called retain_grad
        self._live: dict[int, Pass] = {}
        self._retained_graphs = 0  # retain_graph passes whose graph is still alive
        self._released_queue: list[dict[str, Any]] = []
        # provenance's annotate(roots): completes source/module tags before they are read
        self.annotate: Any = None
        # (thread, autograd sequence number) where provenance started (Provenance.since): a
        # root made on that thread before that number was made before anything was recorded
        self.tagged_since: tuple[int, int] | None = None
        self.listings = Listings()  # pass_begin's listing, reused while the shape repeats
        self.regions = Regions()  # torch.compile's regions, read from its own compile log
        self.kept = KeptGraphs()  # earlier passes' graphs still alive (capture/memory.py)
        if controller is not None:
            controller.tensor_lookup = self._tensor_values

    # -- install / uninstall ----------------------------------------------------------------
    def install(self) -> None:
        if self._original is not None:
            return
        graph_ids.new_session()
        original = torch.autograd._engine_run_backward
        capture = self

        def _engine_run_backward(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
            return capture._run(original, t_outputs, args, kwargs)

        _engine_run_backward.__backstep__ = True  # type: ignore[attr-defined]
        self._original = original
        torch.autograd._engine_run_backward = _engine_run_backward
        # a warning raised inside backward counts its stacklevel without these two frames
        from backstep.engine.provenance import warnings as provenance_warnings

        provenance_warnings.install()
        self.regions.install()
        self._original_retain = torch.Tensor.__dict__.get("retain_grad")
        base_retain = torch.Tensor.retain_grad

        def retain_grad(tensor: torch.Tensor) -> None:
            base_retain(tensor)
            capture._note_retained(tensor)

        retain_grad.__doc__ = base_retain.__doc__
        torch.Tensor.retain_grad = retain_grad  # type: ignore[method-assign]

    def uninstall(self) -> None:
        if self._original is None:
            return
        self.drain()
        self.regions.uninstall()
        torch.autograd._engine_run_backward = self._original
        self._original = None
        from backstep.engine.provenance import warnings as provenance_warnings

        provenance_warnings.uninstall()
        if self._original_retain is None:
            try:
                del torch.Tensor.retain_grad
            except AttributeError:
                pass
        else:
            torch.Tensor.retain_grad = self._original_retain  # type: ignore[method-assign]

    def _note_retained(self, tensor: torch.Tensor) -> None:
        try:
            key = id(tensor)
            retained = self._retained
            retained[key] = weakref.ref(tensor, lambda _r, key=key: retained.pop(key, None))
        except TypeError:
            pass

    # -- one pass ---------------------------------------------------------------------------
    def _run(self, original: Any, t_outputs: Any, args: tuple, kwargs: dict) -> Any:
        if torch.compiler.is_compiling() or _compile_tracing():
            # torch.compile tracing its own backward (AOTAutograd): not one of the user's passes
            return original(t_outputs, *args, **kwargs)
        with self._lock:
            self.passes += 1
            number = self.passes
        controller = self.controller
        if controller is not None:
            controller.check_abort()  # the UI quit: no new pass starts either
        if self._released_queue:
            self.drain()
        live = controller is not None and controller.live()
        if not (self.record or live):
            if self.sink is None:
                return original(t_outputs, *args, **kwargs)
            try:
                return original(t_outputs, *args, **kwargs)
            except Exception as exc:
                self._post_mortem(number, t_outputs, args, kwargs, exc)
                raise
        # the walk and the hooks allocate thousands of objects too: freeze before them. A live
        # pass may stop at its start and then record: frozen too (unfrozen below if it won't),
        # else registering two hooks per node ran the collector over the whole heap again and again
        frozen = (self.record or live) and freeze_gc()
        try:
            p = self._begin(number, t_outputs, args, kwargs, live)
        except Exception:  # noqa: BLE001 - backstep must never break a backward it cannot read
            p = None
        if frozen and (p is None or not p.record):
            unfreeze_gc()
            frozen = False
        if p is None:
            return original(t_outputs, *args, **kwargs)
        stack = self._stack()
        stack.append(p)
        frozen = frozen or (p.record and freeze_gc())
        try:
            result = original(t_outputs, *args, **kwargs)
        except BaseException as exc:
            stack.pop()
            self._end(p, exc)
            if frozen:
                unfreeze_gc()
            raise
        stack.pop()
        self._end(p, None)
        if frozen:
            unfreeze_gc()
        return result

    def _stack(self) -> list[Pass]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _begin(self, number: int, t_outputs: Any, args: tuple, kwargs: dict, live: bool) -> Pass:
        outputs = tuple(t_outputs) if isinstance(t_outputs, (tuple, list)) else (t_outputs,)
        retain_graph = bool(args[1]) if len(args) > 1 else False
        create_graph = bool(args[2]) if len(args) > 2 else False
        inputs = args[3] if len(args) > 3 else None
        accumulate = kwargs.get("accumulate_grad", True)
        roots = [gradient_edge(t) for t in outputs]
        graph = Graph([edge[0] for edge in roots if edge is not None])
        stack = self._stack()
        parent = stack[-1] if stack else None
        if parent is not None:
            self._flush(parent)
        p = Pass(number, parent.number if parent else None, "backward" if accumulate else "grad",
                 graph)
        input_ids = None
        if inputs:
            input_ids = []
            for item in inputs:
                edge = gradient_edge(item)
                index = graph.index.get(edge[0]) if edge else None
                input_ids.append(graph.ids[index] if index is not None else None)
        controller = self.controller
        if live and controller is not None:
            p.stepping = controller.stop_at_pass_start or controller.interrupt
        p.record = self.sink is not None and (self.record or p.stepping)
        caller = naming.user_frame(sys._getframe(1))  # read once: the names come from there too
        p.options = {"retain_graph": retain_graph, "create_graph": create_graph,
                     "caller": naming.frame_source(caller),
                     "roots": [graph.index[e[0]] for e in roots if e is not None],
                     "inputs": input_ids}
        if retain_graph:
            api = api_caller(sys._getframe(1))
            if passed_by_library(api):
                # torch.autograd.functional.jacobian passes retain_graph=True itself: the
                # user's line never asked for it (``retain_graph_by``: the line that did)
                p.options["retain_graph_by"] = naming.frame_source(api)
        if p.record or (live and controller is not None and controller.breakpoints.leaf_names):
            self._name_leaves(p, caller)
        if live and controller is not None and controller.breakpoints.module_globs:
            self._annotate(p)
        if p.record:
            for i in p.before:
                variable = p.shards[i] if i in p.shards else graph.nodes[i].variable
                if variable.grad is not None:
                    p.before[i] = p.batch.add(variable.grad)
            p.retained = self._retained_in(p, caller)
            slots = p.batch.compute() if len(p.batch) else []
            p.before = {i: (slots[s] if isinstance(s, int) else None) for i, s in p.before.items()}
            self._announce(p)
        bp = controller.breakpoints if controller is not None else None
        if self._retained_graphs:
            for i, node in enumerate(graph.nodes):
                if graph.names[i] == ACCUMULATE:
                    continue  # leaves are shared by every graph over the same parameters
                marker = node.metadata.get(RETAINED_KEY)
                if marker is not None:
                    marker.state["reused"] = True
        self._ensure_hooks(
            p,
            pre=live and (p.stepping or bool(bp and bp.static)),
            post=p.record or bool(live and bp and bp.on_gradients),
        )
        self._live[number] = p
        return p

    def _announce(self, p: Pass) -> None:
        """Write ``pass_begin`` (at pass start when recording, else at the first stop)."""
        if p.announced:
            return
        p.announced = True
        p.thread = threading.get_ident()  # node events name their thread only when it differs
        self._annotate(p)
        graph = p.graph
        if not p.leaf_names:
            self._name_leaves(p)
        nodes, listing_text = self.listings.describe(
            graph, p.leaf_names, sharded.comm_points(graph.nodes, graph.names))
        event = Encoded({
            "event": "pass_begin",
            "pass": p.number,
            "parent": p.parent,
            "api": p.api,
            **p.options,
            "roots": [graph.ids[i] for i in p.options["roots"]],
            "thread": threading.current_thread().name,
            **({"before_provenance": True} if self._built_before(p) else {}),
        })
        if p.leaf_order:
            event["leaves"] = p.leaf_order
        try:  # the node list is written from its parts' texts; "nodes" comes last
            event.text = f'{compact_json(event)[:-1]},{listing_text}}}\n'
        except (TypeError, ValueError):
            event.text = None  # the sink encodes it, and says what JSON cannot carry
        event["nodes"] = nodes
        self._emit(event)
        self._memory(p, nodes)
        for region in self.regions.events(p.number, graph, p.leaf_names):
            self._emit(region)

    def _memory(self, p: Pass, nodes: list[dict[str, Any]]) -> None:
        """The pass's ``memory`` event: its saved storages at the start (capture/memory.py)."""
        try:
            event, p.memory = memory_event(p.number, p.graph, nodes)
        except Exception:  # noqa: BLE001 - informative only: never break a pass
            return
        self._emit(event)

    def _built_before(self, p: Pass) -> bool:
        """Whether the pass's graph was built before provenance started (``attach()`` after
        the forward, the way a notebook invites): its roots carry no source and were made
        before provenance's mark on this thread. Then "no source recorded" is no mystery."""
        since = self.tagged_since
        if since is None or self.annotate is None or p.thread != since[0]:
            return False
        graph = p.graph
        roots = [graph.nodes[i] for i in p.options["roots"] if graph.names[i] != ACCUMULATE]
        try:
            return bool(roots) and all(
                node_metadata(root).get(SOURCE_KEY) is None
                and node_metadata(root).get(MODULE_KEY) is None
                and root._sequence_nr() < since[1] for root in roots)
        except Exception:  # noqa: BLE001 - informative only: say nothing
            return False

    def _annotate(self, p: Pass) -> None:
        if self.annotate is None or p.annotated:
            return
        p.annotated = True
        try:
            self.annotate(p.graph.nodes[: len(p.options.get("roots") or ())] or p.graph.nodes[:1])
        except Exception:  # noqa: BLE001 - provenance is informative only
            pass

    def _name_leaves(self, p: Pass, frame: Any = None) -> None:
        """Name the pass's leaves from the variables of ``frame`` (the user's frame that called
        the backward; found from the caller when None) and its callers."""
        graph = p.graph
        wanted: dict[int, Any] = {}
        leaves: dict[int, Any] = {}
        for i, name in enumerate(graph.names):
            if name == ACCUMULATE:
                variable = graph.nodes[i].variable
                leaves[i] = variable
                wanted[id(variable)] = variable
                p.before[i] = None
        if not wanted:
            return
        if frame is None:
            frame = naming.user_frame(sys._getframe(1))
        fsdp = sharded.fsdp_leaves(leaves, graph.nodes, graph.names, frame)
        for leaf in fsdp.values():
            wanted[id(leaf.param)] = leaf.param
        found = naming.find_names(wanted, frame)
        for i, variable in leaves.items():
            name = found.get(id(variable))
            leaf = fsdp.get(i)
            if leaf is not None:  # FSDP's unsharded copy: named, and shown, as the shard
                p.shards[i] = leaf.param
                name = name or found.get(id(leaf.param)) or leaf.fqn
            p.leaf_names[i] = name or naming.fallback_name(graph.ids[i], variable)
        # model order: as the names were found (a module's leaves as named_parameters() lists
        # them), then the leaves no variable names, the one farthest from the loss first
        rank = {key: k for k, key in enumerate(found)}
        unnamed = len(rank)

        def model_order(i: int) -> tuple[int, int]:
            leaf = fsdp.get(i)
            key = id(leaf.param) if leaf is not None and id(leaf.param) in rank \
                else id(leaves[i])
            return rank.get(key, unnamed), -i
        p.leaf_order = [graph.ids[i] for i in sorted(leaves, key=model_order)]

    def _retained_in(self, p: Pass, frame: Any
                     ) -> list[tuple[Any, int, str, dict[str, Any] | None]]:
        """The tensors that called ``retain_grad`` whose node is in the pass, named from
        ``frame`` (the user's frame that called the backward) and its callers."""
        out = []
        if not self._retained:
            return out
        wanted = {}
        for ref in list(self._retained.values()):
            tensor = ref()
            if tensor is not None and tensor.grad_fn is not None and tensor.retains_grad:
                index = p.graph.index.get(tensor.grad_fn)
                if index is not None:
                    wanted[id(tensor)] = (ref, index, tensor)
        if wanted:
            names = naming.find_names({k: v[2] for k, v in wanted.items()}, frame)
            batch = SummaryBatch()  # one read on a GPU, however many tensors retain grads
            slots = []
            for key, (ref, index, tensor) in wanted.items():
                name = names.get(key) or f"{display_name(p.graph.names[index])}#{p.graph.ids[index]}"
                slots.append((ref, index, name, batch.add(tensor.grad)))
            summaries = batch.compute() if len(batch) else []
            out = [(ref, index, name, None if slot is None else summaries[slot])
                   for ref, index, name, slot in slots]
        return out
