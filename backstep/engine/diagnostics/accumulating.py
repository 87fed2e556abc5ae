"""``grad_accumulating``: a step that uses a gradient an earlier step already used.

``backward()`` adds into ``.grad``. Adding into a ``.grad`` that a step has used is not a bug by
itself: a GAN's generator pass adds into the discriminator's ``.grad`` after its step, and
``netD.zero_grad()`` clears it before the next one. It is a bug when the next update *uses* it.
So the diagnosis is made where the gradient is consumed:

- ``OptimizerSteps`` watches every ``optimizer.step()`` with torch's global step pre-hook (it
  returns nothing and changes nothing): each parameter the step consumes is remembered with its
  ``.grad`` (a weak reference) and that gradient's version. A top-level backward pass that finds
  the very same ``.grad`` untouched since (not set to None, not zeroed, not edited) and adds into
  it in place makes it stale; a later step of any optimizer that consumes it still stale — same
  object, same version — is the diagnosis. Anything else (a new ``.grad``, an edit in between)
  is judged a reset: a miss is better than a false alarm.
- ``ManualUpdates``: parameters updated by hand (``p -= lr * p.grad``) have no step to watch,
  so while no optimizer has stepped, the ``accumulate`` events speak: a leaf whose ``.grad`` was
  not reset although the parameter changed, twice in a row, has had a stale gradient used.

Keeps weak references and ids only; per step one pass over the optimizer's parameters.
"""

from __future__ import annotations

import sys
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from backstep.engine.diagnostics import text
from backstep.engine.diagnostics.rules import Found, diagnosis, source_key

MAX_LEAVES = 100_000
MAX_STALE_PASSES = 8
TITLE = ".grad keeps accumulating across steps"
_FIX = ("backward() adds into .grad, it never overwrites it, so every step now uses the sum of "
        "all past gradients. Fix: call optimizer.zero_grad() (or model.zero_grad()) once per "
        "step, before loss.backward(). If you accumulate over micro-batches on purpose, zero "
        "right after each optimizer.step().")


class _Consumed:
    """A parameter a step consumed: its ``.grad`` then, and what passes did to it since."""

    __slots__ = ("param", "grad", "version", "watching", "stale")

    def __init__(self, param: Any, grad: Any) -> None:
        self.param = weakref.ref(param)
        self.grad = weakref.ref(grad)
        self.version: int = grad._version
        self.watching: int | None = None  # the top-level pass now running
        self.stale: int | None = None  # the first pass that added into the consumed .grad


