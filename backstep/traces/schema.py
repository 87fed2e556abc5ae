"""The types of the event stream's fields, checked where events come in from outside.

A trace a colleague sends, or a peer on the other end of ``connect``, can hold anything JSON can:
a list where an id should be, a node with no name, ``Infinity`` for a norm. Every consumer
(index, diff, export, the UI) reads fields as the recorder writes them, so one check at the edge
turns a malformed event into one line (``field nodes[3].next[0]: expected int or null, got str``)
instead of a traceback deep inside a panel. ``check(event)`` returns that line, or None.

What is checked: the type of every field a consumer reads (``protocol``'s docstring and
DESIGN.md name them; the recorder writes exactly these), when it is present; the few fields
nothing works without (an event's name, a pass event's ``pass``, a node's ``id`` and ``name``)
must be present. Unknown events and unknown fields pass: the stream may be extended freely.
An id or a count is an int within 2**53; a number is an int within 2**64 or a float; the recorder writes a non-finite one as the
string ``"nan"``, ``"inf"`` or ``"-inf"``, and a hand-made ``NaN`` or ``Infinity`` means the
same (what is printed as JSON from it is made strict JSON there: ``commands/diff.json_text``). Stdlib only, and cheap: one pass over the fields of one event,
done only for events that are parsed (the index never parses most lines to open a trace).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_INT = 2**53  # ids, steps, counts: as protocol.MAX_INT, what every consumer holds exactly
MAX_NUMBER = 2**64  # a number's int (a saved int64 such as a slice's end, 2**63 - 1): a float
NUMBER_WORDS = frozenset({"nan", "inf", "-inf"})

# A field's kind: a leaf (what it must be, in words; a test of a value), or, for objects and
# lists, a function that looks inside: value -> None, or (where below it, what is wrong). The
# path of a field is built only when something is wrong: the common case costs no strings.
Test = Callable[[Any], bool]
Error = tuple[str, str]
Checker = Callable[[Any], "Error | None"]
Field = tuple[str, Test] | Checker


def _int(v: Any) -> bool:
    return type(v) is int and -MAX_INT <= v <= MAX_INT


def _num(v: Any) -> bool:
    """A number as a trace writes one, or null (nothing recorded)."""
    t = type(v)
    if t is float:
        return True
    if t is int:
        return -MAX_NUMBER <= v <= MAX_NUMBER
    return v is None or (t is str and v in NUMBER_WORDS)


INT = ("int", _int)
INT_OR_NULL = ("int or null", lambda v: v is None or type(v) is int and -MAX_INT <= v <= MAX_INT)
STR = ("str", lambda v: type(v) is str)
STR_OR_NULL = ("str or null", lambda v: v is None or type(v) is str)
BOOL_OR_NULL = ("bool or null", lambda v: v is None or type(v) is bool)
NUM_OR_NULL = ("number or null", _num)
SCALAR = ("number, str, bool or null", lambda v: type(v) in (bool, str) or _num(v))


def what(v: Any) -> str:
    """A value's JSON type, as an error message names it."""
    if v is None:
        return "null"
    t = type(v)
    if t is dict:
        return "object"
    if t is float and not v - v == 0.0:
        return f"float {v}"  # nan, inf: JSON has no such number
    if t is int and not -MAX_INT <= v <= MAX_INT:
        return "an int out of range"  # ids and counts: 2**53; numbers: 2**64
    return t.__name__


def list_of(item: Field, name: str, *, null: bool = True) -> Checker:
    """A list whose items are each ``item`` (or null for the whole list when ``null``)."""
    if isinstance(item, tuple):
        words, test = item

        def check_leaves(value: Any) -> Error | None:
            if type(value) is not list:
                return None if null and value is None else ("", f"expected {name}, got "
                                                                f"{what(value)}")
            if all(map(test, value)):
                return None
            i = next(i for i, x in enumerate(value) if not test(x))
            return f"[{i}]", f"expected {words}, got {what(value[i])}"
        return check_leaves

    def check_items(value: Any) -> Error | None:
        if type(value) is not list:
            return None if null and value is None else ("", f"expected {name}, got "
                                                            f"{what(value)}")
        for i, x in enumerate(value):
            error = item(x)
            if error is not None:
                return f"[{i}]{error[0]}", error[1]
        return None
    return check_items


def obj(fields: dict[str, Field], name: str, *, required: tuple[str, ...] = (),
        null: bool = True) -> Checker:
    """An object whose known fields are each of their kind (or null for the whole when
    ``null``)."""
    leaves, nested = split(fields)

    def check(value: Any) -> Error | None:
        if type(value) is not dict:
            return None if null and value is None else ("", f"expected {name}, got "
                                                            f"{what(value)}")
        return fields_of(value, leaves, nested, required)
    return check


