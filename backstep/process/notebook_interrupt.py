"""Interrupting a Jupyter kernel while backstep holds a pass at a stop.

The interrupt (the notebook's stop button: SIGINT in the kernel) lands in the paused thread,
inside backstep's hook (``Controller.pause`` ends the session and re-raises). Left alone,
IPython would print a long traceback through torch's and backstep's frames, and the UI would
stay armed with its server alive. Instead, while a served attachment is armed in a kernel:
that KeyboardInterrupt shows as one line naming the user's frame (the cell and line that called
``backward()``), and once the cell has ended the attachment detaches and its server ends. Any
other exception shows as IPython would show it. Installed only where no other custom
exception handler is, and removed with the attachment.
"""

from __future__ import annotations

import linecache
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from backstep.process.notebook_cell import cell_name

OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # backstep/


def _library_dirs() -> tuple[str, ...]:
    dirs = [OURS]
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        dirs.append(os.path.dirname(os.path.abspath(torch.__file__)))
    return tuple(d + os.sep for d in dirs)


def user_frame(shell: Any, tb: Any) -> str:
    """Where the user's code was when the interrupt came: its deepest frame outside backstep
    and torch, as ``In [3], line 5: loss.backward()``."""
    library = _library_dirs()
    found = None
    for frame, lineno in traceback.walk_tb(tb):
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(library):
            found = (filename, lineno)
    if found is None:
        return "backward()"
    filename, lineno = found
    text = linecache.getline(filename, lineno).strip()
    return f"{cell_name(filename) or filename}, line {lineno}" + (f": {text}" if text else "")


class InterruptAtStop:
    """The one-line report and the detach after the cell, for one served attachment."""

    def __init__(self, shell: Any, interrupted: Callable[[], bool],
                 detach: Callable[[], None]) -> None:
        self.shell = shell
        self.interrupted = interrupted
        self.detach = detach
        self.handler: Any = None

    def install(self) -> None:
        shell = self.shell
        shell.events.register("post_run_cell", self._after_cell)
        if not shell.custom_exceptions:  # someone else's handler stays theirs
            shell.set_custom_exc((KeyboardInterrupt,), self._show)
            self.handler = shell.CustomTB

    def uninstall(self) -> None:
        shell = self.shell
        try:
            shell.events.unregister("post_run_cell", self._after_cell)
        except ValueError:
            pass
        if self.handler is not None and shell.CustomTB is self.handler:
            shell.set_custom_exc((), None)
        self.handler = None

    def _show(self, shell: Any, etype: type, value: BaseException, tb: Any,
              tb_offset: int | None = None) -> list[str]:
        """IPython's handler for the cell's KeyboardInterrupt (``run_code`` calls it, and it
        shows the error itself: ``_showtraceback`` is what ipykernel sends as the cell's
        ``error`` output)."""
        if not self.interrupted():
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
            return []
        stb = [f"KeyboardInterrupt at {user_frame(shell, tb)} (backstep was paused in this "
               "backward pass: it has detached and its page has ended)"]
        shell._showtraceback(etype, value, stb)
        return []

    def _after_cell(self, result: Any = None) -> None:
        if self.interrupted():
            self.detach()
