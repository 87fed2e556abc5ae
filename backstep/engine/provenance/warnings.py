"""Warnings keep the text and location plain PyTorch gives them.

Provenance puts Python frames of its own between the user's code and torch where plain PyTorch
has none: the torch-function mode (its ``__torch_function__``, and for a Python torch function
the ``handle_torch_function`` frames and the function's first entry that dispatched to it), the
wrapper around ``Function.apply``, and the module-call wrapper when it is used (provenance_calls
is frame-free otherwise). ``warnings.warn(stacklevel=N)`` counts frames, so a warning that crosses
them would name the wrong line; and Python's once-per-location filter would then show only the
first of them in the whole run.

Capture does the same for every backward: its wrapper around ``_engine_run_backward`` and its
``_run`` lie between ``torch.autograd.backward``/``grad`` and the engine, so a warning raised
inside backward (a tensor or module hook, a custom Function's backward, torch's own "Full backward
hook is firing..." at stacklevel 5) would name backstep's line, and only once. Capture installs
``warnings.warn``'s wrapper too (with or without provenance; ``install`` counts its users).

Two ways in, both landing where python would, through the user's own filters and registry:
- ``warnings.warn`` (what torch's Python code calls) is wrapped while installed: the stacklevel
  is recounted without our frames, then the real one is called (a warning that crosses none of
  them gets the very same stacklevel).
- C++ warnings (``TORCH_WARN``) name the innermost Python frame, which can be the mode's. A
  filter lets every warning attributed to the mode's file through to ``showwarning``, where it
  is issued again with ``warnings.warn_explicit`` at the frame python would have named.
"""

from __future__ import annotations

import operator
import os
import sys
import warnings
from types import CodeType, FrameType
from typing import Any

from backstep.engine import runner
from backstep.engine.provenance import calls as provenance_calls
from backstep.engine.provenance import tagging as provenance_tagging

_MODULE = provenance_tagging.__name__
_FILE = provenance_tagging.__file__
_WRAPPER_FILE = provenance_calls.__file__
_RUNNER_FILE = runner.__file__  # where the script's stack begins under backstep
# capture's backward wrapper and ``_run``: between torch.autograd.backward and the engine
_CAPTURE_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "capture", "__init__.py")
# the briefed capture (every pass's history: trace's and a live session's) and the planned one
# on top of it (trace --every/--when) wrap that wrapper
_ENGINE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BRIEFED_FILES = (os.path.join(_ENGINE_DIR, "briefed.py"),
                  os.path.join(_ENGINE_DIR, "planned.py"))
_MODE_CODE: CodeType = provenance_tagging.TaggingMode.__torch_function__.__code__
_installed: list[Any] = []  # [previous showwarning, the filter tuple, previous warn] while installed
_users = [0]  # install() calls not yet undone (provenance's, capture's)


def _torch_overrides_file() -> str:
    import torch.overrides

    return torch.overrides.__file__


def _internal(code: CodeType) -> bool:
    """Frames the interpreter's own stacklevel walk skips (importlib's bootstrap)."""
    name = code.co_filename
    return "importlib" in name and "_bootstrap" in name


def plain_frame(site: FrameType | None, wanted: int) -> tuple[FrameType | None, int]:
    """The frame ``stacklevel=wanted`` names without backstep, counting from ``site`` (the frame
    that warned, level 1), and how many frames the interpreter's walk takes to reach it from
    ``site`` (``wanted`` when none of ours lies between). ``(None, n)`` past the stack's end
    (the runner's frames, under the script's, are not python's)."""
    overrides = _torch_overrides_file()
    counted = python = 0
    dispatched: CodeType | None = None  # after the mode: the torch function that reached it
    frame = site
    while frame is not None:
        code = frame.f_code
        if code.co_filename == _RUNNER_FILE:
            break  # below the script's first frame: python's stack ends here
        if not _internal(code) or frame is site:
            counted += 1
            name = code.co_filename
            ours = False
            if name in (_FILE, _WRAPPER_FILE, _CAPTURE_FILE, *_BRIEFED_FILES):
                ours = True
                if code is _MODE_CODE:
                    called = frame.f_locals.get("func")
                    dispatched = getattr(called, "__code__", None)
            elif dispatched is not None and name == overrides:
                ours = True  # handle_torch_function: the mode's dispatch
            elif dispatched is not None and code is dispatched:
                ours, dispatched = True, None  # the first entry, before it dispatched
            else:
                dispatched = None
            if not ours:
                python += 1
                if python == wanted:
                    return frame, counted
        frame = frame.f_back
    return None, 1 << 30  # the interpreter's walk runs off the stack, as python's would


def _warn(message: Any, category: Any = None, stacklevel: int = 1, source: Any = None,
          **kwargs: Any) -> None:
    """``warnings.warn`` while installed: the stacklevel python would use, ours not counted."""
    real = _installed[2] if _installed else warnings.warn
    try:
        wanted = operator.index(stacklevel)
    except TypeError:
        return real(message, category, stacklevel, source, **kwargs)  # python's own error
    try:
        _, steps = plain_frame(sys._getframe(1), max(wanted, 1))
        level = steps + 1  # + this frame
    except Exception:
        level = wanted + 1
    return real(message, category, level, source, **kwargs)


def _mode_frame(frame: FrameType | None) -> FrameType | None:
    while frame is not None and frame.f_code.co_filename != _FILE:
        frame = frame.f_back
    return frame


def _showwarning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                 line: Any = None) -> None:
    previous = _installed[0] if _installed else warnings.showwarning
    if filename != _FILE:
        previous(message, category, filename, lineno, file, line)
        return
    target, _ = plain_frame(_mode_frame(sys._getframe(1)), 1)
    if target is None:
        previous(message, category, filename, lineno, file, line)
        return
    module_globals = target.f_globals
    warnings.warn_explicit(
        message, category, target.f_code.co_filename, target.f_lineno,
        module=module_globals.get("__name__", "__main__"),
        registry=module_globals.setdefault("__warningregistry__", {}),
        module_globals=module_globals,
    )


def install() -> None:
    _users[0] += 1
    if _installed:
        return
    warnings.filterwarnings("always", module=_MODULE.replace(".", r"\."))
    _installed[:] = [warnings.showwarning, warnings.filters[0], warnings.warn]
    warnings.showwarning = _showwarning
    warnings.warn = _warn


def uninstall() -> None:
    _users[0] = max(_users[0] - 1, 0)
    if not _installed or _users[0]:
        return
    previous, entry, warn = _installed
    _installed.clear()
    if warnings.showwarning is _showwarning:
        warnings.showwarning = previous
    if warnings.warn is _warn:
        warnings.warn = warn
    try:
        warnings.filters.remove(entry)
        warnings._filters_mutated()  # type: ignore[attr-defined]
    except (ValueError, AttributeError):
        pass
