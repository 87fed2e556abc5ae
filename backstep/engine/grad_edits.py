"""Gradient edits the person asks for at a stop: the node's gradient replaced for the rest of
the pass, through the hook's return value.

Nothing here runs unless the person calls one of the edit functions in the console (or presses
``e``): the hook then returns the edited tuple instead of None. With no edit the hook returns
None, exactly as without backstep, so the default stays bit-identical. Every edit is announced
as an ``edit`` event (what, where, the gradients' summaries before and after) so the UI marks the
pass and a trace keeps the record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from backstep.engine.summary import summarize


class Said(str):
    """What an edit did, shown as it reads (no quotes) when the console prints it."""

    def __repr__(self) -> str:
        return str(self)


class EditRefused(RuntimeError):
    """This stop's gradient cannot be replaced (said in the console, never raised into the pass)."""


class GradEdits:
    """The edited copy of one stop's gradient tuple, and the functions that edit it.

    ``slot`` is the tuple the hook may return: ``grad_outputs`` before a node runs (a pre-hook),
    ``grad_inputs`` after it (a post-hook: what flows on to the next nodes). ``where`` is the
    stop's ``stopped`` event (its pass, step, node and stop number). ``refused`` says why
    a stop cannot edit (a stop reached late, after its gradients flowed on), else None.
    """

    def __init__(self, grads: tuple, slot: str, where: dict[str, Any],
                 emit: Callable[[dict[str, Any]], None], refused: str | None = None) -> None:
        self.original = grads
        self.current = list(grads)
        self.slot = slot
        self.where = where
        self.emit = emit
        self.refused = refused
        self.edited = False

    def replacement(self) -> tuple | None:
        """The tuple the hook returns: None (leave autograd's own) unless an edit was made."""
        return tuple(self.current) if self.edited else None

    def functions(self) -> dict[str, Callable[..., Any]]:
        """The console names of the edits."""
        return {"set_grad": self.set_grad, "zero_nonfinite": self.zero_nonfinite,
                "clip": self.clip, "scale": self.scale}

    # -- the edits -------------------------------------------------------------------------
    def set_grad(self, i: int, value: Any) -> Said:
        """Replace gradient ``i`` with ``value`` (a tensor of its shape, or a number)."""
        self._check()
        old = self._slot(i)
        if not isinstance(value, torch.Tensor):
            value = torch.full_like(old, value)
        if tuple(value.shape) != tuple(old.shape):
            raise ValueError(f"set_grad: {self.slot}[{i}] has shape {tuple(old.shape)}, "
                             f"not {tuple(value.shape)}")
        new = value.detach().to(dtype=old.dtype, device=old.device)
        return self._apply(f"set_grad({i}, ...)", {i: new}, [i])

    def zero_nonfinite(self) -> Said:
        """Zero every NaN and Inf of the node's gradients."""
        self._check()
        changed = {}
        for i, g in self._tensors():
            if g.is_floating_point() or g.is_complex():
                changed[i] = torch.where(torch.isfinite(g), g, torch.zeros_like(g))
        return self._apply("zero_nonfinite()", changed, list(changed))

    def clip(self, max_norm: float) -> Said:
        """Scale the node's gradients together so their total 2-norm is at most ``max_norm``
        (as ``clip_grad_norm_`` does for parameters)."""
        self._check()
        tensors = [(i, g) for i, g in self._tensors() if g.is_floating_point() or g.is_complex()]
        if not tensors:
            return self._apply(f"clip({max_norm!r})", {}, [])
        total = torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(g.detach(), dtype=torch.float64) for _, g in tensors]))
        factor = torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
        changed = {i: (g * factor.to(g.device)).to(g.dtype) for i, g in tensors}
        return self._apply(f"clip({max_norm!r})", changed, list(changed))

    def scale(self, k: float) -> Said:
        """Multiply the node's gradients by ``k``."""
        self._check()
        changed = {i: g * k for i, g in self._tensors() if g.is_floating_point() or g.is_complex()}
        return self._apply(f"scale({k!r})", changed, list(changed))

    # -- helpers ---------------------------------------------------------------------------
    def _check(self) -> None:
        if self.refused is not None:
            raise EditRefused(self.refused)

    def _slot(self, i: int) -> torch.Tensor:
        if not isinstance(i, int) or not 0 <= i < len(self.current):
            raise IndexError(f"{self.slot} has {len(self.current)} gradients, no [{i!r}]")
        g = self.current[i]
        if g is None:
            raise ValueError(f"{self.slot}[{i}] is None: there is no gradient to replace")
        return g

    def _tensors(self) -> list[tuple[int, torch.Tensor]]:
        return [(i, g) for i, g in enumerate(self.current) if isinstance(g, torch.Tensor)]

    def _apply(self, what: str, changed: dict[int, torch.Tensor], indices: list[int]) -> Said:
        """Keep the new gradients that differ from the current ones in at least one value; an
        edit that changes no value (``zero_nonfinite()`` on a finite gradient) is no edit: the
        pass is not marked and the hook still returns None."""
        counts = {i: values_changed(self.current[i], g) for i, g in changed.items()}
        changed = {i: g for i, g in changed.items() if counts[i]}
        total = sum(counts.values())
        if not changed:
            return Said(f"{what}: no value changed, nothing edited" if indices
                        else f"{what}: nothing to edit")
        indices = [i for i in indices if i in changed]
        before = [summarize(self.current[i]) for i in indices]
        for i, g in changed.items():
            self.current[i] = g
        self.edited = True
        after = [summarize(self.current[i]) for i in indices]
        where = {key: self.where.get(key) for key in ("pass", "step", "id", "name", "stop")}
        self.emit({"event": "edit", **where, "slot": self.slot, "what": what,
                   "indices": indices, "before": before, "after": after, "changed": total})
        values = f"{total:,} value{'s' if total != 1 else ''}"
        return Said(f"edited {self.slot}{indices}: {what} changed {values} "
                    "(for the rest of this pass)")


def values_changed(old: Any, new: torch.Tensor) -> int:
    """How many elements of ``new`` differ from ``old`` (a NaN where a NaN was is no change;
    a different dtype or shape counts every element)."""
    if not isinstance(old, torch.Tensor) or old.shape != new.shape or old.dtype != new.dtype:
        return new.numel()
    old, new = old.detach(), new.detach().to(old.device)
    differ = old != new
    if old.is_floating_point() or old.is_complex():
        differ &= ~(torch.isnan(old) & torch.isnan(new))
    return int(differ.sum().item())
