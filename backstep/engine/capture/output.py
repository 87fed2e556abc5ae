"""Writing a pass out: summarised node events in batches, the pass end, the failed node, and
the post-mortem of a pass that ran without hooks; retained graphs reported when released.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from backstep.engine import naming
from backstep.engine.capture.memory import KeptGraphs, end_event
from backstep.engine.capture.passes import (
    ACCUMULATE,
    RETAINED_KEY,
    Pass,
    Retained,
    error_message,
)
from backstep.engine.controller import Controller
from backstep.engine.graph import display_name
from backstep.engine.pending_tags import metadata as node_metadata
from backstep.engine.recorder import Sink, emit_all
from backstep.engine.saved import has_saved, saved_status
from backstep.engine.summary import SummaryBatch
from backstep.events import unmatched
from backstep.events.text import Encoded, accumulate_text, name_text, node_text


class Output:
    """Capture's event side (a mixin of ``Capture``)."""

    sink: Sink | None
    controller: Controller | None
    _live: dict[int, Pass]

    _retained_graphs: int
    kept: KeptGraphs
    _released_queue: list[dict[str, Any]]

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
            # without SavedTensor.data (status "unknown") torch's own error says they were freed
            freed = ("freed", "unknown") if "graph a second time" in str(exc) else ("freed",)
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
                    if not kinds.isdisjoint(freed):
                        failed, saved = i, statuses
                    break
            self._announce(p)
            if failed is not None:
                self._emit({"event": "node", "pass": number, "step": None,
                            "id": graph.ids[failed], "name": display_name(graph.names[failed]),
                            "grad_outputs": None, "grad_inputs": None, "saved": saved,
                            "error": error_message(exc)})
            self._emit({"event": "pass_end", "pass": number, "status": "error",
                        "error": error_message(exc), "skipped": [], "post_mortem": True})
            if self.sink is not None:
                self.sink.flush()
        except Exception:  # noqa: BLE001 - a post-mortem must never mask the user's error
            pass
        finally:
            self._live.pop(number, None)

    def _flush(self, p: Pass) -> dict[int, list[dict[str, Any] | None]]:
        """Compute pending summaries and write their node events; returns each flushed
        node's grad_inputs summaries by local index."""
        if not p.records:
            return {}
        records, p.records = p.records, []
        computed = p.batch.compute()
        # slot -> summary and slot -> its text, with None (no tensor) -> None and "null"
        summaries: dict[int | None, Any] = dict(enumerate(computed))
        summaries[None] = None
        texts: dict[int | None, str | None] = {
            slot: None if s is None else getattr(s, "text", None) for slot, s in summaries.items()}
        texts[None] = "null"
        summary_of, text_of = summaries.__getitem__, texts.__getitem__
        ids, names = p.graph.ids, p.graph.names
        number = p.number
        events: list[dict[str, Any]] = []
        emit = events.append
        out = {}
        for i, step, go, gi, saved, saved_text, after, thread in records:
            gi_summaries = out[i] = list(map(summary_of, gi))
            node_id = ids[i]
            name = names[i]
            shown, shown_text = _shown(name)
            event = Encoded({
                "event": "node",
                "pass": number,
                "step": step,
                "id": node_id,
                "name": shown,
                "grad_outputs": list(map(summary_of, go)),
                "grad_inputs": gi_summaries,
                "saved": saved,
                "error": None,
            })
            if thread is not None:
                event["thread"] = thread
            try:  # a part without a text (None) fails the join: the event has none either
                go_text, gi_text = ",".join(map(text_of, go)), ",".join(map(text_of, gi))
            except TypeError:
                event.text = None
            else:
                event.text = node_text(number, step, node_id, shown_text, f"[{go_text}]",
                                       f"[{gi_text}]", saved_text, thread)
            emit(event)
            if after is not None:
                leaf, before = p.leaf_names.get(i), p.before.get(i)
                after_summary = summary_of(after[0])
                accumulate = Encoded({
                    "event": "accumulate",
                    "pass": number,
                    "leaf": leaf,
                    "id": node_id,
                    "before": before,
                    "after": after_summary,
                    "retained": False,
                    "version": after[1],
                })
                accumulate.text = accumulate_text(number, leaf, node_id, before, after_summary,
                                                  after[1])
                emit(accumulate)
        if self.sink is not None:
            emit_all(self.sink, events)
        return out

    def _end(self, p: Pass, exc: BaseException | None) -> None:
        if exc is None:
            try:
                self._say_unmatched(p)
            except Exception:  # noqa: BLE001, S110 - a note only: never a backstep error
                pass
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
            p.shards = {}

    def _say_unmatched(self, p: Pass) -> None:
        """The node, module and leaf breakpoints that matched none of this pass's nodes, said
        once each (a ``diagnosis``, with the nearest spec that would match): a breakpoint that
        never stops was silent. Each spec is checked against one pass, then never again."""
        controller = self.controller
        if controller is None or controller.detached or self.sink is None:
            return
        bp = controller.breakpoints
        if not bp.static:
            return
        specs = [{"kind": "node", "pattern": g} for g in bp.node_globs]
        specs += [{"kind": "module", "pattern": g} for g in bp.module_globs]
        specs += [{"kind": "leaf", "name": n} for n in sorted(bp.leaf_names)]
        checked = self.breaks_checked  # type: ignore[attr-defined]
        specs = [s for s in specs if unmatched.spec_text(s) not in checked]
        graph = p.graph
        if not specs or graph is None or not graph.names:
            return
        modules = [node_metadata(node).get("backstep.module") for node in graph.nodes]
        leaves = [p.leaf_names.get(i) for i in range(len(graph.names))]
        if not any(modules):  # no module was read (provenance off): no module spec can be judged
            specs = [s for s in specs if s["kind"] != "module"]
        if not any(leaves):
            specs = [s for s in specs if s["kind"] != "leaf"]
        checked.update(unmatched.spec_text(s) for s in specs)
        misses = unmatched.unmatched(specs, zip([display_name(n) for n in graph.names],
                                                modules, leaves, strict=True))
        if misses:
            self._emit({"event": "diagnosis", "pass": p.number, "kind": "breakpoint_unmatched",
                        "title": "a breakpoint matched nothing", "severity": "warning",
                        "message": unmatched.said(p.number, misses), "node": None,
                        "source": None, "related": None})

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
                        "error": error_message(exc),
                    }
                )
        if p.retained or p.shards:
            self._retained_and_shards(p)
        self.drain()
        self._memory_end(p, exc)
        skipped = [graph.ids[i] for i, step in enumerate(p.ran) if not step]
        end = Encoded({"event": "pass_end", "pass": p.number,
                       "status": "ok" if exc is None else "error",
                       "error": None if exc is None else error_message(exc), "skipped": skipped})
        # the common end's text as a file writes it (compact JSON), without encoding the dict
        end.text = (f'{{"event":"pass_end","pass":{p.number},"status":"ok","error":null,'
                    f'"skipped":[{",".join(map(str, skipped))}]}}\n'
                    if exc is None and type(p.number) is int else None)
        self._emit(end)
        if self.sink is not None:
            self.sink.flush()

    def _memory_end(self, p: Pass, exc: BaseException | None) -> None:
        """The pass's ``memory_end`` event, and its graph watched for being kept alive
        (capture/memory.py)."""
        if p.memory is None:
            return
        try:
            retained = bool(p.options.get("retain_graph"))
            kept = None
            if p.parent is None:
                frees = exc is None and not retained and not p.options.get("create_graph")
                held = 0 if retained else sum(
                    size for size, holders in zip(p.memory.sizes, p.memory.holders, strict=True)
                    if not all(p.ran[j] for j in holders))
                kept = self.kept.end(p.number, p.graph, p.options.get("roots") or [], frees,
                                     held, naming.user_frame(sys._getframe(1)))
            self._emit(end_event(p.number, p.memory, p.ran, retained, kept))
        except Exception:  # noqa: BLE001 - informative only: never break a pass
            pass

    def _retained_and_shards(self, p: Pass) -> None:
        """``accumulate`` events of a pass's retained grads and FSDP shards, read after it."""
        graph = p.graph
        batch = SummaryBatch()  # every retained .grad in one batch: one read on a GPU
        done = []
        for ref, index, name, before in p.retained:
            tensor = ref()
            if tensor is not None and p.ran[index]:
                done.append((index, name, before, batch.add(tensor.grad)))
        shards = []  # FSDP leaves: the sharded .grad, after the reduce-scatters of the pass
        for index, param in p.shards.items():
            if p.ran[index]:
                shards.append((index, batch.add(param.grad)))
        summaries = batch.compute() if len(batch) else []
        for index, slot in shards:
            self._emit({"event": "accumulate", "pass": p.number, "leaf": p.leaf_names.get(index),
                        "id": graph.ids[index], "before": p.before.get(index),
                        "after": None if slot is None else summaries[slot], "retained": False,
                        "sharded": True})
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

    def _watch_retained(self, p: Pass) -> None:
        """Mark a retained graph so its release, and whether any pass reused it, is reported."""
        marker = Retained(p.number)
        graph = p.graph
        total = 0
        for i, node in enumerate(graph.nodes):
            if graph.names[i] != ACCUMULATE:
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


_SHOWN: dict[str, tuple[str, str | None]] = {}  # node name -> display name and its JSON text


def _shown(name: str) -> tuple[str, str | None]:
    hit = _SHOWN.get(name)
    if hit is None:
        shown = display_name(name)
        if len(_SHOWN) >= 65536:
            _SHOWN.clear()
        hit = _SHOWN[name] = (shown, name_text(shown))
    return hit
