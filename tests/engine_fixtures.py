"""Helpers engine tests share: run a function and keep its outcome, compare two outcomes bit for
bit, install a capture for a block (or record a function's events), a controller that answers
every stop (``AutoStepper``) or plays the console at each (``Console``), and the stream's
invariants."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from backstep.engine.capture import Capture
from backstep.engine.controller import Controller
from backstep.engine.recorder import ListRecorder


def outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as exc:  # noqa: BLE001 - the error itself is the outcome
        return "error", (type(exc), str(exc))


def _bits(t: torch.Tensor | None) -> Any:
    """The tensor's exact bytes (NaN-safe, sparse and complex included)."""
    if t is None:
        return None
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    t = t.resolve_conj().resolve_neg()
    if t.is_complex():
        t = torch.view_as_real(t)
    return (t.dtype, tuple(t.shape), t.contiguous().reshape(-1).view(torch.uint8).tolist())


def assert_same(plain: tuple[str, Any], under: tuple[str, Any]) -> None:
    assert plain[0] == under[0], (plain, under)
    if plain[0] == "error":
        assert plain[1] == under[1]
        return
    assert plain[1].keys() == under[1].keys()
    for key in plain[1]:
        assert _bits(plain[1][key]) == _bits(under[1][key]), key


class AutoStepper:
    """A controller whose UI answers every stop with a fixed command, like a person would."""

    def __init__(self, command: str = "step", **options: Any) -> None:
        self.events: list[dict[str, Any]] = []
        self.command = command
        self.controller = Controller(self._emit, **options)

    def _emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        if event["event"] == "stopped":
            self.controller.feed({"cmd": self.command})


@contextlib.contextmanager
def captured(capture: Capture) -> Iterator[Capture]:
    capture.install()
    try:
        yield capture
    finally:
        capture.uninstall()


def check_stream(events: list[dict[str, Any]]) -> None:
    """Every pass is announced, its nodes run in 1..n order, and ran + skipped = all nodes."""
    begins = {e["pass"]: e for e in events if e["event"] == "pass_begin"}
    ends = {e["pass"]: e for e in events if e["event"] == "pass_end"}
    assert begins.keys() == ends.keys()
    for number, begin in begins.items():
        ids = {n["id"] for n in begin["nodes"]}
        nodes = [e for e in events if e["event"] == "node" and e["pass"] == number]
        ok_nodes = [e for e in nodes if e["error"] is None]
        assert [e["step"] for e in ok_nodes] == list(range(1, len(ok_nodes) + 1))
        ran = {e["id"] for e in ok_nodes}
        assert ran <= ids
        if ends[number]["status"] == "ok":
            assert ran | set(ends[number]["skipped"]) == ids
            assert not ran & set(ends[number]["skipped"])


def record(fn: Any) -> ListRecorder:
    recorder = ListRecorder()
    with captured(Capture(recorder)):
        fn()
    return recorder


def nodes_of(recorder: ListRecorder, number: int = 1) -> list[dict[str, Any]]:
    return [e for e in recorder.of("node") if e["pass"] == number]


class Console:
    """Plays the UI: at each stop, ``lines(stopped)`` says what to evaluate, then it resumes."""

    def __init__(self, lines: Callable[[dict[str, Any]], list[str]], resume: str = "step",
                 **options: Any) -> None:
        self.lines = lines
        self.resume = resume
        self.events: list[dict[str, Any]] = []
        self.answers: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.controller = Controller(self._emit, **options)
        self._pending: list[tuple[str, dict[str, Any]]] = []

    def _emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        if event["event"] == "evaluated":
            source, stopped = self._pending.pop(0)
            self.answers.append((source, stopped, event))
        if event["event"] == "stopped":
            for source in self.lines(event):
                self._pending.append((source, event))
                self.controller.feed({"cmd": "eval", "req": len(self.answers) + len(self._pending),
                                      "source": source, "stop": event["stop"]})
            self.controller.feed({"cmd": self.resume})

    def answer(self, source: str) -> dict[str, Any]:
        return next(a for s, _, a in self.answers if s == source)


def mlp_events() -> list[dict]:
    """The events of one recorded pass of a small MLP (MSE loss), with provenance: the memory
    view's and the Saved panel's tests read its memory event."""
    import torch.nn as nn

    from backstep.engine.provenance import Provenance, annotate

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 16))
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    recorder = ListRecorder()
    capture, provenance = Capture(recorder), Provenance()
    capture.annotate = annotate  # as engine/session.py wires them
    capture.install()
    provenance.install()
    try:
        nn.functional.mse_loss(model(x), y).backward()
    finally:
        provenance.uninstall()
        capture.uninstall()
    events = [{"event": "session", "version": 1, "torch": torch.__version__, "argv": ["x"]}]
    return events + [dict(e) for e in recorder.events]
