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

import gc
import math
import sys
import threading
import weakref
from typing import Any

import torch

from backstep.engine import device_checks, naming
from backstep.engine.controller import BackstepAbort, Controller
from backstep.engine.graph import Graph, display_name, gradient_edge
from backstep.engine.recorder import Sink
from backstep.engine.saved import has_saved, saved_status
from backstep.engine.summary import SummaryBatch, summarize

BATCH_NODES = 256
BATCH_BYTES = 8 << 20
RETAINED_KEY = "backstep.retained_by"
HELD_NODES = 64  # gradients kept for on-demand tensor views while the live UI steps
_ACCUMULATE = "torch::autograd::AccumulateGrad"


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
        self.before: dict[int, dict[str, Any] | None] = {}  # leaf index -> .grad summary at start
        self.retained: list[tuple[Any, int, str, dict[str, Any] | None]] = []
        self.stepping = False
        self.finishing = False
        self.record = False  # summaries and node events for every node
        self.announced = False  # pass_begin written
        self.has_pre = False
        self.has_post = False
        self.post_on: list[bool] | None = None  # which nodes carry a post-hook
        self.partial = False  # some nodes run without hooks: their steps come from the replay
        self.options: dict[str, Any] = {}
        self.announced_stop = False
        self.annotated = False
        self.held: dict[int, tuple[Any, Any]] = {}  # node id -> (grad_outputs, grad_inputs)
        # A pass's nodes may run on several threads at once (CPU and CUDA device threads): its
        # hooks take turns, and a paused hook lets the others go while it waits.
        self.lock = threading.RLock()
        self.checks: device_checks.GradientChecks | None = None  # gradient checks in flight


