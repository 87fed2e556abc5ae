"""``find_names`` reads every frame variable at every pass, in fewer Python steps than it once
did: it must still name exactly as the plain scan (kept here as the reference) names, and
rename a leaf as soon as a variable is rebound."""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn

from backstep.engine import naming
from backstep.engine.capture import Capture
from backstep.engine.recorder import ListRecorder
from tests.engine_fixtures import captured


def reference_user_frames(frame: Any) -> list[Any]:
    frames = []
    while frame is not None and len(frames) < naming._MAX_FRAMES:
        if not naming.is_internal(frame.f_code.co_filename):
            frames.append(frame)
        frame = frame.f_back
    return frames


def reference_find_names(wanted: dict[int, Any], frame: Any) -> dict[int, str]:
    """The scan as it was before its fast paths: every non-bare variable, one by one."""
    held: list[tuple[str, Any]] = []
    rest: list[tuple[str, Any]] = []
    owners: list[Any] = []
    for f in reference_user_frames(frame):
        for var, value in naming.frame_locals(f).items():
            if var == "self":
                owners.append(value)
            elif type(value) in naming._BARE:
                continue
            else:
                (held if naming._holds_modules(value) else rest).append((var, value))
    found: dict[int, str] = {}
    for var, value in held + rest:
        if len(found) == len(wanted):
            return found
        naming._name_value(var, value, wanted, found)
    for owner in owners:
        if len(found) == len(wanted):
            break
        if isinstance(owner, (nn.Module, torch.Tensor)):
            naming._name_value("self", owner, wanted, found)
        else:
            for attribute, held_value in naming._attributes(owner):
                naming._name_value(attribute, held_value, wanted, found)
    return found


class ListLiar:
    """Says it is a list (``__class__``): isinstance believes it, and so must naming."""

    def __init__(self, items: list[Any]) -> None:
        self._items = items

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: PLW3201
        return list

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Any:
        return iter(self._items)


class Loader:
    """A plain object: names nothing."""


class Trainer:
    def __init__(self, model: nn.Module) -> None:
        self.model = model


class Wanted:
    """Holds the tensors asked for (a dict variable would name them itself)."""

    def __init__(self, *tensors: torch.Tensor) -> None:
        self.ids = {id(t): t for t in tensors}


def both(wanted: Wanted) -> tuple[dict[int, str], dict[int, str]]:
    frame = sys._getframe(1)
    return naming.find_names(wanted.ids, frame), reference_find_names(wanted.ids, frame)


def test_names_as_the_plain_scan_in_every_kind_of_frame() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(2, requires_grad=True)
    loader, kind = Loader(), Loader
    early = [nn.Parameter(torch.ones(1))]  # defined before the variable: the list names it
    param = early[0]
    heads = {"h": model[1]}  # noqa: F841 - a plain container of modules: first of all
    liar = ListLiar([torch.ones(2, requires_grad=True)])
    empty: dict[str, Any] = {}
    later = b
    wanted = Wanted(a, b, param, liar._items[0], *model.parameters())

    def inner() -> tuple[dict[int, str], dict[int, str]]:
        alias = a  # noqa: F841 - an inner frame's variable wins over the outer one's
        trainer = Trainer(model)
        del trainer
        return both(wanted)

    new, old = inner()
    assert new == old
    assert list(new.items()) == list(old.items())  # found in the same order too
    assert new[id(a)] == "alias" and new[id(b)] == "b" and new[id(param)] == "early[0]"
    assert new[id(liar._items[0])] == "liar[0]"
    assert new[id(model[1].weight)] == "heads['h'].weight"
    assert new[id(model[0].bias)] == "model.0.bias"
    assert (loader, kind, empty, later) is not None


def test_a_lying_container_in_any_frame_names_like_the_plain_scan() -> None:
    t = torch.ones(1, requires_grad=True)
    box = ListLiar([t])
    wanted = Wanted(t)
    new, old = both(wanted)
    assert new == old == {id(t): "t"}
    del t
    new, old = both(wanted)
    assert new == old == {id(box._items[0]): "box[0]"}


def test_self_and_tensor_subclasses_as_the_plain_scan() -> None:
    class Marked(torch.Tensor):
        pass

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 1)

        def names(self, wanted: Wanted) -> tuple[dict[int, str], dict[int, str]]:
            return both(wanted)

    net = Net()
    marked = torch.ones(2).as_subclass(Marked).requires_grad_()
    wanted = Wanted(marked, *net.parameters())
    new, old = net.names(wanted)
    assert new == old
    assert new[id(net.fc.weight)] == "net.fc.weight"  # the outer variable before self
    assert new[id(marked)] == "marked"


def _pass_leaves(recorder: ListRecorder, number: int) -> set[str]:
    (begin,) = [e for e in recorder.of("pass_begin") if e["pass"] == number]
    return {n["leaf"] for n in begin["nodes"] if n["leaf"]}


def test_a_variable_rebound_between_passes_renames_the_leaf() -> None:
    recorder = ListRecorder()
    with captured(Capture(recorder)):
        first = torch.ones(2, requires_grad=True)
        (first * 2).sum().backward()
        second, first = first, torch.zeros(2, requires_grad=True)
        (second * 2).sum().backward()

        def deeper(t: torch.Tensor) -> None:
            inner_name = t  # a new alias in an inner frame wins
            (inner_name * 2).sum().backward()

        deeper(second)
    assert _pass_leaves(recorder, 1) == {"first"}
    assert _pass_leaves(recorder, 2) == {"second"}
    assert _pass_leaves(recorder, 3) == {"t"}