def split(fields: dict[str, Field]) -> tuple[dict[str, tuple[str, Test]], dict[str, Checker]]:
    """The leaf fields and the nested ones apart (one dict look-up a field, no type test)."""
    return ({k: v for k, v in fields.items() if isinstance(v, tuple)},
            {k: v for k, v in fields.items() if not isinstance(v, tuple)})


def fields_of(value: dict[str, Any], leaves: dict[str, tuple[str, Test]],
              nested: dict[str, Checker], required: tuple[str, ...]) -> Error | None:
    """The first field of ``value`` not of its kind (or a required one missing), or None."""
    for key in required:
        if key not in value:
            return f".{key}", "missing"
    for key, x in value.items():
        leaf = leaves.get(key)
        if leaf is not None:
            if not leaf[1](x):
                return f".{key}", f"expected {leaf[0]}, got {what(x)}"
            continue
        inner = nested.get(key)  # None: a field this version does not read
        if inner is not None:
            error = inner(x)
            if error is not None:
                return f".{key}{error[0]}", error[1]
    return None


SOURCE = obj({"file": STR_OR_NULL, "line": INT_OR_NULL, "code": STR_OR_NULL, "role": STR_OR_NULL},
             "{file, line, code} or null")
NUMBERS = list_of(NUM_OR_NULL, "list of numbers or null")
# a summary's values: numbers (a complex one as [re, im]), or ints and bools
VALUE = ("number, bool, [re, im] or null",
         lambda v: _num(v) or type(v) is bool
         or (type(v) is list and len(v) == 2 and _num(v[0]) and _num(v[1])))
SUMMARY = obj({
    "shape": list_of(INT, "list of ints or null"),
    "dtype": STR_OR_NULL, "device": STR_OR_NULL,
    "min": NUM_OR_NULL, "max": NUM_OR_NULL, "mean": NUM_OR_NULL, "norm": NUM_OR_NULL,
    "nonfinite": INT_OR_NULL, "nnz": INT_OR_NULL,
    "values": list_of(VALUE, "list of values or null"),
    "hist": list_of(INT, "list of ints or null"),
    "note": STR_OR_NULL, "layout": STR_OR_NULL,
    # a DTensor's: the summary is of this rank's local shard (engine/sharded.py)
    "shard": obj({"placements": list_of(STR, "list of str or null"),
                  "global_shape": list_of(INT, "list of ints or null")},
                 "{placements, global_shape} or null"),
}, "summary object or null")
SUMMARIES = list_of(SUMMARY, "list of summaries or null")
SAVED = list_of(obj({
    "name": STR, "status": STR_OR_NULL, "shape": list_of(INT, "list of ints or null"),
    "dtype": STR_OR_NULL, "bytes": INT_OR_NULL,
    "version": obj({"saved": INT_OR_NULL, "now": INT_OR_NULL}, "{saved, now} or null"),
    "modified_by": obj({"op": STR_OR_NULL, "file": STR_OR_NULL, "line": INT_OR_NULL,
                        "code": STR_OR_NULL, "version": INT_OR_NULL}, "{op, file, line} or null"),
    "value": lambda v: (
        None if SCALAR[1](v) or (type(v) is list and all(map(SCALAR[1], v)))
        else ("", f"expected a number, str or list of them, got {what(v)}")),
}, "saved-tensor object", required=("name",), null=False), "list of saved tensors or null")
NODE_INFO = obj({
    "id": INT, "name": STR, "next": list_of(INT_OR_NULL, "list of ids or null"),
    "leaf": STR_OR_NULL, "source": SOURCE, "module": STR_OR_NULL, "comm": STR_OR_NULL,
}, "node object", required=("id", "name"), null=False)
IDS = list_of(INT, "list of ids or null")
# one op of a compiled region's backward graph (engine.compiled.region): they run fused
REGION_OP = obj({"name": STR_OR_NULL, "op": STR_OR_NULL, "module": STR_OR_NULL,
                 "forward": STR_OR_NULL, "source": SOURCE}, "region op object", null=False)
FUNCTION = obj({"file": STR_OR_NULL, "line": INT_OR_NULL, "name": STR_OR_NULL},
               "{file, line, name} or null")
NAMES = list_of(STR_OR_NULL, "list of names (or null) or null")

