"""``show``'s expression console: the person's lines over what the trace recorded at the
cursor, as plain data. Tensors are not in a trace: a gradient is its summary (shape, dtype,
device, min, max, mean, norm, nonfinite, and values when it had at most 16 elements), a saved
tensor its status and size. The trace itself is only ever read as data (JSON, parsed): nothing
of it is evaluated; only what the person types runs, in this process, as in any Python prompt.
No torch here (``tui`` never imports it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from backstep.console_core import Evaluator
from backstep.tui.state.focus import focus
from backstep.tui.state.records import SavedInfo
from backstep.tui.state.snapshot import Snapshot

NOTE = ("tensors are not in the trace: grad_outputs, grad_inputs, saved and leaves hold what it "
        "recorded (summaries; values for tensors of at most 16 elements); edits need a live "
        "session")


def plain(value: Any) -> Any:
    """A snapshot's value as plain, mutable data (a person's line may change it freely)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _saved(info: SavedInfo) -> dict[str, Any]:
    return {"status": info.status, "shape": list(info.shape) if info.shape is not None else None,
            "dtype": info.dtype, "bytes": info.bytes, "value": info.value}


def namespace(snapshot: Snapshot, node_id: int | None) -> dict[str, Any]:
    """The names a line sees at the cursor's node (the shown stop's when ``node_id`` is None)."""
    f = focus(snapshot, node_id)
    names: dict[str, Any] = {"grad_outputs": plain(f.grad_outputs or ()),
                             "saved": {s.name: _saved(s) for s in f.saved or ()}}
    if f.record is not None and f.record.grad_inputs is not None:
        names["grad_inputs"] = plain(f.record.grad_inputs)
    info = f.info
    names["node"] = None if info is None else {
        "id": info.id, "name": info.name, "module": info.module, "leaf": info.leaf,
        "next": list(info.next), "source": plain(info.source)}
    view = snapshot.pass_
    leaves: dict[str, Any] = {}
    if view is not None:
        for acc in view.accumulations():
            leaves[acc.leaf] = plain(acc.after)
    names["leaves"] = leaves
    names.update({name: refused_edit(name) for name in EDITS})
    return names


EDITS = ("zero_nonfinite", "clip", "scale", "set_grad")  # a live session's, refused here


def refused_edit(name: str) -> Any:
    """What an edit's name does in a recording: says why it cannot, changing nothing."""
    def edit(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError(f"{name}: a trace holds no tensors, so nothing can be edited; "
                           "gradient edits need a live session (backstep run)")
    edit.__name__ = name
    return edit


class TraceConsole:
    """One namespace per place in the trace: statements persist while the cursor stays."""

    def __init__(self, names_at: Callable[[int], dict[str, Any]] | None = None) -> None:
        # names of the cursor's pass beside the recorded ones (show: ``trip_tensors``)
        self.names_at = names_at
        self.place: tuple[Any, ...] | None = None
        self.evaluator: Evaluator | None = None
        self.told = False  # the note about tensors was shown once

    def evaluate(self, snapshot: Snapshot, node_id: int | None, source: str) -> str:
        stop = snapshot.stop
        view = snapshot.pass_
        place = (view.number if view else None, view.done if view else None,
                 stop.step if stop else None, node_id)
        if self.evaluator is None or place != self.place:
            if self.evaluator is not None:
                self.evaluator.close()
            self.place = place
            names = namespace(snapshot, node_id)
            if self.names_at is not None and view is not None:
                names.update(self.names_at(view.number))
            self.evaluator = Evaluator(names)
        _ok, text = self.evaluator.evaluate(source)
        if not self.told:
            self.told = True
            text = f"({NOTE})\n{text}" if text else f"({NOTE})"
        return text

    def interrupt(self) -> bool:
        return self.evaluator.interrupt() if self.evaluator is not None else False
