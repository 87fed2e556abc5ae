"""The types an event's fields may hold, and the checks that test a value against one.

A trace a colleague sends, or a peer on the other end of ``connect``, can hold anything JSON can:
a list where an id should be, a node with no name, ``Infinity`` for a norm. A field's type is a
leaf (what it must be, in words, and a test of a value) or, for objects and lists, a function
that looks inside: value -> None, or (where below it, what is wrong). The path of a field is
built only when something is wrong: the common case costs no strings.

An id or a count is an int within 2**53; a number is an int within 2**64 or a float; the recorder
writes a non-finite one as the string ``"nan"``, ``"inf"`` or ``"-inf"``, and a hand-made ``NaN``
or ``Infinity`` means the same (what is printed as JSON from it is made strict JSON there:
``commands/diff.json_text``). Stdlib only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_INT = 2**53  # ids, steps, counts: what every consumer holds exactly
MAX_NUMBER = 2**64  # a number's int (a saved int64 such as a slice's end, 2**63 - 1): a float
NUMBER_WORDS = frozenset({"nan", "inf", "-inf"})

Test = Callable[[Any], bool]
Error = tuple[str, str]
Checker = Callable[[Any], "Error | None"]
Leaf = tuple[str, Test]
Type = Leaf | Checker


def is_int(v: Any) -> bool:
    return type(v) is int and -MAX_INT <= v <= MAX_INT


def is_number(v: Any) -> bool:
    """A number as a trace writes one, or null (nothing recorded)."""
    t = type(v)
    if t is float:
        return True
    if t is int:
        return -MAX_NUMBER <= v <= MAX_NUMBER
    return v is None or (t is str and v in NUMBER_WORDS)


INT: Leaf = ("int", is_int)
INT_OR_NULL: Leaf = ("int or null",
                     lambda v: v is None or type(v) is int and -MAX_INT <= v <= MAX_INT)
STR: Leaf = ("str", lambda v: type(v) is str)
STR_OR_NULL: Leaf = ("str or null", lambda v: v is None or type(v) is str)
BOOL_OR_NULL: Leaf = ("bool or null", lambda v: v is None or type(v) is bool)
NUM_OR_NULL: Leaf = ("number or null", is_number)
SCALAR: Leaf = ("number, str, bool or null", lambda v: type(v) in (bool, str) or is_number(v))


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


def list_of(item: Type, name: str, *, null: bool = True) -> Checker:
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


def split(fields: dict[str, Type]) -> tuple[dict[str, Leaf], dict[str, Checker]]:
    """The leaf fields and the nested ones apart (one dict look-up a field, no type test)."""
    return ({k: v for k, v in fields.items() if isinstance(v, tuple)},
            {k: v for k, v in fields.items() if not isinstance(v, tuple)})


def fields_of(value: dict[str, Any], leaves: dict[str, Leaf], nested: dict[str, Checker],
              required: tuple[str, ...]) -> Error | None:
    """The first field of ``value`` not of its type (or a required one missing), or None."""
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


def obj_checker(fields: dict[str, Type], name: str, required: tuple[str, ...] = (),
                null: bool = True) -> Checker:
    """An object whose known fields are each of their type (or null for the whole when
    ``null``)."""
    leaves, nested = split(fields)

    def check(value: Any) -> Error | None:
        if type(value) is not dict:
            return None if null and value is None else ("", f"expected {name}, got "
                                                            f"{what(value)}")
        return fields_of(value, leaves, nested, required)
    return check
