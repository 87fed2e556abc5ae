"""backstep in a Jupyter notebook: ``backstep.demo(NAME)`` served into the cell, and the
``%%backstep`` cell magic. Where and how a served UI shows in the cell is
``process/notebook_cell.py``. Nothing here imports torch, textual or IPython until it is used
in a kernel.
"""

from __future__ import annotations

import sys

from backstep.process.notebook_cell import in_notebook, show


def demo(name: str) -> int:
    """``backstep demo NAME`` here: served into the cell in a notebook (the cell runs until the
    demo's UI quits), full screen on a terminal. The exit status, as the command's."""
    from backstep.demo import catalog

    found = catalog.all_demos()
    if not any(d.name == name for d in found):
        names = ", ".join(d.name for d in found) or "none installed"
        raise ValueError(f"no demo named {name!r}; demos: {names}")
    if not in_notebook():
        from backstep.cli import main

        return main(["demo", name])
    from backstep.process.served import ServedUI, serve_address, ui_command

    served = ServedUI(ui_command(["demo", name]), serve_address(None), once=True,
                      title=f"backstep demo {name}")
    try:
        served.start()
    except RuntimeError as exc:  # no textual-serve: one line, not a traceback
        print(f"backstep: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        show(served, f"the demo {name!r}", True, one_view=False)
        return served.wait() or 0
    finally:
        served.stop()


def cell_magic(line: str, cell: str) -> None:
    """``%%backstep [--break SPEC]... [--no-stop-at-start]``: run the cell attached (as
    ``with backstep.attached(...)``); ``%load_ext backstep`` makes it."""
    import argparse
    import shlex

    from IPython import get_ipython

    from backstep.process.attach.attachment import attach, detach

    parser = argparse.ArgumentParser(prog="%%backstep", add_help=False, exit_on_error=False)
    parser.add_argument("--break", dest="breakpoints", action="append", default=[])
    parser.add_argument("--no-stop-at-start", action="store_true")
    try:
        args, extra = parser.parse_known_args(shlex.split(line))
        if extra:
            raise ValueError(f"unknown {' '.join(extra)!r}")
    except (argparse.ArgumentError, ValueError) as exc:
        raise ValueError(f"%%backstep: {exc} (it takes --break SPEC and --no-stop-at-start)"
                         ) from None
    from backstep.process.attach import served

    served.CAPTION = "%%backstep"  # what the frame's caption says it shows
    try:
        attach(breakpoints=args.breakpoints, stop_at_pass_start=not args.no_stop_at_start)
    finally:
        served.CAPTION = "backstep.attach()"
    try:
        get_ipython().run_cell(cell)
    finally:
        detach()