# event -> (its fields, the ones it cannot do without)
SPECS: dict[str, tuple[dict[str, Field], tuple[str, ...]]] = {
    "session": ({"version": INT_OR_NULL, "torch": STR_OR_NULL,
                 "argv": list_of(STR, "list of str or null"), "pid": INT_OR_NULL,
                 "python": STR_OR_NULL, "rank": INT_OR_NULL, "local_rank": INT_OR_NULL,
                 "world_size": INT_OR_NULL, "hostname": STR_OR_NULL, "eager": BOOL_OR_NULL}, ()),
    "process_group": ({"backend": STR_OR_NULL, "rank": INT_OR_NULL, "world_size": INT_OR_NULL,
                       "timeout": NUM_OR_NULL}, ()),
    "pass_begin": ({"pass": INT, "parent": INT_OR_NULL, "api": STR_OR_NULL,
                    "retain_graph": BOOL_OR_NULL, "create_graph": BOOL_OR_NULL, "roots": IDS,
                    "inputs": list_of(INT_OR_NULL, "list of ids (or null) or null"),
                    "thread": STR_OR_NULL, "caller": SOURCE, "leaves": IDS,
                    "nodes": list_of(NODE_INFO, "list of nodes or null")}, ("pass",)),
    "node": ({"pass": INT, "step": INT_OR_NULL, "id": INT, "name": STR,
              "grad_outputs": SUMMARIES, "grad_inputs": SUMMARIES, "saved": SAVED,
              "error": STR_OR_NULL, "thread": STR_OR_NULL}, ("pass", "id", "name")),
    "accumulate": ({"pass": INT, "leaf": STR_OR_NULL, "id": INT_OR_NULL, "before": SUMMARY,
                    "after": SUMMARY, "retained": BOOL_OR_NULL, "version": INT_OR_NULL,
                    "sharded": BOOL_OR_NULL},
                   ("pass",)),
    "region": ({"pass": INT, "id": INT, "aot_id": INT_OR_NULL, "compile_id": STR_OR_NULL,
                "function": FUNCTION, "ops": list_of(REGION_OP, "list of ops or null"),
                "ops_left_out": INT_OR_NULL, "reason": STR_OR_NULL, "inputs": NAMES,
                "outputs": NAMES}, ("pass", "id")),
    "pass_end": ({"pass": INT, "status": STR_OR_NULL, "error": STR_OR_NULL, "skipped": IDS},
                 ("pass",)),
    "graph_released": ({"pass": INT, "reused": ("int or bool", lambda v: type(v) in (int, bool)),
                        "bytes": INT_OR_NULL}, ("pass",)),
    "diagnosis": ({"pass": INT_OR_NULL, "kind": STR_OR_NULL, "title": STR_OR_NULL,
                   "severity": STR_OR_NULL, "message": STR_OR_NULL, "node": INT_OR_NULL,
                   "source": SOURCE, "related": list_of(SOURCE, "list of sources or null")}, ()),
    "output": ({"stream": STR_OR_NULL, "text": STR_OR_NULL, "truncated": BOOL_OR_NULL}, ()),
    "exit": ({"code": ("int, str or null", lambda v: v is None or type(v) is str or _int(v)),
              "traceback": STR_OR_NULL}, ()),
    # live only (connect, run): the debuggee paused, and the threads in line behind it
    "stopped": ({"pass": INT, "step": INT_OR_NULL, "id": INT, "name": STR_OR_NULL,
                 "reason": STR_OR_NULL, "detail": STR_OR_NULL, "after": BOOL_OR_NULL,
                 "grad_outputs": SUMMARIES, "grad_inputs": SUMMARIES, "saved": SAVED,
                 "thread": STR_OR_NULL, "device": STR_OR_NULL, "stop": INT_OR_NULL},
                ("pass", "id")),
    "waiting": ({"stops": list_of(obj({
        "stop": INT_OR_NULL, "pass": INT_OR_NULL, "step": INT_OR_NULL, "id": INT_OR_NULL,
        "name": STR_OR_NULL, "thread": STR_OR_NULL, "device": STR_OR_NULL,
    }, "stop object", null=False), "list of stops or null")}, ()),
    "tensor": ({"req": INT_OR_NULL}, ()),
    "evaluated": ({"req": INT_OR_NULL, "ok": BOOL_OR_NULL, "text": STR_OR_NULL}, ()),
    # the person replaced a gradient at a stop (a live session's console; kept in its trace)
    "edit": ({"pass": INT, "step": INT_OR_NULL, "id": INT, "name": STR_OR_NULL,
              "stop": INT_OR_NULL, "slot": STR_OR_NULL, "what": STR_OR_NULL,
              "indices": list_of(INT, "list of int or null"),
              "before": list_of(SUMMARY, "list of summaries or null"),
              "after": list_of(SUMMARY, "list of summaries or null")}, ("pass", "id")),
    "error": ({"message": STR_OR_NULL, "req": INT_OR_NULL}, ()),
}


EVENTS = {kind: (*split(fields), required) for kind, (fields, required) in SPECS.items()}


def check(event: Any) -> str | None:
    """Why ``event`` does not fit the event stream's schema, in one line; None when it fits."""
    if type(event) is not dict:
        return f"expected an event object, got {what(event)}"
    kind = event.get("event")
    if type(kind) is not str:
        return (f"field event: expected str, got {what(kind)}" if "event" in event
                else "field event: missing")
    spec = EVENTS.get(kind)
    if spec is None:
        return None  # an event this version does not know: its consumers skip it
    error = fields_of(event, *spec)
    return None if error is None else f"field {error[0][1:]}: {error[1]}"
