"""The wrapper around every nn.Module call: who sees what, and that it leaves torch as it was."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from backstep.engine.provenance import calls as provenance_calls

ORIGINAL = nn.Module._call_impl


class Recorder:
    """An (enter, leave) pair writing what it sees to ``log``."""

    def __init__(self, name: str, log: list[tuple[str, ...]]) -> None:
        self.name, self.log = name, log

    def enter(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        self.log.append((self.name, "enter", type(module).__name__, str(len(args))))

    def leave(self, module: nn.Module, output: Any) -> None:
        kind = "none" if output is None else type(output).__name__
        self.log.append((self.name, "leave", type(module).__name__, kind))


@pytest.fixture
def log() -> Iterator[list[tuple[str, ...]]]:
    entries: list[tuple[str, ...]] = []
    yield entries
    assert nn.Module._call_impl is ORIGINAL, "every test leaves torch's own _call_impl behind"
    assert not provenance_calls.installed()


class Boom(nn.Module):
    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise self.error


def test_enter_and_leave_wrap_every_call_in_nesting_order(log: list[tuple[str, ...]]) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 2), nn.Tanh())
    x = torch.randn(4, 3)
    expected = net(x)
    pair = Recorder("a", log)
    provenance_calls.add(pair.enter, pair.leave)
    try:
        assert nn.Module._call_impl is not ORIGINAL
        out = net(x)
    finally:
        provenance_calls.remove(pair.enter, pair.leave)
    assert torch.equal(out, expected)
    assert log == [
        ("a", "enter", "Sequential", "1"),
        ("a", "enter", "Linear", "1"),
        ("a", "leave", "Linear", "Tensor"),
        ("a", "enter", "Tanh", "1"),
        ("a", "leave", "Tanh", "Tensor"),
        ("a", "leave", "Sequential", "Tensor"),
    ]
    log.clear()
    net(x)
    assert log == [], "nothing is called once removed"


@pytest.mark.parametrize("error", [ValueError("bad shape"), KeyboardInterrupt()])
def test_leave_runs_for_every_exception_and_the_exception_is_unchanged(
    log: list[tuple[str, ...]], error: BaseException
) -> None:
    net = nn.Sequential(nn.Identity(), Boom(error))
    pair = Recorder("a", log)
    provenance_calls.add(pair.enter, pair.leave)
    try:
        with pytest.raises(type(error)) as raised:
            net(torch.ones(2))
    finally:
        provenance_calls.remove(pair.enter, pair.leave)
    assert raised.value is error
    assert log[-2:] == [("a", "leave", "Boom", "none"), ("a", "leave", "Sequential", "none")]


def test_the_programs_own_module_hooks_still_run(log: list[tuple[str, ...]]) -> None:
    layer = nn.Linear(2, 2)
    seen: list[str] = []
    handle = layer.register_forward_hook(lambda m, a, o: seen.append("hook"))
    pair = Recorder("a", log)
    provenance_calls.add(pair.enter, pair.leave)
    try:
        layer(torch.ones(1, 2))
    finally:
        provenance_calls.remove(pair.enter, pair.leave)
        handle.remove()
    assert seen == ["hook"]
    assert [entry[1] for entry in log] == ["enter", "leave"]


def test_two_trackers_both_see_calls_and_leave_in_reverse(log: list[tuple[str, ...]]) -> None:
    first, second = Recorder("a", log), Recorder("b", log)
    provenance_calls.add(first.enter, first.leave)
    provenance_calls.add(second.enter, second.leave)
    try:
        nn.Identity()(torch.ones(1))
        assert [entry[:2] for entry in log] == [
            ("a", "enter"), ("b", "enter"), ("b", "leave"), ("a", "leave")
        ]
        log.clear()
        provenance_calls.remove(first.enter, first.leave)
        assert nn.Module._call_impl is not ORIGINAL
        nn.Identity()(torch.ones(1))
        assert [entry[:2] for entry in log] == [("b", "enter"), ("b", "leave")]
    finally:
        provenance_calls.remove(first.enter, first.leave)  # a second removal is a no-op
        provenance_calls.remove(second.enter, second.leave)


def test_a_patch_made_over_ours_is_kept_and_never_loops(log: list[tuple[str, ...]]) -> None:
    pair = Recorder("a", log)
    provenance_calls.add(pair.enter, pair.leave)
    theirs_called: list[str] = []
    under = nn.Module._call_impl

    def theirs(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        theirs_called.append(type(self).__name__)
        return under(self, *args, **kwargs)

    nn.Module._call_impl = theirs  # type: ignore[method-assign]
    try:
        provenance_calls.remove(pair.enter, pair.leave)
        assert nn.Module._call_impl is theirs, "someone else's patch is not undone"
        nn.Identity()(torch.ones(1))
        assert theirs_called == ["Identity"] and log == []  # ours, still in their chain, passes
        provenance_calls.add(pair.enter, pair.leave)  # again: reached through their chain
        try:
            nn.Identity()(torch.ones(1))
        finally:
            provenance_calls.remove(pair.enter, pair.leave)
        assert theirs_called == ["Identity", "Identity"]
        assert [entry[1] for entry in log] == ["enter", "leave"]
    finally:
        nn.Module._call_impl = ORIGINAL  # type: ignore[method-assign]


class Probe(nn.Module):
    """Counts the frames under its forward and warns from it at stacklevel 3."""

    depth = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frame, depth = sys._getframe(), 0
        while frame is not None:
            frame, depth = frame.f_back, depth + 1
        self.depth = depth
        warnings.warn("probe", stacklevel=3)
        return x


def _call(probe: Probe) -> tuple[int, tuple[str, int]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        probe(torch.ones(1))
    return probe.depth, (seen[0].filename, seen[0].lineno)


def test_a_module_call_has_the_frames_it_has_without_backstep(log: list[tuple[str, ...]]) -> None:
    probe = Probe()
    plain = _call(probe)
    pair = Recorder("a", log)
    provenance_calls.add(pair.enter, pair.leave)
    try:
        assert nn.Module._call_impl.__code__.co_filename == ORIGINAL.__code__.co_filename
        traced = _call(probe)
    finally:
        provenance_calls.remove(pair.enter, pair.leave)
    assert [entry[1] for entry in log] == ["enter", "leave"]
    assert traced == plain, "same depth, and the warning names torch's _wrapped_call_impl line"
