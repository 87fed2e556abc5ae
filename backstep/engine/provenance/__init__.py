"""Forward provenance: the user's line and the module path behind every autograd node.

``Provenance().install()`` (or ``with Provenance():``) starts recording on the calling thread.
Call ``annotate(roots)`` on a graph before reading it (it completes the tags of the nodes made
inside torch's composite functions and torch's own modules, cheaply left for later during the
forward; ``source_of`` and ``module_of`` complete a node themselves); then each node created
while installed carries, in ``node.metadata`` (held in ``pending_tags`` until the node is
first read: read them with ``pending_tags.metadata(node)``, never ``node.metadata``),
  "backstep.source"          {"file": abs path, "line": int, "code": stripped text}
  "backstep.module"          "model.encoder.layers.3.self_attn"  (innermost running module)
  "backstep.saved_versions"  {saved name: tensor version when the node was made}
                             (nodes that outputs of a top-level call got; not inner ones, and
                             none made inside torch's modules)
  "backstep.scope"           the Scope of the module call that made it, inside torch's modules
and ``inplace_history(t)`` lists the lines whose in-place ops bumped ``t``'s version.

How: a torch-function mode sees the user's torch calls (provenance_tagging); a wrapper around
every module call tracks the running module (provenance_calls, provenance_modules). Inside
torch's own modules (nn.Linear, nn.TransformerEncoderLayer, nn.Sequential...) every op gets the
line that called the outermost one anyway, so the mode is paused there and the wrapper logs
module calls instead (provenance_scopes); a user module inside one gets the mode back. The one
difference users can see: a user callable that is no module, run inside a torch module (a custom
activation function given to nn.TransformerEncoderLayer), is attributed to the line that called
the torch module, not to its own lines; and an in-place change made inside a torch module is
recorded under the module's class name (``ReLU``) at that line, not per op.

Failures inside provenance are swallowed: at worst a node has no source, never a wrong one.
Nothing here holds a node or a tensor. The source dicts are shared between nodes: read, never
mutate them (``source_of`` returns a copy).
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

import torch

from backstep.engine.pending_tags import metadata as node_metadata
from backstep.engine.provenance import inplace as provenance_inplace
from backstep.engine.provenance import warnings as provenance_warnings
from backstep.engine.provenance.frames import forget_code
from backstep.engine.provenance.modules import ModuleTracker
from backstep.engine.provenance.scopes import SCOPE_KEY, Region, resolve
from backstep.engine.provenance.tagging import (
    MODULE_KEY,
    SAVED_VERSIONS_KEY,
    SOURCE_KEY,
    SPAN_KEY,
    TaggingMode,
    add_mode,
    annotate,
    pause_if_top,
    remove_mode,
)

__all__ = [
    "MODULE_KEY",
    "SAVED_VERSIONS_KEY",
    "SCOPE_KEY",
    "SOURCE_KEY",
    "SPAN_KEY",
    "Provenance",
    "annotate",
    "inplace_history",
    "module_of",
    "saved_versions_of",
    "source_of",
]

_lock = threading.Lock()


def _sequence_mark() -> tuple[int, int] | None:
    """This thread's next autograd sequence number (each node a thread makes takes the next
    one), read off a throwaway CPU node; None where no node can be made."""
    try:
        with torch.enable_grad():
            node = torch.zeros((), device="cpu", requires_grad=True).neg().grad_fn
        return (threading.get_ident(), node._sequence_nr() + 1)
    except Exception:  # noqa: BLE001 - the mark is informative only
        return None


class Provenance:
    """Records provenance for nodes created on the installing thread while installed.

    Module paths are tracked on every thread (every module call); sources only on the thread
    that called ``install()`` (torch-function modes are per thread), and in module forwards a
    backward re-runs (reentrant checkpoint), on whichever thread runs them. ``error`` holds the
    reason when installing failed (provenance then simply stays off).
    """

    def __init__(self, *, saved_versions: bool = True) -> None:
        self.saved_versions = saved_versions
        self.error: str | None = None
        # (thread, autograd sequence number) when recording started: nodes that thread made
        # before it have no provenance, and never will (``Capture._built_before``)
        self.since: tuple[int, int] | None = None
        self._tracker: ModuleTracker | None = None
        self._mode: TaggingMode | None = None

    @property
    def installed(self) -> bool:
        return self._mode is not None

    def install(self) -> None:
        """Start recording (idempotent)."""
        with _lock:
            if self._mode is not None:
                return
            self.since = _sequence_mark()
            tracker = ModuleTracker()
            mode = TaggingMode(tracker, self.saved_versions)
            try:
                tracker.on_no_grad = lambda: pause_if_top(mode)
                tracker.mode = mode
                tracker.install()
                add_mode(mode)
                torch._C._push_on_torch_function_stack(mode)
            except Exception as exc:  # provenance stays off; the program runs on
                self.error = f"provenance unavailable: {exc!r}"
                mode.enabled = False
                tracker.uninstall()
                remove_mode(mode)
                return
            self._tracker, self._mode = tracker, mode
            provenance_warnings.install()

    def uninstall(self) -> None:
        """Stop recording; tags already written stay on their nodes."""
        with _lock:
            mode, tracker = self._mode, self._tracker
            self._mode = self._tracker = None
            if mode is None or tracker is None:
                return
            mode.enabled = False  # a mode left on another thread's stack just passes calls on
            provenance_warnings.uninstall()
            try:
                depth = torch._C._len_torch_function_stack()
                if depth and torch._C._get_function_stack_at(depth - 1) is mode:
                    torch._C._pop_torch_function_stack()
            except Exception:
                pass
            try:
                tracker.uninstall()
                tracker.clear_thread()
            except Exception:
                pass
            try:
                remove_mode(mode)
            except Exception:
                pass
            forget_code()

    def __enter__(self) -> Provenance:
        self.install()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.uninstall()


def _metadata(node: Any, key: str) -> Any:
    try:
        if node is None:
            return None
        metadata = node_metadata(node)
        if type(metadata.get(SCOPE_KEY)) is Region:
            resolve(node, metadata)  # made inside torch's modules: named when first asked
        return metadata.get(key)
    except Exception:
        return None


def source_of(node: Any) -> dict[str, Any] | None:
    """{"file", "line", "code"} of the user line that created ``node``, or None (not recorded)."""
    found = _metadata(node, SOURCE_KEY)
    return dict(found) if isinstance(found, dict) else None


def module_of(node: Any) -> str | None:
    """Dotted path of the innermost module whose forward created ``node``, or None."""
    found = _metadata(node, MODULE_KEY)
    return found if isinstance(found, str) else None


def saved_versions_of(node: Any) -> dict[str, int] | None:
    """{saved tensor name: its version when ``node`` was created}, or None (not recorded)."""
    found = _metadata(node, SAVED_VERSIONS_KEY)
    return dict(found) if isinstance(found, dict) else None


def inplace_history(tensor: torch.Tensor) -> list[dict[str, Any]]:
    """[{"op", "file", "line", "code", "version"}] for in-place ops that bumped ``tensor``
    (or another view of its base), oldest first; ``version`` is the version after the op."""
    return provenance_inplace.history(tensor)
