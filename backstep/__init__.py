"""backstep: a terminal stepping debugger for PyTorch backward passes.

``backstep.attach()`` arms the debugger from inside a running script; ``backstep run``,
``backstep trace`` and ``backstep demo`` are the command-line faces (``backstep --help``).
Importing this package imports neither torch nor textual.
"""

from __future__ import annotations

from typing import Any

from backstep import demo as demo  # callable: ``backstep.demo(NAME)`` (see backstep/demo)
from backstep._version import __version__ as __version__

__all__ = ["__version__", "attach", "attached", "demo", "detach"]


def attach(*args: Any, **kwargs: Any) -> None:
    """Arm backstep in this process: the next backward pass stops and the UI opens.

    ``listen="[HOST:]PORT"`` (or BACKSTEP_LISTEN) waits for a remote ``backstep connect``
    instead (``wait=False``: run on until one attaches). In a Jupyter notebook the UI shows in
    the cell, served to the browser (``serve="[HOST:]PORT"`` serves it from anywhere)."""
    from backstep.process.attach.attachment import attach as _attach

    _attach(*args, **kwargs)


def detach() -> None:
    """Disarm backstep in this process: hooks removed, output restored."""
    from backstep.process.attach.attachment import detach as _detach

    _detach()


def attached(*args: Any, **kwargs: Any) -> Any:
    """Context manager: ``with backstep.attached(): ...`` arms backstep for the block."""
    from backstep.process.attach.attachment import attached as _attached

    return _attached(*args, **kwargs)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext backstep``: the ``%%backstep`` cell magic (the cell runs attached)."""
    from backstep.notebook import cell_magic

    ipython.register_magic_function(cell_magic, "cell", "backstep")
