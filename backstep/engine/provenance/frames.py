"""Find the user's frame: the first frame outside torch and backstep.

Every tagged op asks for it, so the walk is cheap: each code object is classified once (internal
or not, and its absolute file name) and each (file, line) maps to one shared source dict. Code
objects are looked up by ``id()`` (checked against the code object kept with the result): hashing
a code object hashes its bytecode and constants, about half a microsecond each time. The user
frame's line is looked up by its instruction offset: ``f_lineno`` decodes the code's line table
from its start (thousands of machine instructions for a line deep in a script) on every op.
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

import torch

from backstep.engine.provenance.calls import CALL_CODES

# backstep/engine/provenance/frames.py -> backstep/ (not ``import backstep``: its __init__
# reaches the attach family, which imports this)
_BACKSTEP_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BACKSTEP_DIR += os.sep
_INTERNAL_DIRS: tuple[str, ...] = (
    os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
    _BACKSTEP_DIR,
)
# Demo scripts ship inside the wheel (backstep/_demos) but are user code to the person watching.
_USER_DIRS: tuple[str, ...] = (_BACKSTEP_DIR + "_demos" + os.sep,)

# id(code object) -> (the code object, its absolute file name or None when the code belongs to
# torch or backstep).
_code_files: dict[int, tuple[CodeType, str | None]] = {}
# What the person calls a file that has no name of its own: in a Jupyter kernel, a cell's code
# is compiled under a hashed temporary name, which the served attachment maps to ``In [3]``
# (set by process/attach/served.py, with forget_code; None: every file goes by its path).
file_names: Callable[[str], str | None] | None = None
# (absolute file, line) -> {"file", "line", "code"}; shared by every node tagged from that line.
_sources: dict[tuple[str, int], dict[str, Any]] = {}
# (id(code object), instruction offset) -> (the code object, its line's source dict). A code's
# offsets map to fixed lines; a frame with a trace function is read the slow way (f_lineno).
_at_offset: dict[tuple[int, int], tuple[CodeType, dict[str, Any]]] = {}


def forget_code() -> None:
    """Let go of the code objects classified so far (provenance was uninstalled). Held past the
    script's end, torch.compile's transformed code would only die at interpreter shutdown, when
    the weak-key callbacks of torch._dynamo run against half-torn-down modules and print an
    "Exception ignored" traceback that plain python never shows (torch 2.14)."""
    _code_files.clear()
    _at_offset.clear()


def _classify(code: CodeType) -> str | None:
    """Absolute file name of ``code``, or None when it lives inside torch or backstep."""
    name = code.co_filename
    if name.startswith("<") and name.endswith(">"):
        path = name  # <stdin>, <string>: user code without a file
    else:
        path = os.path.abspath(name)
    internal = path.startswith(_INTERNAL_DIRS) and not path.startswith(_USER_DIRS)
    result: str | None = None if internal else path
    named = file_names
    if result is not None and named is not None:  # once per code object: a cell run again
        try:  # is new code, under its new number
            result = named(path) or path
        except Exception:  # noqa: BLE001 - a name is informative only
            pass
    _code_files[id(code)] = (code, result)
    return result


def code_file(code: CodeType) -> str | None:
    """Absolute file name of ``code``, or None when it lives inside torch or backstep."""
    hit = _code_files.get(id(code))
    return hit[1] if hit is not None and hit[0] is code else _classify(code)


def user_frame(frame: FrameType | None) -> FrameType | None:
    """The first frame at or above ``frame`` whose code is not torch's or backstep's."""
    files = _code_files
    while frame is not None:
        code = frame.f_code
        hit = files.get(id(code))
        path = hit[1] if hit is not None and hit[0] is code else _classify(code)
        if path is not None:
            return frame
        frame = frame.f_back
    return None


def source_dict(frame: FrameType) -> dict[str, Any]:
    """The shared {"file", "line", "code"} dict for the line ``frame`` is executing."""
    path = code_file(frame.f_code) or frame.f_code.co_filename
    line = frame.f_lineno or 0
    key = (path, line)
    found = _sources.get(key)
    if found is None:  # the line's text from the file itself, whatever name it is shown by
        code = linecache.getline(frame.f_code.co_filename, line).strip() if line else ""
        found = {"file": path, "line": line, "code": code}
        _sources[key] = found
    return found


UNSET: Any = object()
_CALL_IMPL, _CALL_WRAPPER = CALL_CODES  # a module call's frame: woven, or the wrapper's


def call_impl_frame(frame: FrameType | None, limit: int = 4) -> FrameType | None:
    """The module call's frame (provenance_calls) at most ``limit`` frames above ``frame``."""
    while frame is not None and limit > 0:
        code = frame.f_code
        if code is _CALL_IMPL or code is _CALL_WRAPPER:
            return frame
        frame = frame.f_back
        limit -= 1
    return None


def find_source(frame: FrameType | None, entries: list[Any]) -> dict[str, Any] | None:
    """Source dict of the first user frame at or above ``frame``, or None.

    ``entries`` is the thread's running-module stack (objects with ``frame``: their module call's
    frame, and ``source``: a cache). Everything above a module call's frame is fixed while
    that module runs, so once one op inside it walked past that frame, the others stop there.
    """
    if frame is not None and frame.f_trace is None:  # most ops: a user line seen before
        code = frame.f_code
        at = _at_offset.get((id(code), frame.f_lasti))
        if at is not None and at[0] is code:
            return at[1]
    files = _code_files
    pending: list[Any] | None = None  # module entries whose cache this walk fills
    position = len(entries)
    result: dict[str, Any] | None = None
    while frame is not None:
        code = frame.f_code
        hit = files.get(id(code))
        path = hit[1] if hit is not None and hit[0] is code else _classify(code)
        if path is not None:
            if frame.f_trace is None:
                key = (id(code), frame.f_lasti)
                at = _at_offset.get(key)
                if at is not None and at[0] is code:
                    result = at[1]
                else:
                    result = _sources.get((path, frame.f_lineno or 0)) or source_dict(frame)
                    _at_offset[key] = (code, result)
            else:
                result = _sources.get((path, frame.f_lineno or 0)) or source_dict(frame)
            break
        if code is _CALL_IMPL or code is _CALL_WRAPPER:
            entry = None
            while position > 0:
                position -= 1
                if entries[position].frame is frame:
                    entry = entries[position]
                    break
            if entry is not None:
                if entry.source is not UNSET:
                    result = entry.source
                    break
                if pending is None:
                    pending = []
                pending.append(entry)
        frame = frame.f_back
    if pending:
        for entry in pending:
            entry.source = result
    return result