class Capture:
    """Installs the backward wrapper and turns passes into events."""

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
        if controller is not None:
            controller.tensor_lookup = self._tensor_values

    # -- install / uninstall ----------------------------------------------------------------
    def install(self) -> None:
        if self._original is not None:
            return
        original = torch.autograd._engine_run_backward
        capture = self

        def _engine_run_backward(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
            return capture._run(original, t_outputs, args, kwargs)

        _engine_run_backward.__backstep__ = True  # type: ignore[attr-defined]
        self._original = original
        torch.autograd._engine_run_backward = _engine_run_backward
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
        torch.autograd._engine_run_backward = self._original
        self._original = None
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
        if torch.compiler.is_compiling():
            # torch.compile tracing its own backward (AOTAutograd): not one of the user's passes
            return original(t_outputs, *args, **kwargs)
        with self._lock:
            self.passes += 1
            number = self.passes
        controller = self.controller
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
        try:
            p = self._begin(number, t_outputs, args, kwargs, live)
        except Exception:  # noqa: BLE001 - backstep must never break a backward it cannot read
            p = None
        if p is None:
            return original(t_outputs, *args, **kwargs)
        stack = self._stack()
        stack.append(p)
        frozen = p.record and _freeze_gc()
        try:
            result = original(t_outputs, *args, **kwargs)
        except BaseException as exc:
            stack.pop()
            self._end(p, exc)
            if frozen:
                gc.unfreeze()
            raise
        stack.pop()
        self._end(p, None)
        if frozen:
            gc.unfreeze()
        return result

    def _post_mortem(self, number: int, t_outputs: Any, args: tuple, kwargs: dict,
                     exc: BaseException) -> None:
        """A pass that ran without hooks failed: name the node that raised from the graph the
        user's tensors still hold, and report the pass as a recorded one would (errors only).

        Nodes that ran before the failure have released their buffers by now, so "freed" alone
        is ambiguous: an in-place error is pinned on the first node (in the engine's order) with
        a modified saved tensor; a freed-graph error only when the first node that needs saved
        tensors at all has them freed. Otherwise the pass is reported without a node.
        """
        try:
            p = self._begin(number, t_outputs, args, kwargs, live=False)
            graph = p.graph
            inplace = "modified by an inplace operation" in str(exc)
            failed = saved = None
            for i in graph.execution_order():
                node = graph.nodes[i]
                if not has_saved(node):
                    continue
                statuses = saved_status(node, check=True)
                kinds = {s["status"] for s in statuses} - {"scalar", "none"}
                if not kinds:
                    continue  # only sizes and numbers saved: this node needs no buffers
                if inplace and "modified" in kinds:
                    failed, saved = i, statuses
                    break
                if not inplace:
                    if "freed" in kinds:
                        failed, saved = i, statuses
                    break
            self._announce(p)
            if failed is not None:
                self._emit({"event": "node", "pass": number, "step": None,
                            "id": graph.ids[failed], "name": display_name(graph.names[failed]),
                            "grad_outputs": None, "grad_inputs": None, "saved": saved,
                            "error": _message(exc)})
            self._emit({"event": "pass_end", "pass": number, "status": "error",
                        "error": _message(exc), "skipped": [], "post_mortem": True})
            if self.sink is not None:
                self.sink.flush()
        except Exception:  # noqa: BLE001 - a post-mortem must never mask the user's error
            pass
        finally:
            self._live.pop(number, None)

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
        p.options = {"retain_graph": retain_graph, "create_graph": create_graph,
                     "caller": naming.frame_source(naming.user_frame(sys._getframe(1))),
                     "roots": [graph.index[e[0]] for e in roots if e is not None],
                     "inputs": input_ids}
        if p.record or (live and controller is not None and controller.breakpoints.leaf_names):
            self._name_leaves(p)
        if live and controller is not None and controller.breakpoints.module_globs:
            self._annotate(p)
        if p.record:
            for i in p.before:
                variable = graph.nodes[i].variable
                if variable.grad is not None:
                    p.before[i] = p.batch.add(variable.grad)
            p.retained = self._retained_in(p)
            slots = p.batch.compute() if len(p.batch) else []
            p.before = {i: (slots[s] if isinstance(s, int) else None) for i, s in p.before.items()}
            self._announce(p)
        bp = controller.breakpoints if controller is not None else None
        if self._retained_graphs:
            for i, node in enumerate(graph.nodes):
                if graph.names[i] == _ACCUMULATE:
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
        self._annotate(p)
        graph = p.graph
        if not p.leaf_names:
            self._name_leaves(p)
        self._emit(
            {
                "event": "pass_begin",
                "pass": p.number,
                "parent": p.parent,
                "api": p.api,
                **p.options,
                "roots": [graph.ids[i] for i in p.options["roots"]],
                "thread": threading.current_thread().name,
                "nodes": [graph.describe(i, p.leaf_names.get(i)) for i in range(len(graph))],
            }
        )

    def _annotate(self, p: Pass) -> None:
        if self.annotate is None or p.annotated:
            return
        p.annotated = True
        try:
            self.annotate(p.graph.nodes[: len(p.options.get("roots") or ())] or p.graph.nodes[:1])
        except Exception:  # noqa: BLE001 - provenance is informative only
            pass

    def _name_leaves(self, p: Pass) -> None:
        graph = p.graph
        wanted: dict[int, Any] = {}
        leaves: dict[int, Any] = {}
        for i, name in enumerate(graph.names):
            if name == _ACCUMULATE:
                variable = graph.nodes[i].variable
                leaves[i] = variable
                wanted[id(variable)] = variable
                p.before[i] = None
        if not wanted:
            return
        found = naming.find_names(wanted, naming.user_frame(sys._getframe(1)))
        for i, variable in leaves.items():
            p.leaf_names[i] = found.get(id(variable)) or naming.fallback_name(graph.ids[i], variable)

    def _retained_in(self, p: Pass) -> list[tuple[Any, int, str, dict[str, Any] | None]]:
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
            names = naming.find_names({k: v[2] for k, v in wanted.items()},
                                      naming.user_frame(sys._getframe(1)))
            batch = SummaryBatch()  # one read on a GPU, however many tensors retain grads
            slots = []
            for key, (ref, index, tensor) in wanted.items():
                name = names.get(key) or f"{display_name(p.graph.names[index])}#{p.graph.ids[index]}"
                slots.append((ref, index, name, batch.add(tensor.grad)))
            summaries = batch.compute() if len(batch) else []
            out = [(ref, index, name, None if slot is None else summaries[slot])
                   for ref, index, name, slot in slots]
        return out

    def _ensure_hooks(self, p: Pass, pre: bool, post: bool) -> None:
        """Install the hook kinds the pass lacks on every node that has not run yet.

        A pass that only checks gradient breakpoints leaves pass-through nodes bare (see
        ``_gradient_nodes``); once it records, every node that has not run gets its post-hook.
        """
        handles = p.handles
        nodes = p.graph.nodes
        ran = p.ran
        if post:
            hooked = p.post_on
            if hooked is None:
                hooked = p.post_on = [False] * len(nodes)
            wanted = None if p.record else _gradient_nodes(p)
            if wanted is not None or not p.has_post or p.partial:
                after = self._after
                for i, node in enumerate(nodes):
                    if not ran[i] and not hooked[i] and (wanted is None or wanted[i]):
                        hooked[i] = True
                        handles.append(node.register_hook(_post_hook(p, i, after)))
            p.has_post = True
            p.partial = wanted is not None and not all(wanted)
        if pre and not p.has_pre:
            p.has_pre = True
            before = self._before
            for i, node in enumerate(nodes):
                if not ran[i]:
                    handles.append(node.register_prehook(_pre_hook(p, i, before)))

    def _sync_ran(self, p: Pass, last: int | None, complete: bool = False) -> None:
        """Steps of a pass whose pass-through nodes ran without hooks, from the engine's order.

        The engine's order is deterministic on one thread: every node before the last one known
        to have run (``last``, else the latest hooked one) has run too. Only a pass with neither
        pre-hooks (which see every node) nor ``inputs=`` (which prunes nodes) is partial.
        """
        if not p.partial or p.has_pre:
            return
        order = p.graph.execution_order()
        ran = p.ran
        end = -1
        for position, i in enumerate(order):
            if ran[i] or i == last or complete:
                end = position
        for position in range(end + 1):
            ran[order[position]] = position + 1
        p.completed = end + 1

    # -- hooks ------------------------------------------------------------------------------
    def _before(self, p: Pass, i: int, grad_outputs: tuple) -> None:
        previous = p.current
        hooked = p.post_on
        if previous is not None and not p.ran[previous] and not (hooked and hooked[previous]):
            p.completed += 1  # without post-hooks, entering a node means the last one finished
            p.ran[previous] = p.completed
        p.current = i
        controller = self.controller
        if controller is None or controller.detached or p.finishing:
            return
        graph = p.graph
        reason = detail = None
        if p.stepping or controller.interrupt:
            if controller.interrupt:
                reason = "interrupt"
            else:
                reason = "pass_start" if p.completed == 0 and not p.announced_stop else "step"
        else:
            node = graph.nodes[i]
            detail = controller.breakpoints.match_node(
                display_name(graph.names[i]),
                node.metadata.get("backstep.module"),
                p.leaf_names.get(i),
            )
            if detail is not None:
                reason = "breakpoint"
        if reason is not None:
            self._pause(p, i, reason, detail, grad_outputs, None)

    def _after(self, p: Pass, i: int, grad_inputs: tuple, grad_outputs: tuple) -> None:
        p.completed += 1
        step = p.ran[i] = p.completed
        p.current = None
        controller = self.controller
        if p.record:
            node = p.graph.nodes[i]
            batch = p.batch
            go = [batch.add(g) for g in grad_outputs]
            gi = [batch.add(g) for g in grad_inputs]
            saved = saved_status(node) if has_saved(node) else []
            after = None
            if p.graph.names[i] == _ACCUMULATE:
                after = (batch.add(node.variable.grad), node.variable._version)
            p.records.append((i, step, go, gi, saved, after))
            if controller is not None:
                held = p.held
                held[p.graph.ids[i]] = (grad_outputs, grad_inputs)
                if len(held) > HELD_NODES:
                    del held[next(iter(held))]
            if len(p.records) >= BATCH_NODES or batch.nbytes >= BATCH_BYTES:
                self._flush(p)
        if controller is None or controller.detached or p.finishing:
            return
        if controller.interrupt and not p.has_pre:
            self._pause(p, i, "interrupt", None, grad_outputs, grad_inputs, after=True)
            return
        bp = controller.breakpoints
        if bp.on_gradients:
            if p.checks is not None or device_checks.deferred(grad_inputs):
                self._check_on_device(p, i, bp, grad_outputs, grad_inputs)
                return
            hit = gradient_trip(bp, grad_inputs)
            if hit is not None:
                self._pause(p, i, hit[0], hit[1], grad_outputs, grad_inputs, after=True)

    def _check_on_device(self, p: Pass, i: int, bp: Any, grad_outputs: tuple,
                         grad_inputs: tuple) -> None:
        """Queue node ``i``'s gradient check on the device; stop at the first earlier check that
        has tripped by now (``device_checks``)."""
        checks = p.checks
        if checks is None:
            checks = p.checks = device_checks.GradientChecks()
        try:
            checks.submit(bp, i, grad_outputs, grad_inputs)
        except Exception:  # noqa: BLE001 - no pinned memory or events here: check at once
            hit = gradient_trip(bp, grad_inputs)
            if hit is not None:
                self._pause(p, i, hit[0], hit[1], grad_outputs, grad_inputs, after=True)
                return
        try:
            trip = checks.poll(bp)
        except Exception:  # noqa: BLE001 - a check must never break the user's pass
            trip = None
        if trip is not None:
            self._stop_born(p, trip, i)

    def _stop_born(self, p: Pass, trip: device_checks.Trip, now: int | None) -> None:
        """Stop at the node a deferred check names, saying how many nodes ago it ran."""
        self._sync_ran(p, now, complete=now is None)
        born = p.ran[trip.node]
        current = p.ran[now] if now is not None else p.completed
        detail = device_checks.late(trip.detail, display_name(p.graph.names[trip.node]), born,
                                    current)
        self._pause(p, trip.node, trip.reason, detail, trip.grad_outputs, trip.grad_inputs,
                    after=True)

    def _settle_checks(self, p: Pass, exc: BaseException | None) -> None:
        """Pass end: wait for the checks still in flight and stop at any that tripped."""
        checks, controller = p.checks, self.controller
        p.checks = None
        if checks is None:
            return
        try:
            while exc is None and controller is not None and not controller.detached:
                if p.finishing:
                    break
                trip = checks.poll(controller.breakpoints, wait=True)
                if trip is None:
                    break
                self._stop_born(p, trip, None)
        except BackstepAbort:
            pass  # the pass is over: there is nothing left to abort
        except Exception:  # noqa: BLE001 - a late check must never break a finished pass
            pass
        finally:
            checks.clear()

    def _pause(self, p: Pass, i: int, reason: str, detail: str | None, grad_outputs: tuple,
               grad_inputs: tuple | None, after: bool = False) -> None:
        controller = self.controller
        assert controller is not None
        p.announced_stop = True
        self._sync_ran(p, i if after else None)
        go_summaries = [summarize(g, hist=True) for g in grad_outputs]
        gi_summaries = ([summarize(g, hist=True) for g in grad_inputs]
                        if grad_inputs is not None else None)
        saved = saved_status(p.graph.nodes[i], check=True)
        if p.record:
            self._flush(p)
        elif not p.announced:
            self._announce(p)
            self._replay_ran(p, i if after else None, (go_summaries, gi_summaries, saved))
        graph = p.graph
        node_id = graph.ids[i]
        p.held[node_id] = (grad_outputs, grad_inputs if grad_inputs is not None else ())
        event = {
            "event": "stopped",
            "pass": p.number,
            "step": p.ran[i] if after else p.completed + 1,
            "id": node_id,
            "name": display_name(graph.names[i]),
            "reason": reason,
            "detail": detail,
            "after": after,
            "grad_outputs": go_summaries,
            "grad_inputs": gi_summaries,
            "saved": saved,
            "thread": threading.current_thread().name,
            "device": _device(grad_outputs) or _device(grad_inputs or ()),
        }
        if self.sink is not None:
            self.sink.flush()
        try:
            p.lock.release()  # held by the hook: the pass's other threads run on meanwhile
            held = True
        except RuntimeError:  # not called from a hook
            held = False
        try:
            command = controller.pause(event, p)
        finally:
            if held:
                p.lock.acquire()
        if not p.active:
            return  # the pass ended while this thread waited (another thread's node raised)
        if command == "step":
            p.stepping = True
            if not p.record and self.sink is not None:
                # recording starts mid-pass: leaves still to accumulate need their .grad now
                p.record = True
                for j in p.before:
                    if not p.ran[j]:
                        p.before[j] = summarize(p.graph.nodes[j].variable.grad)
            self._ensure_hooks(p, pre=True, post=p.record)
        else:
            p.stepping = False
            if command == "finish":
                p.finishing = True

    def _replay_ran(self, p: Pass, stopped: int | None, known: tuple) -> None:
        """Node events for nodes that ran before a late announcement: without gradients (they
        were not kept), except the node a gradient breakpoint stopped after."""
        graph = p.graph
        for i in sorted((i for i, step in enumerate(p.ran) if step), key=p.ran.__getitem__):
            go, gi, saved = known if i == stopped else (None, None, [])
            self._emit({"event": "node", "pass": p.number, "step": p.ran[i], "id": graph.ids[i],
                        "name": display_name(graph.names[i]), "grad_outputs": go,
                        "grad_inputs": gi, "saved": saved, "error": None})

    # -- output -----------------------------------------------------------------------------
    def _flush(self, p: Pass) -> dict[int, list[dict[str, Any] | None]]:
        """Compute pending summaries and write their node events; returns each flushed
        node's grad_inputs summaries by local index."""
        if not p.records:
            return {}
        records, p.records = p.records, []
        summaries = p.batch.compute()
        graph = p.graph
        number = p.number
        out = {}
        for i, step, go, gi, saved, after in records:
            gi_summaries = [None if s is None else summaries[s] for s in gi]
            out[i] = gi_summaries
            node_id = graph.ids[i]
            self._emit(
                {
                    "event": "node",
                    "pass": number,
                    "step": step,
                    "id": node_id,
                    "name": display_name(graph.names[i]),
                    "grad_outputs": [None if s is None else summaries[s] for s in go],
                    "grad_inputs": gi_summaries,
                    "saved": saved,
                    "error": None,
                }
            )
            if graph.names[i] == _ACCUMULATE:
                self._emit(
                    {
                        "event": "accumulate",
                        "pass": number,
                        "leaf": p.leaf_names.get(i),
                        "id": node_id,
                        "before": p.before.get(i),
                        "after": summaries[after[0]] if after[0] is not None else None,
                        "retained": False,
                        "version": after[1],
                    }
                )
        return out

    def _end(self, p: Pass, exc: BaseException | None) -> None:
        if p.checks is not None:
            self._settle_checks(p, exc)
        p.active = False
        for handle in p.handles:
            handle.remove()
        p.handles = []
        try:
            self._finish(p, exc)
        except Exception:  # noqa: BLE001 - never turn a pass into a backstep error
            pass
        finally:
            self._live.pop(p.number, None)
            p.graph = None  # type: ignore[assignment]
            p.held.clear()
            p.retained = []
            p.records = []

    def _finish(self, p: Pass, exc: BaseException | None) -> None:
        if not p.announced:
            return
        self._flush(p)
        self._sync_ran(p, None, complete=exc is None)  # a pass that ends well ran every node
        graph = p.graph
        if exc is None and p.options.get("retain_graph"):
            self._watch_retained(p)
        if exc is not None:
            failed = self._failed_node(p)
            if failed is not None:
                self._emit(
                    {
                        "event": "node",
                        "pass": p.number,
                        "step": p.completed + 1,
                        "id": graph.ids[failed],
                        "name": display_name(graph.names[failed]),
                        "grad_outputs": None,
                        "grad_inputs": None,
                        "saved": saved_status(graph.nodes[failed], check=True),
                        "error": _message(exc),
                    }
                )
        batch = SummaryBatch()  # every retained .grad in one batch: one read on a GPU
        done = []
        for ref, index, name, before in p.retained:
            tensor = ref()
            if tensor is not None and p.ran[index]:
                done.append((index, name, before, batch.add(tensor.grad)))
        summaries = batch.compute() if len(batch) else []
        for index, name, before, slot in done:
            self._emit(
                {
                    "event": "accumulate",
                    "pass": p.number,
                    "leaf": name,
                    "id": graph.ids[index],
                    "before": before,
                    "after": None if slot is None else summaries[slot],
                    "retained": True,
                }
            )
        self.drain()
        self._emit(
            {
                "event": "pass_end",
                "pass": p.number,
                "status": "ok" if exc is None else "error",
                "error": None if exc is None else _message(exc),
                "skipped": [graph.ids[i] for i, step in enumerate(p.ran) if not step],
            }
        )
        if self.sink is not None:
            self.sink.flush()

    def _watch_retained(self, p: Pass) -> None:
        """Mark a retained graph so its release, and whether any pass reused it, is reported."""
        marker = _Retained(p.number)
        graph = p.graph
        total = 0
        for i, node in enumerate(graph.nodes):
            if graph.names[i] != _ACCUMULATE:
                node.metadata[RETAINED_KEY] = marker
            if has_saved(node):
                total += sum(s.get("bytes", 0) for s in saved_status(node) if s["status"] == "alive")
        marker.state["bytes"] = total
        self._retained_graphs += 1
        weakref.finalize(marker, self._released, p.number, marker.state).atexit = False
        del marker

    def _released(self, number: int, state: dict[str, Any]) -> None:
        """A weakref finalizer: it can run anywhere (inside a sink's lock, inside a hook), so it
        only queues; ``drain`` writes the event at the next safe point."""
        self._retained_graphs -= 1
        self._released_queue.append(
            {"event": "graph_released", "pass": number, "reused": state["reused"],
             "bytes": state["bytes"]}
        )

    def drain(self) -> None:
        """Write queued ``graph_released`` events (at pass boundaries and at the end)."""
        queue = self._released_queue
        while queue:
            try:
                event = queue.pop(0)
            except IndexError:  # another thread's pass drained it first
                return
            self._emit(event)

    @staticmethod
    def _failed_node(p: Pass) -> int | None:
        """The node that raised: the one entered and not finished, else the ready node the
        engine would have run next (highest sequence number first, as the engine orders)."""
        if p.current is not None and not p.ran[p.current]:
            return p.current
        candidates = p.graph.ready_unrun(p.ran)
        if not candidates:
            return None
        return max(candidates, key=lambda i: p.graph.nodes[i]._sequence_nr())

    def _emit(self, event: dict[str, Any]) -> None:
        if self.sink is not None:
            self.sink.emit(event)

    # -- tensor values on demand (live UI) ----------------------------------------------------
    def _tensor_values(self, request: dict[str, Any]) -> dict[str, Any]:
        p = self._live.get(request["pass"])
        if p is None:
            raise LookupError(f"pass {request['pass']} is not running")
        grads = p.held.get(request["node"])
        if grads is None:
            raise LookupError("that node's gradients are no longer held")
        group = grads[0] if request["slot"] == "grad_outputs" else grads[1]
        index = request["index"]
        if not 0 <= index < len(group) or group[index] is None:
            raise LookupError("no gradient in that slot")
        tensor = group[index].detach()
        offset = request.get("offset", 0)
        limit = min(request.get("limit", 1000) or 1000, 10_000)
        flat = tensor.reshape(-1)[offset : offset + limit]
        if flat.is_complex():
            values = [[v.real, v.imag] for v in flat.tolist()]
        else:
            values = flat.tolist()
        from backstep.protocol import clean_number

        if tensor.is_floating_point():
            values = [clean_number(v) for v in values]
        return {
            "shape": list(tensor.shape),
            "dtype": str(tensor.dtype).removeprefix("torch."),
            "numel": tensor.numel(),
            "offset": offset,
            "values": values,
        }


# Backward nodes whose outgoing gradients are their one incoming gradient rearranged: viewed,
# copied, sliced, or padded with zeros. No value is computed there, so a NaN cannot be born in
# them and no outgoing gradient has a larger norm than the incoming one.
_PASSTHROUGH = frozenset({
    "AliasBackward0", "CatBackward0", "CloneBackward0", "DiagonalBackward0", "FlipBackward0",
    "NarrowBackward0", "PermuteBackward0", "ReshapeAliasBackward0", "RollBackward0",
    "SelectBackward0", "SliceBackward0", "SqueezeBackward0", "SqueezeBackward1",
    "SqueezeBackward2", "SqueezeBackward3", "SqueezeBackward4", "StackBackward0", "TBackward0",
    "TransposeBackward0", "TransposeBackward1", "UnsafeViewBackward0", "UnsqueezeBackward0",
    "ViewBackward0", "ViewAsComplexBackward0", "ViewAsRealBackward0", _ACCUMULATE,
})


def _gradient_nodes(p: Pass) -> list[bool] | None:
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
    return [not (name in _PASSTHROUGH and consumers[i] == 1 or name == _ACCUMULATE)
            for i, name in enumerate(graph.names)]


def _freeze_gc() -> bool:
    """Move every existing object out of the collector's reach for the length of a recorded pass.

    Recording allocates a few dicts per node; each full collection that triggers would walk every
    object the program has (torch alone tracks ~150,000), which measured 40% of a trace's cost.
    Frozen objects are only exempt until ``gc.unfreeze()`` at pass end: what the program computes
    is unchanged, only when pre-existing cyclic garbage is collected. Left alone when the program
    froze objects itself or turned the collector off.
    """
    if not gc.isenabled() or gc.get_freeze_count():
        return False
    gc.freeze()
    return True


_CHECKED_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64,
                             torch.complex64, torch.complex128})


