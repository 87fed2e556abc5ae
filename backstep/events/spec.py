"""Every event of the stream, declared once: its fields in the order the recorder writes them,
their types, the value a trace leaves out, and where the event goes.

Events flow from the debuggee (the process running the user's script) to whoever consumes them:
a trace file (``trace``), the live UI (``live``), or the two ends of a connection before it
carries either (``handshake``). Every event is one JSON object on one line with ``"event"``.

What is derived from here, and nowhere else stated: the schema check of an event that comes in
from outside (``check``), the keys a trace leaves out at their default (``form``), the kinds of
line a trace's index tells apart (``PASS_KINDS``), the events the live reader shows at once
(``URGENT``), the grammar of the fast node-line reader (``tui/state/node_line``) and the event
reference in docs/trace.md (``reference``; tests/test_events_docs.py compares the two).
Unknown events and unknown fields pass the check: the stream may be extended freely. Stdlib only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from backstep.events.breakpoints import STOP_REASONS
from backstep.events.types import (
    BOOL_OR_NULL,
    INT,
    INT_OR_NULL,
    NUM_OR_NULL,
    SCALAR,
    STR,
    STR_OR_NULL,
    Checker,
    Type,
    fields_of,
    is_int,
    list_of,
    obj_checker,
    split,
    what,
)

NO_DEFAULT: Any = object()  # a field a trace always writes


@dataclass(frozen=True)
class Field:
    """One field: its type (None: not checked), the value a trace leaves out (``default``),
    how a trace writes what it holds (``form``: "summary", "summaries", "saved",
    "graph_nodes"), and what it means."""

    type: Type | None
    doc: str
    default: Any = NO_DEFAULT
    form: str | None = None


class Obj:
    """An object nested in an event (a summary, a saved tensor, a graph node): its fields, the
    ones it cannot do without, its check and the keys a trace leaves out at their default."""

    def __init__(self, words: str, fields: dict[str, Field], required: tuple[str, ...] = (),
                 null: bool = True) -> None:
        self.words = words
        self.fields = fields
        self.check: Checker = obj_checker(
            {k: f.type for k, f in fields.items() if f.type is not None}, words, required, null)
        self.defaults = {k: f.default for k, f in fields.items() if f.default is not NO_DEFAULT}


@dataclass(frozen=True)
class Event:
    """One event: its fields in the recorder's key order (``event`` first, not listed), the ones
    it cannot do without, where it goes, whether the live UI draws it at once, what it means."""

    doc: str
    fields: dict[str, Field]
    where: frozenset[str]
    required: tuple[str, ...] = ()
    urgent: bool = False
    checked: bool = True  # False: handshake lines, read by process/auth and transport alone

    @property
    def defaults(self) -> dict[str, Any]:
        return {k: f.default for k, f in self.fields.items() if f.default is not NO_DEFAULT}

    @property
    def forms(self) -> dict[str, str]:
        return {k: f.form for k, f in self.fields.items() if f.form is not None}


TRACE, LIVE, HANDSHAKE = "trace", "live", "handshake"
BOTH = frozenset({TRACE, LIVE})
F = Field

SOURCE = Obj("{file, line, code} or null", {
    "file": F(STR_OR_NULL, "the file"), "line": F(INT_OR_NULL, "the line number"),
    "code": F(STR_OR_NULL, "the line's text"), "role": F(STR_OR_NULL, "what the line is")})
# a summary's values: numbers (a complex one as [re, im]), or ints and bools
VALUE = ("number, bool, [re, im] or null",
         lambda v: NUM_OR_NULL[1](v) or type(v) is bool
         or (type(v) is list and len(v) == 2 and NUM_OR_NULL[1](v[0]) and NUM_OR_NULL[1](v[1])))
INTS = list_of(INT, "list of ints or null")
SHARD = Obj("{placements, global_shape} or null", {
    "placements": F(list_of(STR, "list of str or null"), "the DTensor's placements"),
    "global_shape": F(INTS, "the whole tensor's shape")})
SUMMARY = Obj("summary object or null", {
    "shape": F(INTS, "the tensor's shape"),
    "dtype": F(STR_OR_NULL, "its dtype"),
    "device": F(STR_OR_NULL, "its device", default="cpu"),
    "min": F(NUM_OR_NULL, "the least value"), "max": F(NUM_OR_NULL, "the greatest value"),
    "mean": F(NUM_OR_NULL, "the mean"), "norm": F(NUM_OR_NULL, "the 2-norm"),
    "nonfinite": F(INT_OR_NULL, "how many values are NaN or Inf", default=0),
    "nnz": F(INT_OR_NULL, "a sparse tensor's stored values"),
    "values": F(list_of(VALUE, "list of values or null"), "the values of a small tensor"),
    "hist": F(list_of(INT, "list of ints or null"), "counts of the finite values in bins"),
    "note": F(STR_OR_NULL, "why some numbers are missing"),
    "layout": F(STR_OR_NULL, "a layout other than strided"),
    "shard": F(SHARD.check, "a DTensor's: the summary is of this rank's local shard"),
})
SUMMARIES = list_of(SUMMARY.check, "list of summaries or null")
SAVED_ENTRY = Obj("saved-tensor object", {
    "name": F(STR, "the saved tensor's name in the node"),
    "status": F(STR_OR_NULL, "alive, freed, modified, none, packed or scalar",
                default="alive"),
    "shape": F(INTS, "its shape"), "dtype": F(STR_OR_NULL, "its dtype"),
    "bytes": F(INT_OR_NULL, "what it holds"),
    "value": F(lambda v: (
        None if SCALAR[1](v) or (type(v) is list and all(map(SCALAR[1], v)))
        else ("", f"expected a number, str or list of them, got {what(v)}")),
        "a saved scalar's value, or a 0-dim CPU tensor's (a wrapped scalar such as -0.5)"),
    "version": F(Obj("{saved, now} or null", {
        "saved": F(INT_OR_NULL, "the version saved"),
        "now": F(INT_OR_NULL, "the version now")}).check,
        "the version counter when saved and now", default=None),
    "modified_by": F(Obj("{op, file, line} or null", {
        "op": F(STR_OR_NULL, "the in-place op"), "file": F(STR_OR_NULL, "its file"),
        "line": F(INT_OR_NULL, "its line"), "code": F(STR_OR_NULL, "its text"),
        "version": F(INT_OR_NULL, "the version it made")}).check,
        "the in-place op that modified it"),
}, required=("name",), null=False)
SAVED = list_of(SAVED_ENTRY.check, "list of saved tensors or null")
GRAPH_NODE = Obj("node object", {
    "id": F(INT, "the node's id, stable across passes over a retained graph"),
    "name": F(STR, "its name, as MulBackward0"),
    "next": F(list_of(INT_OR_NULL, "list of ids or null"), "the ids it passes gradients to"),
    "leaf": F(STR_OR_NULL, "the leaf's name, for an AccumulateGrad", default=None),
    "source": F(SOURCE.check, "the forward line that made it (an index into sources in a "
                "trace)", default=None),
    "module": F(STR_OR_NULL, "the path of the module that made it", default=None),
    "comm": F(STR_OR_NULL, "the collective it waits on"),
}, required=("id", "name"), null=False)
IDS = list_of(INT, "list of ids or null")
REGION_OP = Obj("region op object", {
    "name": F(STR_OR_NULL, "the op's name"), "op": F(STR_OR_NULL, "its target"),
    "module": F(STR_OR_NULL, "its module"), "forward": F(STR_OR_NULL, "its forward op"),
    "source": F(SOURCE.check, "its forward line")}, null=False)
FUNCTION = Obj("{file, line, name} or null", {
    "file": F(STR_OR_NULL, "the file"), "line": F(INT_OR_NULL, "the line"),
    "name": F(STR_OR_NULL, "the function's name")})
NAMES = list_of(STR_OR_NULL, "list of names (or null) or null")
STOP = Obj("stop object", {
    "stop": F(INT_OR_NULL, "the stop's number"), "pass": F(INT_OR_NULL, "its pass"),
    "step": F(INT_OR_NULL, "its step"), "id": F(INT_OR_NULL, "its node"),
    "name": F(STR_OR_NULL, "the node's name"), "thread": F(STR_OR_NULL, "the paused thread"),
    "device": F(STR_OR_NULL, "the gradient's device")}, null=False)

# memory (engine/capture/memory.py): a pass's saved storages, counted once each
CUDA_FIGURES = Obj("{allocated, peak} or null", {
    "allocated": F(INT_OR_NULL, "torch.cuda.memory_allocated()"),
    "peak": F(INT_OR_NULL, "torch.cuda.max_memory_allocated()")})
STORAGE = Obj("storage object", {
    "bytes": F(INT, "the storage's size (its nbytes), counted once however many views"),
    "module": F(STR_OR_NULL, "the module whose forward made it", default=None),
    "op": F(STR_OR_NULL, "the type of the node whose forward made it, as TanhBackward0 (null: "
            "made outside the graph)", default=None),
    "node": F(INT_OR_NULL, "the id of the node that made it (its line is that node's in "
              "pass_begin; null: the first of held_by's)", default=None),
    "held_by": F(IDS, "the ids of the nodes that save it"),
    "names": F(list_of(list_of(STR, "list of str"), "list of lists of str or null"),
               "beside held_by: the names each of those nodes saves it under (as its node "
               "events' saved list names them)", default=None),
}, required=("bytes",), null=False)
KEPT = Obj("{graphs, bytes, passes, by} or null", {
    "graphs": F(INT_OR_NULL, "earlier passes whose graph is still alive"),
    "bytes": F(INT_OR_NULL, "the saved bytes those graphs still hold"),
    "passes": F(IDS, "the last of those passes"),
    "by": F(Obj("{name, source, kind} or null", {
        "name": F(STR_OR_NULL, "the variable"), "source": F(SOURCE.check, "its line"),
        "kind": F(STR_OR_NULL, "its type")}).check,
        "the caller's variable that reaches one of them, or null"),
})
HELD = list_of(list_of(INT, "[step, bytes]"), "list of [step, bytes] or null")

EVENTS: dict[str, Event] = {
    "session": Event("the script started", {
        "version": F(INT_OR_NULL, "the schema version"),
        "torch": F(STR_OR_NULL, "torch's version"),
        "argv": F(list_of(STR, "list of str or null"),
                  "the script's argv; [\"-m\", module, ...] for a module run as python -m does"),
        "pid": F(INT_OR_NULL, "the process id"), "python": F(STR_OR_NULL, "Python's version"),
        "rank": F(INT_OR_NULL, "RANK as the launcher set it, or null"),
        "local_rank": F(INT_OR_NULL, "LOCAL_RANK, or null"),
        "world_size": F(INT_OR_NULL, "WORLD_SIZE, or null"),
        "hostname": F(STR_OR_NULL, "the machine"),
        "eager": F(BOOL_OR_NULL, "torch.compile was turned off (--eager)"),
    }, BOTH, urgent=True),
    "process_group": Event("the torch.distributed default group, once, before the first pass "
                           "that runs under it", {
        "backend": F(STR_OR_NULL, "its backend"), "rank": F(INT_OR_NULL, "this rank"),
        "world_size": F(INT_OR_NULL, "the group's size"),
        "timeout": F(NUM_OR_NULL, "the collective timeout in seconds, or null"),
    }, BOTH),
    "pass_begin": Event("a backward pass starts: its graph", {
        "pass": F(INT, "the pass's number"),
        "parent": F(INT_OR_NULL, "the pass it runs inside (a reentrant checkpoint), or null"),
        "api": F(STR_OR_NULL, "backward or grad"),
        "retain_graph": F(BOOL_OR_NULL, "retain_graph as given"),
        "create_graph": F(BOOL_OR_NULL, "create_graph as given"),
        "caller": F(SOURCE.check, "the line that called backward"),
        "roots": F(IDS, "the ids of the nodes it starts from"),
        "inputs": F(list_of(INT_OR_NULL, "list of ids (or null) or null"),
                    "torch.autograd.grad's inputs, or null"),
        "retain_graph_by": F(SOURCE.check, "the line inside torch or a library that passed "
                             "retain_graph=True (jacobian, hessian), when the caller's did not",
                             default=None),
        "thread": F(STR_OR_NULL, "the thread it runs on"),
        "before_provenance": F(BOOL_OR_NULL, "true when its graph was built before backstep "
                               "attached (no forward line can be recovered)", default=None),
        "leaves": F(list_of(INT, "list of ids or null"), "the leaves' ids in model order (as "
                    "named_parameters() lists them, unnamed leaves last); absent without leaves",
                    default=None),
        "nodes": F(list_of(GRAPH_NODE.check, "list of nodes or null"), "the graph's nodes "
                   "(a trace writes each distinct source once, in sources)", form="graph_nodes"),
    }, BOTH, required=("pass",), urgent=True),
    "node": Event("a node ran, in execution order", {
        "pass": F(INT, "its pass"), "step": F(INT_OR_NULL, "its place in the pass, from 1"),
        "id": F(INT, "the node's id"), "name": F(STR, "its name"),
        "grad_outputs": F(SUMMARIES, "summaries of the gradients it received",
                          form="summaries"),
        "grad_inputs": F(SUMMARIES, "summaries of the gradients it produced", form="summaries"),
        "saved": F(SAVED, "its saved tensors", form="saved"),
        "error": F(STR_OR_NULL, "the error it raised, or null", default=None),
        "thread": F(STR_OR_NULL, "the thread it ran on, when not its pass's (a CUDA device "
                    "thread)"),
    }, BOTH, required=("pass", "id", "name")),
    "accumulate": Event("a leaf's .grad was accumulated (or a retained non-leaf's set)", {
        "pass": F(INT, "its pass"), "leaf": F(STR_OR_NULL, "the leaf's name"),
        "id": F(INT_OR_NULL, "its AccumulateGrad node"),
        "before": F(SUMMARY.check, "the .grad before, or null", form="summary"),
        "after": F(SUMMARY.check, "the .grad after", form="summary"),
        "retained": F(BOOL_OR_NULL, "true for a non-leaf's retain_grad", default=False),
        "version": F(INT_OR_NULL, "the leaf's version counter"),
        "sharded": F(BOOL_OR_NULL, "the leaf is a DTensor (its local shard summarized)"),
    }, BOTH, required=("pass",)),
    "pass_end": Event("a backward pass ended", {
        "pass": F(INT, "its pass"), "status": F(STR_OR_NULL, "ok or error"),
        "error": F(STR_OR_NULL, "the error's message, or null"),
        "skipped": F(IDS, "the ids of the nodes that never ran"),
    }, BOTH, required=("pass",), urgent=True),
    "diagnosis": Event("a likely bug found (docs/diagnostics.md)", {
        "pass": F(INT_OR_NULL, "the pass it is about"), "kind": F(STR_OR_NULL, "its kind"),
        "title": F(STR_OR_NULL, "one line"), "severity": F(STR_OR_NULL, "its severity"),
        "message": F(STR_OR_NULL, "what was found"),
        "node": F(INT_OR_NULL, "the node it is about"),
        "source": F(SOURCE.check, "the line it is about"),
        "related": F(list_of(SOURCE.check, "list of sources or null"), "other lines involved"),
    }, BOTH, urgent=True),
    "memory": Event("a recorded pass's saved activations at its start, after pass_begin "
                    "(docs/memory.md)", {
        "pass": F(INT, "its pass"),
        "bytes": F(INT_OR_NULL, "the total: each saved storage once, leaves left out"),
        "storages": F(list_of(STORAGE.check, "list of storages or null"),
                      "every saved storage, in the order first saved"),
        "leaves": F(INT_OR_NULL, "the bytes of saved leaves (parameters), left out of the total"),
        "leaf_saved": F(list_of(list_of(("an id or a name", lambda v: type(v) in (int, str)),
                                         "[id, name, ...]"), "list of [id, name, ...] or null"), "the saved tensors whose storage is a leaf's, "
            "left out: per node that saves some, its id, then their names", default=None),
        "cuda": F(CUDA_FIGURES.check, "the CUDA allocator's figures at the start", default=None),
    }, BOTH, required=("pass",)),
    "memory_end": Event("a recorded pass's saved storages released, before pass_end", {
        "pass": F(INT, "its pass"),
        "freed": F(list_of(INT_OR_NULL, "list of steps (or null) or null"), "per storage of "
                   "memory, the step that released it, or null (kept: retain_graph, or a node "
                   "that never ran)"),
        "held": F(HELD, "[step, bytes still held after it] at each step that released some"),
        "cuda": F(CUDA_FIGURES.check, "the CUDA allocator's figures at the end", default=None),
        "kept": F(KEPT.check, "earlier passes' graphs still alive (graph_kept_alive)",
                  default=None),
    }, BOTH, required=("pass",)),
    "graph_released": Event("the pass's graph was freed (or kept, retain_graph)", {
        "pass": F(INT, "its pass"),
        "reused": F(("int or bool", lambda v: type(v) in (int, bool)),
                    "the graph was kept for a later pass"),
        "bytes": F(INT_OR_NULL, "what its saved tensors held"),
    }, BOTH, required=("pass",)),
    "edit": Event("the person replaced a gradient at a stop, for the rest of the pass", {
        "pass": F(INT, "its pass"), "step": F(INT_OR_NULL, "the stop's step"),
        "id": F(INT, "the node"), "name": F(STR_OR_NULL, "its name"),
        "stop": F(INT_OR_NULL, "the stop"), "slot": F(STR_OR_NULL, "grad_outputs or grad_inputs"),
        "what": F(STR_OR_NULL, "the edit, as zero_nonfinite()"),
        "indices": F(list_of(INT, "list of int or null"), "the gradients edited"),
        "before": F(list_of(SUMMARY.check, "list of summaries or null"), "them before"),
        "after": F(list_of(SUMMARY.check, "list of summaries or null"), "them after"),
        "changed": F(INT_OR_NULL, "how many values the edit changed (an edit that changes "
                     "none is not sent)"),
    }, BOTH, required=("pass", "id"), urgent=True),
    "region": Event("a torch.compile region of the pass ran (engine/compiled)", {
        "pass": F(INT, "its pass"), "id": F(INT, "its node"),
        "aot_id": F(INT_OR_NULL, "AOTAutograd's id"),
        "compile_id": F(STR_OR_NULL, "torch.compile's id"),
        "function": F(FUNCTION.check, "the compiled function"),
        "ops": F(list_of(REGION_OP.check, "list of ops or null"), "its backward graph's ops"),
        "ops_left_out": F(INT_OR_NULL, "ops beyond the listing's cap"),
        "reason": F(STR_OR_NULL, "why its ops are not listed"),
        "inputs": F(NAMES, "its inputs' names"), "outputs": F(NAMES, "its outputs' names"),
    }, BOTH, required=("pass", "id")),
    "output": Event("what the script printed, whole lines, in order with the pass events "
                    "(a trace, a remote UI)", {
        "stream": F(STR_OR_NULL, "stdout or stderr"), "text": F(STR_OR_NULL, "the text"),
        "truncated": F(BOOL_OR_NULL, "true at the trace's output cap"),
    }, BOTH),
    "exit": Event("the script ended (normally, by sys.exit, or by an uncaught exception)", {
        "code": F(("int, str or null", lambda v: v is None or type(v) is str or is_int(v)),
                  "its exit code"),
        "traceback": F(STR_OR_NULL, "the uncaught exception's traceback, or null"),
        "passes": F(INT_OR_NULL, "how many backward passes ran, watched or not", default=None),
    }, BOTH, urgent=True),
    # -- a whole run in brief (engine/history, engine/briefed, engine/planned;
    # traces/history_file reads them, a trace's and a live UI's)
    "leaves": Event("leaves seen for the first time, numbered in order from first: history "
                    "lines refer to them by number", {
        "first": F(INT, "the number of the first leaf listed"),
        "names": F(list_of(STR, "list of str or null"), "their names"),
        "modules": F(list_of(STR_OR_NULL, "list of str (or null) or null"),
                     "the module each belongs to (its name up to the last dot), or null"),
    }, BOTH, required=("first", "names")),
    "history": Event("every pass in brief, after it ran, recorded in full or not (not a "
                     "pass's line: its number is n)", {
        "n": F(INT, "the pass's number"),
        "loss": F(("number, nan, inf, -inf or null", lambda v: NUM_OR_NULL[1](v)
                   or v in ("nan", "inf", "-inf")), "the root's value when it is one number"),
        "ids": F(STR, "the leaves with a gradient, by number, as ranges: 0-149 or 0-3,7"),
        "norm": F(STR, "each listed leaf's gradient 2-norm after the pass: base64 of a "
                  "little-endian float32 array, one per leaf in ids, in order"),
        "max": F(STR, "each listed leaf's max |gradient|, encoded as norm is"),
        "nonfinite": F(list_of(list_of(INT, "[position, count]"), "list of [position, count]"),
                       "the leaves with NaN/Inf values: [position in ids, how many]",
                       default=[]),
    }, BOTH, required=("n",)),
    "trip": Event("a --when spec tripped: the pass is written in full from this node on", {
        "n": F(INT, "the pass's number"), "trip": F(INT_OR_NULL, "the trip's number, from 1"),
        "step": F(INT_OR_NULL, "the node's step"), "id": F(INT_OR_NULL, "the node"),
        "name": F(STR_OR_NULL, "its name"),
        "reason": F(STR_OR_NULL, "as a stop's: nonfinite, norm or breakpoint"),
        "detail": F(STR_OR_NULL, "which spec, in words, as a stop says it"),
        "tensors": F(STR_OR_NULL, "the torch.save file of the node's tensors (--tensors), "
                     "relative to the trace's folder, or null"),
    }, frozenset({TRACE}), required=("n",)),
    "stopped": Event("the debuggee paused at a node and waits for a command", {
        "pass": F(INT, "its pass"), "step": F(INT_OR_NULL, "the node's step"),
        "id": F(INT, "the node"), "name": F(STR_OR_NULL, "its name"),
        "reason": F(STR_OR_NULL, ", ".join(STOP_REASONS) + " (events/breakpoints.py)"),
        "detail": F(STR_OR_NULL, "which breakpoint, in words"),
        "after": F(BOOL_OR_NULL, "paused just after the node ran (a gradient breakpoint)"),
        "grad_outputs": F(SUMMARIES, "the gradients it received"),
        "grad_inputs": F(SUMMARIES, "the gradients it produced (after only)"),
        "saved": F(SAVED, "its saved tensors"),
        "thread": F(STR_OR_NULL, "the paused thread"),
        "device": F(STR_OR_NULL, "the gradient's device, or null"),
        "stop": F(INT_OR_NULL, "a number unique to this pause"),
    }, frozenset({LIVE}), required=("pass", "id"), urgent=True),
    "waiting": Event("the other paused threads, in line behind the shown stop", {
        "stops": F(list_of(STOP.check, "list of stops or null"), "longest waiting first"),
    }, frozenset({LIVE})),
    "tensor": Event("the answer to a tensor command", {
        "req": F(INT_OR_NULL, "the command's req"), "shape": F(None, "the tensor's shape"),
        "dtype": F(None, "its dtype"), "numel": F(None, "its size"),
        "offset": F(None, "the first value sent"), "values": F(None, "the values"),
        "shard": F(None, "a DTensor's placements"),
    }, frozenset({LIVE})),
    "evaluated": Event("the answer to an eval command", {
        "req": F(INT_OR_NULL, "the command's req"),
        "ok": F(BOOL_OR_NULL, "false: the text is a traceback"),
        "text": F(STR_OR_NULL, "what it printed"),
    }, frozenset({LIVE})),
    "input": Event("the script is about to wait on its stdin", {}, frozenset({LIVE})),
    "error": Event("a command could not be served", {
        "message": F(STR_OR_NULL, "why"), "req": F(INT_OR_NULL, "the command's req"),
    }, frozenset({LIVE})),
    "challenge": Event("a remote debuggee opens its handshake (process/auth)", {
        "scheme": F(None, "the scheme"), "nonce": F(None, "the server's nonce"),
    }, frozenset({HANDSHAKE}), checked=False),
    "hello": Event("the UI's answer to a challenge (process/auth), or a debuggee's first line "
                   "to its launcher (process/transport)", {
        "nonce": F(None, "the client's nonce"), "mac": F(None, "its proof"),
        "token": F(None, "the launcher's token"), "pid": F(None, "the debuggee's pid"),
    }, frozenset({HANDSHAKE}), checked=False),
    "welcome": Event("the remote debuggee accepts the UI (process/auth)", {
        "mac": F(None, "its proof"),
    }, frozenset({HANDSHAKE}), checked=False),
}

# the kinds of line a trace's index tells apart: the trace events of one pass, in this order
PASS_KINDS = tuple(k for k, e in EVENTS.items() if TRACE in e.where and "pass" in e.fields
                   and k != "session")
# the events the live UI draws at once rather than with the next snapshot
URGENT = frozenset(k for k, e in EVENTS.items() if e.urgent)


def _checks() -> dict[str, tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]]:
    out = {}
    for kind, spec in EVENTS.items():
        if spec.checked:
            types = {k: f.type for k, f in spec.fields.items() if f.type is not None}
            out[kind] = (*split(types), spec.required)
    return out


CHECKS = _checks()


def check(event: Any) -> str | None:
    """Why ``event`` does not fit the event stream's schema, in one line; None when it fits."""
    if type(event) is not dict:
        return f"expected an event object, got {what(event)}"
    kind = event.get("event")
    if type(kind) is not str:
        return (f"field event: expected str, got {what(kind)}" if "event" in event
                else "field event: missing")
    spec = CHECKS.get(kind)
    if spec is None:
        return None  # an event this version does not know: its consumers skip it
    error = fields_of(event, *spec)
    return None if error is None else f"field {error[0][1:]}: {error[1]}"


def reference() -> str:
    """The event reference as docs/trace.md states it (tests compare the two)."""
    lines = []
    for kind, spec in EVENTS.items():
        where = " and ".join(w for w in (TRACE, LIVE, HANDSHAKE) if w in spec.where)
        lines.append(f"- `{kind}` ({where}): {spec.doc}.")
        for name, f in spec.fields.items():
            left = (f", left out at `{_json(f.default)}`" if f.default is not NO_DEFAULT
                    else "")
            lines.append(f"  - `{name}`: {f.doc}{left}")
    for title, obj in (("a summary", SUMMARY), ("a saved tensor", SAVED_ENTRY),
                       ("a graph node", GRAPH_NODE), ("a memory storage", STORAGE)):
        lines.append(f"- {title}:")
        for name, f in obj.fields.items():
            left = (f", left out at `{_json(f.default)}`" if f.default is not NO_DEFAULT
                    else "")
            lines.append(f"  - `{name}`: {f.doc}{left}")
    return "\n".join(lines) + "\n"


def _json(value: Any) -> str:
    return json.dumps(value)
