"""Running a console line: an expression (its value is kept as ``_``), else statements, in one
namespace; an exception comes back as its traceback, never raised. Shared by the debuggee's
console (over the paused node's tensors) and ``show``'s (over what a trace recorded), so it is
stdlib only.

``interrupt`` raises KeyboardInterrupt in the thread running a line (from another thread,
through ``PyThreadState_SetAsyncExc``): it takes effect between two bytecodes, so a Python loop
stops at once and a single long C call first finishes.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

MAX_TEXT = 20_000  # characters of one answer
MAX_LINES = 200
INTERRUPTED = "KeyboardInterrupt: the line was interrupted"


def clip_text(text: str) -> str:
    """At most MAX_LINES lines and MAX_TEXT characters, saying how much was left out."""
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        text = "\n".join(lines[:MAX_LINES]) + f"\n... ({len(lines) - MAX_LINES} more lines)"
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + f"... ({len(text) - MAX_TEXT} more characters)"
    return text


def pretty(value: Any) -> str:
    """rich's pretty printing (containers folded to the width, long ones cut), else repr."""
    try:
        from rich.pretty import pretty_repr

        return pretty_repr(value, max_width=100, max_length=32, max_string=2000)
    except Exception:  # noqa: BLE001 - rich absent, or a repr that raises
        try:
            return repr(value)
        except Exception as exc:  # noqa: BLE001
            return f"<{type(value).__name__}: repr raised {type(exc).__name__}>"


class Evaluator:
    """One namespace and the lines run in it; ``render`` turns a value into the answer."""

    def __init__(self, namespace: dict[str, Any],
                 render: Callable[[Any], str] = pretty) -> None:
        namespace.setdefault("__builtins__", __builtins__)
        namespace.setdefault("_", None)
        self.namespace = namespace
        self.render = render
        self._thread: int | None = None  # ident while a line runs
        self._sent = False  # interrupt() raised in it: a KeyboardInterrupt is on its way
        self._lock = threading.Lock()

    def evaluate(self, source: str) -> tuple[bool, str]:
        """Run ``source``; (ok, the text to show: the value, "" for statements or None)."""
        try:
            code, is_expression = _compile(source)
        except SyntaxError:
            return False, clip_text("".join(traceback.format_exception_only(*sys.exc_info()[:2])))
        namespace = self.namespace
        try:
            try:
                with self._lock:
                    self._thread = threading.get_ident()
                if is_expression:
                    value = eval(code, namespace)  # noqa: S307 - the person's own line
                else:
                    exec(code, namespace)  # noqa: S102
                    value = None
            finally:
                self._settle()
        except KeyboardInterrupt:
            return False, INTERRUPTED
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: the console goes on
            tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
            return False, clip_text("".join(traceback.format_exception(type(exc), exc, tb))
                                    .rstrip("\n"))
        if value is None:
            return True, ""
        namespace["_"] = value
        return True, clip_text(self.render(value))

    def _settle(self) -> None:
        """Stop being interruptible. A KeyboardInterrupt that ``interrupt`` sent too late to
        arrive in the line arrives here and is dropped: it is raised at this thread's next
        eval-breaker check, which a loop's backward jump makes. (Clearing it instead with
        ``PyThreadState_SetAsyncExc(ident, NULL)`` leaves CPython 3.11's eval breaker set for
        good: a later call under ``sys.setprofile`` then never gets past its first instruction.)"""
        while True:
            try:
                with self._lock:
                    self._thread = None
                    sent, self._sent = self._sent, False
                if sent:  # one may still be pending (two ctrl+c, or one the line caught)
                    for _ in range(64):  # the first backward jump raises a pending one
                        pass
                return
            except KeyboardInterrupt:
                continue

    def interrupt(self) -> bool:
        """Raise KeyboardInterrupt in the thread running a line; False when none runs."""
        with self._lock:
            if self._thread is None:
                return False
            _async_raise(self._thread, KeyboardInterrupt)
            self._sent = True
            return True

    def close(self) -> None:
        self.namespace.clear()


def _compile(source: str) -> tuple[Any, bool]:
    try:
        return compile(source, "<console>", "eval"), True
    except SyntaxError:
        return compile(source, "<console>", "exec"), False


def _async_raise(ident: int, exc: type[BaseException]) -> None:
    """Never with NULL for ``exc``: see ``Evaluator._settle``."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc))