def gradient_trip(bp: Any, grads: tuple) -> tuple[str, str] | None:
    """Cheap gradient-breakpoint check on a node's outgoing gradients.

    NaN and Inf propagate into a sum, so one reduction per gradient rules out non-finite values;
    the exact count is computed only when that sum is not finite. Hooks run with grad mode off
    (except under create_graph, where the reductions are simply not needed for anything).
    """
    nonfinite, above = bp.nonfinite, bp.norm_above
    for k, g in enumerate(grads):
        if g is None or g.dtype not in _CHECKED_DTYPES:
            continue
        try:  # a meta tensor's .item() raises: nothing to check there
            if nonfinite and not math.isfinite(abs(g.sum().item())):
                bad = int((~torch.isfinite(g)).sum())
                if bad:
                    return "nonfinite", f"grad_inputs[{k}] has {bad} NaN/Inf values"
            if above is not None:
                norm = torch.linalg.vector_norm(
                    g, dtype=None if g.is_complex() else torch.float64).item()
                if not norm <= above:
                    return "norm", f"grad_inputs[{k}] norm {norm:.4g} > {above:g}"
        except (RuntimeError, TypeError, NotImplementedError):
            continue
    return None


class _Retained:
    """Lives in the metadata of every node of a retained graph; dies with the last of them.
    Its ``state`` outlives it, for the finalizer that reports the release."""

    __slots__ = ("state", "__weakref__")

    def __init__(self, number: int) -> None:
        self.state = {"reused": False, "bytes": 0, "pass": number}


def _device(grads: tuple) -> str | None:
    """The device of a node's first gradient (where it runs), or None."""
    for g in grads:
        if g is not None:
            return str(g.device)
    return None


def _message(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _post_hook(p: Pass, i: int, after: Any) -> Any:
    def hook(grad_inputs: tuple, grad_outputs: tuple) -> None:
        with p.lock:
            if p.active:
                after(p, i, grad_inputs, grad_outputs)

    return hook


def _pre_hook(p: Pass, i: int, before: Any) -> Any:
    def hook(grad_outputs: tuple) -> None:
        with p.lock:
            if p.active:
                before(p, i, grad_outputs)

    return hook
