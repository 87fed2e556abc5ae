"""One module per subcommand; each has ``add_parser(subparsers)`` and ``main(args) -> int``.

They are imported only to build the parser, so none may import torch or textual at module level:
``backstep run`` must start the UI without loading torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def add_script_arguments(
    parser: argparse.ArgumentParser, handler: Callable[[argparse.Namespace], int]
) -> None:
    """What ``run`` and ``trace`` share: ``--no-source``, then the script and its own argv."""
    parser.add_argument("--no-source", action="store_true",
                        help="do not record the forward line and module of each node (faster)")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    # the script owns stdout: a pipe closed under it must fail for it exactly as under python
    parser.set_defaults(handler=handler, script_stdout=True)


def torch_problem() -> str | None:
    """Why this torch cannot run backstep, in one line (None: it can). Checked before any
    script runs, without importing torch in this process."""
    from backstep.engine.torch_api import check

    return check()
