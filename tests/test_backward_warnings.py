"""A warning raised inside backward names the line python names: capture's frames between
``torch.autograd.backward`` and the engine are not counted, with provenance or without, and
the stacklevel wrapper stays while either of them is installed."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from backstep.engine.capture import Capture
from backstep.engine.provenance import Provenance
from backstep.engine.recorder import ListRecorder


def _backward_warning(level: int) -> tuple[str, int]:
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: warnings.warn("inside", stacklevel=level))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y.sum().backward()
    (w,) = caught
    return w.filename, w.lineno


def _levels() -> list[tuple[str, int]]:
    return [_backward_warning(level) for level in range(1, 6)]


def test_capture_alone_and_with_provenance_keep_pythons_locations() -> None:
    original: Any = warnings.warn
    plain = _levels()
    assert plain[4] == (__file__, 23)  # stacklevel 5: the line that called backward()
    capture, provenance = Capture(ListRecorder()), Provenance()
    capture.install()
    try:
        assert _levels() == plain
        provenance.install()
        assert _levels() == plain
        provenance.uninstall()  # capture still needs the wrapper
        assert _levels() == plain
    finally:
        capture.uninstall()
    assert warnings.warn is original


def test_the_wrapper_goes_with_the_last_user() -> None:
    original: Any = warnings.warn
    capture, provenance = Capture(ListRecorder()), Provenance()
    provenance.install()
    capture.install()
    provenance.uninstall()
    assert warnings.warn is not original
    capture.uninstall()
    assert warnings.warn is original