class OptimizerSteps:
    """``grad_accumulating`` judged at ``optimizer.step()`` (see the module docstring)."""

    def __init__(self, report: Callable[[Found], None], lock: Any) -> None:
        self._report = report
        self._lock = lock
        self._consumed: dict[int, _Consumed] = {}
        self._handle: Any = None
        self._passes: dict[int, dict[str, Any] | None] = {}  # running pass -> its caller
        # stale pass -> (its caller, {leaf name: AccumulateGrad id})
        self._stale: OrderedDict[int, tuple[Any, dict[str, int]]] = OrderedDict()
        self._nodes: dict[int, list[dict[str, Any]]] = {}
        self._reported: set[tuple[Any, Any]] = set()
        self.stepped = False  # some optimizer stepped while we watched
        self.enabled = False  # between the session's install() and uninstall()

    def arm(self) -> None:
        """Start watching steps (torch is imported: a pass began)."""
        if self._handle is not None or not self.enabled:
            return
        try:
            from torch.optim.optimizer import register_optimizer_step_pre_hook
        except ImportError:  # a torch without global step hooks: no judgement at all
            return
        self._handle = register_optimizer_step_pre_hook(self._on_step)

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._consumed.clear()
        self._stale.clear()
        self._nodes.clear()
        self._passes.clear()

    # -- passes (called under the Diagnostician's lock, on the pass's thread) ------------------
    def begin(self, event: dict[str, Any]) -> None:
        if not self._consumed:
            return  # no step consumed a .grad yet (or what one did was reset): nothing to watch
        if event.get("api") != "backward" or event.get("parent") is not None:
            return  # autograd.grad does not accumulate; a nested pass runs inside its parent's
        number = event.get("pass", 0)
        watched = False
        for key, entry in list(self._consumed.items()):
            param = entry.param()
            grad = None if param is None else param.grad
            if grad is None or grad is not entry.grad() or grad._version != entry.version:
                del self._consumed[key]  # reset (None, zeroed) or edited since: not judged
                continue
            entry.watching = number
            watched = True
        if watched:
            self._passes[number] = event.get("caller")
            self._nodes[number] = event.get("nodes") or []

    def end(self, event: dict[str, Any]) -> None:
        number = event.get("pass", 0)
        caller = self._passes.pop(number, None)
        nodes = self._nodes.pop(number, None)
        if nodes is None:
            return
        stale = False
        for key, entry in list(self._consumed.items()):
            if entry.watching != number:
                continue
            entry.watching = None
            param = entry.param()
            grad = None if param is None else param.grad
            if grad is None or grad is not entry.grad():
                del self._consumed[key]
            elif grad._version != entry.version:  # this pass added into the consumed .grad
                entry.version = grad._version
                if entry.stale is None:
                    entry.stale = number
                stale = True
        if stale:
            leaves = {n["leaf"]: n["id"] for n in nodes if n.get("leaf")}
            self._stale[number] = (caller, leaves)
            while len(self._stale) > MAX_STALE_PASSES:
                self._stale.popitem(last=False)

    # -- steps ---------------------------------------------------------------------------------
    def _on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """torch's global step pre-hook: never returns a value, never raises."""
        try:
            with self._lock:
                found = self._consume(optimizer, sys._getframe(1))
            if found is not None:
                self._report(found)
        except Exception:  # noqa: BLE001 - a diagnosis must never break the script
            pass

    def _consume(self, optimizer: Any, frame: Any) -> Found | None:
        self.stepped = True
        consumed = self._consumed
        get, ref = consumed.get, weakref.ref
        used: list[tuple[Any, int]] = []  # (parameter, stale pass) whose stale .grad this uses
        for group in optimizer.param_groups:
            for param in group["params"]:
                grad = param.grad
                if grad is None:
                    continue
                entry = get(id(param))
                if entry is None or entry.param() is not param:
                    consumed[id(param)] = _Consumed(param, grad)
                    continue
                version = grad._version
                if entry.grad() is grad:
                    if entry.stale is not None and version == entry.version:
                        used.append((param, entry.stale))
                else:
                    entry.grad = ref(grad)
                entry.version, entry.watching, entry.stale = version, None, None
        if len(consumed) > 2 * MAX_LEAVES:
            for key in [k for k, e in consumed.items() if e.param() is None]:
                del consumed[key]
        return self._diagnose(optimizer, used, frame) if used else None

    def _diagnose(self, optimizer: Any, used: list[tuple[Any, int]], frame: Any) -> Found | None:
        from backstep.engine import naming

        number = min(stale for _, stale in used)
        caller, leaves = self._stale.get(number, (None, {}))
        key = source_key(caller)
        if key in self._reported:
            return None  # said once: naming every step of a loop would cost for nothing
        self._reported.add(key)
        frame = naming.user_frame(frame)
        params = [p for p, stale in used if stale == number]
        found = naming.find_names({id(p): p for p in params}, frame)
        names = [found.get(id(p)) or naming.fallback_name(0, p).replace("leaf#0", "a parameter")
                 for p in params]
        node = next((leaves[n] for n in names if n in leaves), None)
        step = naming.frame_source(frame)
        at = f" at {text.where(step, caller)}" if step else ""
        message = (
            f"{type(optimizer).__name__}.step(){at} used the .grad of {text.names(names)} while "
            f"it still held the gradient an earlier step had already used: pass {number} added "
            f"its gradient to it instead of starting from zero. {_FIX}")
        diag = diagnosis(number, "grad_accumulating", TITLE, message, severity="warning",
                         node=node, source=caller,
                         related=[text.related("optimizer_step", step)])
        return ("grad_accumulating", *key), diag


class ManualUpdates:
    """``grad_accumulating`` for parameters updated by hand, read off ``accumulate`` events."""

    def __init__(self) -> None:
        # leaf name -> (version of the parameter at its last accumulation, its .grad stale then)
        self._leaves: OrderedDict[str, tuple[int, bool]] = OrderedDict()
        self._found: dict[int, list[tuple[str, int]]] = {}  # pass -> [(leaf, node id)]

    def accumulate(self, event: dict[str, Any]) -> None:
        get, leaves = event.get, self._leaves
        leaf, number, version = get("leaf"), get("pass"), get("version")
        if get("retained") or not isinstance(leaf, str) or number is None:
            return
        if version is None:
            leaves.pop(leaf, None)
            return
        previous = leaves.pop(leaf, None)
        stale = False
        before = get("before")  # None: set to None before the pass, never stale
        if before is not None and _not_zeroed(before) and previous is not None:
            updated = version != previous[0]
            stale = previous[1] or updated
            if updated and previous[1]:  # the stale .grad was used by the update in between
                self._found.setdefault(number, []).append((leaf, get("id")))
        leaves[leaf] = (version, stale)
        while len(leaves) > MAX_LEAVES:
            leaves.popitem(last=False)

    def end(self, event: dict[str, Any], caller: dict[str, Any] | None) -> list[Found]:
        found = self._found.pop(event.get("pass", 0), None)
        if not found:
            return []
        number = event.get("pass")
        leaves = [leaf for leaf, _ in found]
        message = (
            f"The .grad of {text.names(leaves)} is never reset: pass {number} added its "
            f"gradient to what earlier passes left, and the parameter was updated in between "
            f"using that sum, twice now. {_FIX}")
        diag = diagnosis(number, "grad_accumulating", TITLE, message, severity="warning",
                         node=found[0][1], source=caller)
        return [(("grad_accumulating", tuple(leaves)), diag)]


def _not_zeroed(before: dict[str, Any] | None) -> bool:
    """A .grad that was neither set to None nor filled with zeros before the pass."""
    if before is None:
        return False
    if before.get("nonfinite"):
        return True
    return not (before.get("min") == 0 and before.get("max") == 0)
