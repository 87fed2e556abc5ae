"""Warnings keep the text and location plain PyTorch gives them.

Provenance's torch-function mode calls every torch function from its own Python frame, so a warning
raised inside (a C++ ``TORCH_WARN``, or ``warnings.warn(stacklevel=2)`` in a Python torch function)
would name ``provenance_tagging.py`` instead of the user's line — and Python's once-per-location
filter would then show only the first of them in the whole run. While installed, a filter lets
every warning attributed to the mode's frame through to ``showwarning``, where it is issued again
with ``warnings.warn_explicit`` at the location it would have had without backstep, through the
user's own filters and registry: same text, same line, same once-per-location behaviour.
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType
from typing import Any

from backstep.engine.provenance import tagging as provenance_tagging

_MODULE = provenance_tagging.__name__
_FILE = provenance_tagging.__file__
_installed: list[Any] = []  # [previous showwarning, the filter tuple] while installed


def _torch_overrides_file() -> str:
    import torch.overrides

    return torch.overrides.__file__


def _target(frame: FrameType | None) -> FrameType | None:
    """The frame a warning raised inside the mode's call would be attributed to without it."""
    while frame is not None and frame.f_code.co_filename != _FILE:
        frame = frame.f_back
    if frame is None:
        return None
    called = frame.f_locals.get("func")
    code = getattr(called, "__code__", None)
    frame = frame.f_back
    overrides = _torch_overrides_file()
    while frame is not None and frame.f_code.co_filename == overrides:
        frame = frame.f_back  # handle_torch_function: torch's own dispatch
    if frame is not None and code is not None and frame.f_code is code:
        frame = frame.f_back  # the first entry of a Python torch function, before dispatching
    return frame


def _showwarning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                 line: Any = None) -> None:
    previous = _installed[0] if _installed else warnings.showwarning
    if filename != _FILE:
        previous(message, category, filename, lineno, file, line)
        return
    target = _target(sys._getframe(1))
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
    if _installed:
        return
    warnings.filterwarnings("always", module=_MODULE.replace(".", r"\."))
    _installed[:] = [warnings.showwarning, warnings.filters[0]]
    warnings.showwarning = _showwarning


def uninstall() -> None:
    if not _installed:
        return
    previous, entry = _installed
    _installed.clear()
    if warnings.showwarning is _showwarning:
        warnings.showwarning = previous
    try:
        warnings.filters.remove(entry)
        warnings._filters_mutated()  # type: ignore[attr-defined]
    except (ValueError, AttributeError):
        pass
