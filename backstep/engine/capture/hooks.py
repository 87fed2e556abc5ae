"""The per-node hooks: which nodes get them, and what they do before and after each node.

Pre-hooks stop before a node (stepping, node/module/leaf breakpoints); post-hooks record a node's
gradients and check gradient breakpoints (at once on CPU, queued on the device elsewhere). A stop
hands the pass to the controller and, on ``step``, widens the hooks the pass carries.
"""

from __future__ import annotations

import math
import threading
from functools import partial
from threading import get_ident
from typing import Any

import torch

from backstep.engine import device_checks
from backstep.engine.capture.passes import (
    ACCUMULATE,
    BATCH_BYTES,
    BATCH_NODES,
    HELD_NODES,
    Pass,
    gradient_nodes,
    grads_device,
    pre_hook,
)
from backstep.engine.controller import BackstepAbort, Controller
from backstep.engine.graph import display_name
from backstep.engine.pending_tags import metadata as node_metadata
from backstep.engine.recorder import Sink
from backstep.engine.saved import saved_record, saved_status
from backstep.engine.sharded import as_local
from backstep.engine.summary import summarize
from backstep.events.breakpoints import late, nonfinite_detail, norm_detail, stopped_event


class Hooks:
    """Capture's hook side (a mixin of ``Capture``)."""

    sink: Sink | None
    controller: Controller | None
    _live: dict[int, Pass]

    def _ensure_hooks(self, p: Pass, pre: bool, post: bool) -> None:
        """Install the hook kinds the pass lacks on every node that has not run yet.

        A pass that only checks gradient breakpoints leaves pass-through nodes bare (see
        ``gradient_nodes``); once it records, every node that has not run gets its post-hook.
        """
        handles = p.handles
        nodes = p.graph.nodes
        ran = p.ran
        if post:
            if p.leaf is None:
                p.leaf = [name == ACCUMULATE for name in p.graph.names]
            hooked = p.post_on
            if hooked is None:
                hooked = p.post_on = [False] * len(nodes)
            wanted = None if p.record else gradient_nodes(p)
            if wanted is not None or not p.has_post or p.partial:
                after = self._after
                for i, node in enumerate(nodes):
                    if not ran[i] and not hooked[i] and (wanted is None or wanted[i]):
                        hooked[i] = True
                        handles.append(node.register_hook(partial(after, p, i)))
            p.has_post = True
            p.partial = wanted is not None and not all(wanted)
        if pre and not p.has_pre:
            p.has_pre = True
            before = self._before
            for i, node in enumerate(nodes):
                if not ran[i]:
                    handles.append(node.register_prehook(pre_hook(p, i, before)))

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
    def _before(self, p: Pass, i: int, grad_outputs: tuple) -> tuple | None:
        previous = p.current
        hooked = p.post_on
        if previous is not None and not p.ran[previous] and not (hooked and hooked[previous]):
            p.completed += 1  # without post-hooks, entering a node means the last one finished
            p.ran[previous] = p.completed
        p.current = i
        controller = self.controller
        if controller is None:
            return
        controller.check_abort()
        if controller.detached or p.finishing:
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
                node_metadata(node).get("backstep.module"),
                p.leaf_names.get(i),
            )
            if detail is not None:
                reason = "breakpoint"
        if reason is not None:
            return self._pause(p, i, reason, detail, grad_outputs, None)
        return None

    def _after(self, p: Pass, i: int, grad_inputs: tuple, grad_outputs: tuple) -> tuple | None:
        """The post-hook of node ``i``, bound with ``partial`` (one Python call per node).
        Returns None (autograd's own gradients) unless the person edited them at a stop here."""
        with p.lock:
            if not p.active:
                return None
            p.completed = step = p.completed + 1
            p.ran[i] = step
            p.current = None
            controller = self.controller
            if p.record:
                batch = p.batch
                add = batch.add
                go = list(map(add, grad_outputs))
                gi = list(map(add, grad_inputs))
                node = p.graph.nodes[i]
                saved, saved_text = saved_record(node)
                after = None
                if p.leaf[i] and i not in p.shards:  # a shard's .grad is read at pass end
                    variable = node.variable
                    after = (add(variable.grad), variable._version)
                # a node run on another thread than its pass's (a CUDA device thread) says which
                thread = None if get_ident() == p.thread else threading.current_thread().name
                records = p.records
                records.append((i, step, go, gi, saved, saved_text, after, thread))
                if controller is not None:
                    held = p.held
                    held[p.graph.ids[i]] = (grad_outputs, grad_inputs)
                    if len(held) > HELD_NODES:
                        del held[next(iter(held))]
                if len(records) >= BATCH_NODES:
                    self._flush(p)
                elif batch.nbytes >= BATCH_BYTES:
                    batch.settle()  # reduce what is held and let it go; written at the flush
            if controller is None:
                return None
            controller.check_abort()
            if controller.detached or p.finishing:
                return None
            if controller.interrupt and not p.has_pre:
                return self._pause(p, i, "interrupt", None, grad_outputs, grad_inputs,
                                   after=True, editable=True)
            bp = controller.breakpoints
            if bp.on_gradients:
                if p.checks is not None or device_checks.deferred(grad_inputs):
                    self._check_on_device(p, i, bp, grad_outputs, grad_inputs)
                    return None
                hit = gradient_trip(bp, grad_inputs)
                if hit is not None:
                    return self._pause(p, i, hit[0], hit[1], grad_outputs, grad_inputs,
                                       after=True, editable=True)
            return None

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
        detail = late(trip.detail, display_name(p.graph.names[trip.node]), born,
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
               grad_inputs: tuple | None, after: bool = False,
               editable: bool | None = None) -> tuple | None:
        """Stop at node ``i`` until a command resumes the pass. Returns the gradients the
        hook must return: None unless the person edited them in the console (``editable``: the
        stop is in node ``i``'s own hook, before it or, with ``after``, after it)."""
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
        event = stopped_event(
            p.number, p.ran[i] if after else p.completed + 1, node_id,
            display_name(graph.names[i]), reason, detail, go_summaries, saved, after=after,
            grad_inputs=gi_summaries, thread=threading.current_thread().name,
            device=grads_device(grad_outputs) or grads_device(grad_inputs or ()))
        if self.sink is not None:
            self.sink.flush()
        try:
            p.lock.release()  # held by the hook: the pass's other threads run on meanwhile
            held = True
        except RuntimeError:  # not called from a hook
            held = False
        console = self._console(p, i, grad_outputs, grad_inputs, after,
                                not after if editable is None else editable, event)
        try:
            command = controller.pause(event, p, console)
        finally:
            replacement = console.edits.replacement() if console.edits is not None else None
            console.close()
            if held:
                p.lock.acquire()
        if not p.active:
            return None  # the pass ended while this thread waited (another thread's node raised)
        if command == "step":
            p.stepping = True
            if not p.record and self.sink is not None:
                # recording starts mid-pass: leaves still to accumulate need their .grad now
                p.record = True
                for j in p.before:
                    if not p.ran[j]:
                        leaf = p.shards[j] if j in p.shards else p.graph.nodes[j].variable
                        p.before[j] = summarize(leaf.grad)
            self._ensure_hooks(p, pre=True, post=p.record)
        else:
            p.stepping = False
            if command == "finish":
                p.finishing = True
        return replacement

    def _console(self, p: Pass, i: int, grad_outputs: tuple, grad_inputs: tuple | None,
                 after: bool, editable: bool, event: dict[str, Any]) -> Any:
        """The expression console of this stop (``console_eval``); its edits go out as
        ``edit`` events on the sink, as a trace records them."""
        from backstep.engine.console_eval import stop_console

        graph = p.graph
        leaves = {name: graph.nodes[j].variable for j, name in p.leaf_names.items()}
        slot = None if not editable else "grad_inputs" if after else "grad_outputs"
        return stop_console(p, i, grad_outputs, grad_inputs, slot, leaves, event, self._emit)

    def _replay_ran(self, p: Pass, stopped: int | None, known: tuple) -> None:
        """Node events for nodes that ran before a late announcement: without gradients (they
        were not kept), except the node a gradient breakpoint stopped after."""
        graph = p.graph
        for i in sorted((i for i, step in enumerate(p.ran) if step), key=p.ran.__getitem__):
            go, gi, saved = known if i == stopped else (None, None, [])
            self._emit({"event": "node", "pass": p.number, "step": p.ran[i], "id": graph.ids[i],
                        "name": display_name(graph.names[i]), "grad_outputs": go,
                        "grad_inputs": gi, "saved": saved, "error": None})



_CHECKED_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64,
                             torch.complex64, torch.complex128})


def gradient_trip(bp: Any, grads: tuple) -> tuple[str, str] | None:
    """Cheap gradient-breakpoint check on a node's outgoing gradients.

    NaN and Inf propagate into a sum, so one reduction per gradient rules out non-finite values;
    the exact count is computed only when that sum is not finite. Hooks run with grad mode off
    (except under create_graph, where the reductions are simply not needed for anything).
    """
    nonfinite, above = bp.nonfinite, bp.norm_above
    for k, g in enumerate(as_local(grads)):
        if g is None or g.dtype not in _CHECKED_DTYPES:
            continue
        try:  # a meta tensor's .item() raises: nothing to check there
            if nonfinite and not math.isfinite(abs(g.sum().item())):
                bad = int((~torch.isfinite(g)).sum())
                if bad:
                    return "nonfinite", nonfinite_detail(k, bad)
            if above is not None:
                norm = torch.linalg.vector_norm(
                    g, dtype=None if g.is_complex() else torch.float64).item()
                if not norm <= above:
                    return "norm", norm_detail(k, norm, above)
        except (RuntimeError, TypeError, NotImplementedError):
            continue
    return None
