"""Diagnoses read off the event stream: freed graphs, in-place edits, NaN origins, unneeded
``retain_graph`` (a forgotten ``zero_grad()`` is judged in ``accumulating``).

``retain_graph`` is judged per call site over all its passes (``finish`` at the script's end):
a site is blamed only when none of its retained graphs was gone back through, and only for a
``retain_graph=True`` the user's line passed (``retain_graph_by`` names torch's or a library's).

``EventRules.feed(event)`` returns ``(key, diagnosis)`` pairs; the key names the cause, so the
caller can report each cause once. Only event dicts are read — never a tensor or a node — and
the memory kept between passes is bounded.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from backstep.engine.diagnostics import text

Found = tuple[tuple[Any, ...], dict[str, Any]]

MAX_PASSES = 4096  # callers remembered, to name the pass that freed a graph
MAX_FREED = 200_000  # node ids remembered with the pass that freed their saved tensors
MAX_RETAINED = 64  # retain_graph passes whose graph is watched for reuse
MAX_SITES = 4096  # retain_graph call sites judged over all their passes
MAX_STATUSES = 4096  # saved lists remembered with their statuses (each held: ids stay unique)
NONFINITE_PER_PASS = 3
_SECOND_TIME = "backward through the graph a second time"
_INPLACE = "modified by an inplace operation"
# statuses of tensors a pass frees ("unknown": a torch without SavedTensor.data, a tensor all the same)
_HELD = frozenset({"alive", "freed", "packed", "unknown"})
_UNSEEN = object()  # quiet_nodes: no event read yet
_NO_STATUS: frozenset[str] = frozenset()
_VERSIONS = re.compile(r"is at version (\d+); expected version (\d+)")


def diagnosis(pass_: int | None, kind: str, title: str, message: str, *, severity: str,
              node: int | None = None, source: dict[str, Any] | None = None,
              related: list[dict[str, Any] | None] | None = None) -> dict[str, Any]:
    """The ``diagnosis`` event (``title``, ``severity`` and ``related`` extend the schema)."""
    src = None
    if source and source.get("line"):
        src = {"file": source.get("file"), "line": source.get("line"), "code": source.get("code")}
    return {"event": "diagnosis", "pass": pass_, "kind": kind, "title": title,
            "severity": severity, "message": message, "node": node, "source": src,
            "related": [r for r in (related or []) if r]}


def source_key(source: dict[str, Any] | None) -> tuple[Any, Any]:
    return (source.get("file"), source.get("line")) if source else (None, None)


class PassInfo:
    """What one running pass announced: its caller, roots, and its nodes by id."""

    __slots__ = ("number", "parent", "api", "retain", "caller", "roots", "nodes", "origins")

    def __init__(self, event: dict[str, Any]) -> None:
        self.number: int = event.get("pass", 0)
        self.parent: int | None = event.get("parent")
        self.api: str = event.get("api", "backward")
        self.retain = bool(event.get("retain_graph"))
        self.caller: dict[str, Any] | None = event.get("caller")
        self.roots: set[int] = set(event.get("roots") or ())
        self.nodes: dict[int, dict[str, Any]] = {n["id"]: n for n in event.get("nodes") or ()}
        self.origins = 0

    def parents_of(self, node_id: int) -> list[dict[str, Any]]:
        return [n for n in self.nodes.values() if node_id in (n.get("next") or ())]


class EventRules:
    """State between events, and one handler per event kind."""

    def __init__(self) -> None:
        self.passes: dict[int, PassInfo] = {}
        self.callers: OrderedDict[int, dict[str, Any] | None] = OrderedDict()
        self.freed_by: OrderedDict[int, int] = OrderedDict()
        self.last_pass: int | None = None
        # id(a node's saved list) -> (the list, its statuses, modified, held): ``_read_saved``
        self._statuses: dict[int, tuple[Any, set[str], bool, bool]] = {}
        # retain_graph pass -> [its node ids (leaves excluded: every graph that uses a parameter
        # shares its AccumulateGrad), reused by a later pass]
        self.retained: OrderedDict[int, tuple[frozenset[int], list[bool]]] = OrderedDict()
        # a retain_graph call site -> [some pass of it was gone back through, its first
        # unneeded release waiting for the script's end]: a site is judged over all its passes
        # (truncated BPTT's last pass over each graph is unneeded, the others were not)
        self.sites: OrderedDict[tuple[Any, ...], list[Any]] = OrderedDict()
        self.site_of: OrderedDict[int, tuple[Any, ...]] = OrderedDict()
        self.finished = False

    def feed(self, event: dict[str, Any]) -> list[Found]:
        kind = event.get("event")
        if kind == "pass_begin":
            self._begin(event)
        elif kind == "node":
            return self.node(event)
        elif kind == "pass_end":
            return self._end(event)
        elif kind == "graph_released":
            return self._released(event)
        return []

    # -- pass bookkeeping ----------------------------------------------------------------------
    def _begin(self, event: dict[str, Any]) -> None:
        info = PassInfo(event)
        self.passes[info.number] = info
        self.last_pass = info.number
        self.callers[info.number] = info.caller
        while len(self.callers) > MAX_PASSES:
            self.callers.popitem(last=False)
        if self.retained:
            for number, (ids, reused) in list(self.retained.items()):
                if not reused[0] and not ids.isdisjoint(info.nodes):
                    reused[0] = True
                    self._site_needed(number)
        # create_graph implies retain_graph; one passed by torch or a library (jacobian's) is
        # not the user's to remove
        if info.retain and not event.get("create_graph") and not event.get("retain_graph_by"):
            ids = frozenset(i for i, n in info.nodes.items() if n.get("name") != "AccumulateGrad")
            self.retained[info.number] = (ids, [False])
            while len(self.retained) > MAX_RETAINED:
                self.retained.popitem(last=False)
            site = source_key(info.caller) if info.caller else ("pass", info.number)
            self.site_of[info.number] = site
            while len(self.site_of) > MAX_PASSES:
                self.site_of.popitem(last=False)
            if site not in self.sites:
                self.sites[site] = [False, None]
                while len(self.sites) > MAX_SITES:
                    self.sites.popitem(last=False)

    def _site_needed(self, number: int) -> None:
        """Pass ``number``'s graph was gone back through: its call site needed retain_graph."""
        site = self.site_of.get(number)
        state = self.sites.get(site) if site is not None else None
        if state is not None:
            state[0], state[1] = True, None

    def _end(self, event: dict[str, Any]) -> list[Found]:
        self.passes.pop(event.get("pass", 0), None)
        return []

    def _node_info(self, info: PassInfo | None, node_id: int) -> tuple[str | None, Any]:
        node = info.nodes.get(node_id) if info else None
        return (node.get("name"), node.get("source")) if node else (None, None)

    # -- node events -------------------------------------------------------------------------
    def node(self, event: dict[str, Any]) -> list[Found]:
        info = self.passes.get(event.get("pass", 0))
        saved = event.get("saved") or ()
        error = event.get("error")
        if saved:
            # a recorded pass shares one saved list among the nodes that save alike
            hit = self._statuses.get(id(saved))
            if hit is None or hit[0] is not saved:
                hit = self._read_saved(saved)
            statuses = hit[1]
        else:
            statuses = _NO_STATUS
        if not error and "modified" not in statuses:  # the common case: one pass over `saved`
            if info is not None and not info.retain and not statuses.isdisjoint(_HELD):
                self._remember_freed(event.get("id"), info.number)
            hit = self._nonfinite(info, event)
            return [hit] if hit is not None else []
        error = error or ""
        found: list[Found] = []
        if _SECOND_TIME in error or ("freed" in statuses and _INPLACE not in error):
            found.append(self._graph_freed(info, event, list(saved), error))
        modified = [s for s in saved if s.get("status") == "modified"]
        if modified or _INPLACE in error:
            found.append(self._inplace(info, event, modified, error))
        return found

    def quiet_nodes(self, events: list[dict[str, Any]], start: int,
                    accumulate: Callable[[int], bool | None] | None = None) -> int:
        """Analyse the node events from ``start`` on that find nothing (the common case) as
        ``node`` does; return the index of the first event that is not one, unanalysed.
        ``accumulate(index)``: analyses the ``accumulate`` event at ``index`` on the way (a
        pass's leaves come between its nodes) and says whether the run goes on: True; False,
        it ends after that event (what it set off is followed first); None, it ends before
        it, unanalysed."""
        passes, cache, count = self.passes, self._statuses, len(events)
        number: Any = _UNSEEN  # the pass of the events before, and its info: read once a run
        info: PassInfo | None = None
        i = start
        while i < count:
            event = events[i]
            get = event.get
            kind = get("event")
            if kind != "node" or get("error"):
                if kind == "accumulate" and accumulate is not None:
                    went_on = accumulate(i)
                    if went_on is not None:  # analysed: the run goes on, or ends after it
                        i += 1
                        if went_on:
                            continue
                break
            saved = get("saved") or ()
            if saved:
                hit = cache.get(id(saved))
                if hit is None or hit[0] is not saved:
                    try:  # a list not seen yet, read as ``node`` reads it
                        hit = self._read_saved(saved)
                    except Exception:  # noqa: BLE001 - ``node`` fails on it the same way
                        break
                if hit[2]:  # a tensor modified in place
                    break
                held = hit[3]
            else:
                held = False
            now = get("pass", 0)
            if now != number:
                number, info = now, passes.get(now)
            if info is not None:
                outgoing = get("grad_outputs")
                if outgoing and info.origins < NONFINITE_PER_PASS:
                    incoming = get("grad_inputs")
                    if incoming is not None and (
                            _count(incoming) or (get("id") in info.roots and _count(outgoing))):
                        break  # ``_nonfinite`` has something to look at
                if held and not info.retain:
                    self._remember_freed(get("id"), info.number)
            i += 1
        return i

    def _read_saved(self, saved: list[dict[str, Any]]) -> tuple[Any, set[str], bool, bool]:
        """Remember a saved list (a recorded pass shares one among the nodes that save alike)
        with its statuses, whether one was modified in place, and whether one is held."""
        cache = self._statuses
        if len(cache) >= MAX_STATUSES:
            cache.clear()
        statuses = {s.get("status") for s in saved}
        hit = cache[id(saved)] = (saved, statuses, "modified" in statuses,
                                  not statuses.isdisjoint(_HELD))
        return hit

    def _remember_freed(self, node_id: int, number: int) -> None:
        freed_by = self.freed_by
        freed_by.pop(node_id, None)  # re-inserted last: the oldest entries go first
        freed_by[node_id] = number
        if len(freed_by) > MAX_FREED:
            for _ in range(len(freed_by) - MAX_FREED):
                freed_by.popitem(last=False)

    def _graph_freed(self, info: PassInfo | None, event: dict[str, Any],
                     saved: list[dict[str, Any]], error: str) -> Found:
        node_id = event.get("id")
        name = event.get("name") or "a node"
        _, source = self._node_info(info, node_id)
        # a torch without SavedTensor.data cannot tell; torch's error says they were freed
        gone = ("freed", "unknown") if _SECOND_TIME in error else ("freed",)
        freed = [s["name"] for s in saved if s.get("status") in gone]
        what = (f"the tensor{'s' if len(freed) > 1 else ''} it saved in the forward "
                f"({text.names(freed)})") if freed else "the tensors it saved in the forward"
        earlier = self.freed_by.get(node_id)
        caller = self.callers.get(earlier) if earlier is not None else None
        near = info.caller if info else None
        if earlier is not None:
            by = f"pass {earlier} ({text.where(caller, near)})" if caller else f"pass {earlier}"
        else:
            by = "an earlier backward pass"
        fix_line = f" at {text.where(caller, near)}" if caller else " on the first backward"
        message = (
            f"{text.made_at(name, source)} needs {what}, but {by} already went through this "
            f"graph and freed {'it' if len(freed) == 1 else 'them'}. After a backward pass PyTorch frees the values each node "
            f"saved, to save memory, unless the pass is called with retain_graph=True. "
            f"Fix: if you really need to go backward through the same graph twice, pass "
            f"retain_graph=True{fix_line}; usually the better fix is to run the forward again "
            f"so each backward gets a fresh graph."
        )
        diag = diagnosis(
            event.get("pass"), "graph_freed", "Backward through a graph that was already freed",
            message, severity="error", node=node_id, source=source,
            related=[text.related("freed_by", caller), text.related("backward", near)],
        )
        return ("graph_freed", name, *source_key(source), node_id if not source else None), diag

    def _inplace(self, info: PassInfo | None, event: dict[str, Any],
                 modified: list[dict[str, Any]], error: str) -> Found:
        node_id = event.get("id")
        name = event.get("name") or "a node"
        _, source = self._node_info(info, node_id)
        entry = modified[0] if modified else {}
        saved_name = entry.get("name")
        versions = entry.get("version") or {}
        expected, found = versions.get("saved"), versions.get("now")
        match = _VERSIONS.search(error)
        if match and (expected is None or found is None):
            found, expected = int(match.group(1)), int(match.group(2))
        culprit = entry.get("modified_by")
        what = text.saved_role(saved_name) if saved_name else "one of the tensors it saved"
        shape = entry.get("shape")
        if shape is not None:
            what += f" (shape {shape}, {entry.get('dtype')})"
        version_text = (f"it was saved at version {expected} and is now at version {found}"
                        if expected is not None and found is not None else "its version changed")
        if culprit and culprit.get("line"):
            op = culprit.get("op")
            blame = f"The in-place op was `{op}` at {text.where(culprit, source)}."
        else:
            op = None
            blame = ("Look for an in-place op on it after the forward line: a method ending in "
                     "`_`, `+=`, `x[...] = ...`, `inplace=True`, or an optimizer step.")
        message = (
            f"{text.made_at(name, source)} saved {what} in the forward to compute its gradient, "
            f"but {version_text}: an in-place operation changed it before backward, so the "
            f"gradient would be computed from the wrong values (PyTorch refuses). {blame} "
            f"Fix: {text.out_of_place(op, culprit)}."
        )
        diag = diagnosis(
            event.get("pass"), "inplace_modified", "A saved tensor was modified in place",
            message, severity="error", node=node_id, source=source,
            related=[text.related("inplace_op", culprit)],
        )
        key = ("inplace", name, saved_name, *source_key(source),
               *source_key(culprit if culprit and culprit.get("line") else None),
               node_id if not source else None)
        return key, diag

    def _nonfinite(self, info: PassInfo | None, event: dict[str, Any]) -> Found | None:
        incoming = event.get("grad_outputs")
        outgoing = event.get("grad_inputs")
        if not incoming or outgoing is None or info is None:
            return None
        if info.origins >= NONFINITE_PER_PASS:
            return None
        bad_out = _count(outgoing)
        node_id = event.get("id")
        if not bad_out and node_id not in info.roots:
            return None  # the common case: nothing non-finite leaves this node
        bad_in = _count(incoming)
        if bad_in is None:
            return None
        name = event.get("name") or "a node"
        _, source = self._node_info(info, node_id)
        if bad_in and node_id in info.roots and info.origins == 0:
            info.origins += 1
            message = (
                f"The gradient handed to backward for {text.made_at(name, source)} already has "
                f"{bad_in} NaN/Inf value(s): it was not born in the graph but passed in "
                f"(the `gradient=` argument of backward, or `grad_outputs=` of autograd.grad)."
            )
            diag = diagnosis(info.number, "nonfinite", "NaN/Inf gradient passed to backward",
                             message, severity="error", node=node_id, source=info.caller)
            return ("nonfinite-root", *source_key(info.caller)), diag
        if bad_in or not bad_out:
            return None
        info.origins += 1
        hint = text.op_hint(name)
        why = (f" Here {hint}." if hint else
               " Its backward formula (the derivative of the forward op) produced them from "
               "finite inputs: look for a division, a log, a sqrt or an overflow at that line, "
               "or for NaN/Inf already in the forward values it saved.")
        trap = ""
        masks = [p.get("name", "") for p in info.parents_of(node_id)]
        if any(m.startswith(text.MASKING) for m in masks):
            trap = (" The gradient came through a masking op (torch.where, masked_fill or "
                    "indexing): the forward picked other values where this op misbehaves, but "
                    "backward still runs through every element of this op and 0 * inf = NaN. "
                    "Fix: make the input safe before the op, e.g. "
                    "`torch.where(mask, x, 1.0).sqrt()` inside the where (the 'double where').")
        message = (
            f"NaN/Inf gradient is born at {text.made_at(name, source)}: the gradient flowing "
            f"into it was finite, but the gradient it passes on has {bad_out} NaN/Inf "
            f"value(s).{why}{trap}"
        )
        diag = diagnosis(info.number, "nonfinite", "NaN/Inf gradient is born here", message,
                         severity="error", node=node_id, source=source)
        return ("nonfinite", name, *source_key(source), node_id if not source else None), diag

    # -- retained graphs ---------------------------------------------------------------------
    def finish(self) -> list[Found]:
        """The script is ending: the call sites none of whose retained graphs was gone back
        through (a release after this is judged at once)."""
        self.finished = True
        out = [state[1] for state in self.sites.values() if state[1] is not None and not state[0]]
        for state in self.sites.values():
            state[1] = None
        return out

    def _released(self, event: dict[str, Any]) -> list[Found]:
        number = event.get("pass")
        watched = self.retained.pop(number, None) if number is not None else None
        if watched is None or watched[1][0]:
            return []  # reused, or a create_graph pass, or one we did not see begin
        site = self.site_of.get(number) if number is not None else None
        state = self.sites.get(site) if site is not None else None
        if state is not None and state[0]:
            return []  # another pass of this call site needed retain_graph
        caller = self.callers.get(number) if number is not None else None
        nbytes = event.get("bytes") or 0
        held = (f"every tensor its graph saved ({text.size(nbytes)})" if nbytes
                else "every tensor its graph saved")
        at = f" ({text.where(caller)})" if caller else ""
        message = (
            f"Pass {number}{at} used retain_graph=True, which keeps {held} in memory for "
            f"another backward through the same graph. None came: the graph was dropped without "
            f"being used again, so the memory was held for nothing. Fix: remove "
            f"retain_graph=True there; the saved tensors are then freed node by node as the "
            f"pass runs."
        )
        diag = diagnosis(number, "retain_graph_unused", "retain_graph=True was not needed",
                         message, severity="warning", source=caller)
        found = (("retain_graph_unused", *source_key(caller), None if caller else number), diag)
        if state is not None and not self.finished:
            if state[1] is None:
                state[1] = found  # judged at the end, over all the site's passes
            return []
        return [found]


def _count(summaries: list[Any]) -> int | None:
    """Total non-finite values in a list of summaries; None when any count is unknown."""
    total = 0
    for s in summaries:
        if s is None:
            continue
        bad = s.get("nonfinite")
        if bad is None:
            return None
        total += bad
    return total

