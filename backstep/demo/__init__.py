"""The demo walkthroughs: finding them (``catalog``) and their narration texts (``narration``).

The package is also ``backstep.demo(NAME)``, the call a notebook cell makes: importing one of
its modules binds this package to the name ``backstep.demo``, so a function of that name in
``backstep/__init__.py`` would be replaced by the first such import. The package itself is
therefore callable.
"""

from __future__ import annotations

import sys
import types


class _CallablePackage(types.ModuleType):
    def __call__(self, name: str) -> int:
        """``backstep demo NAME`` from Python: in a notebook cell, served into the cell (the
        cell runs until the demo's UI quits); on a terminal, full screen."""
        from backstep.notebook import demo

        return demo(name)


sys.modules[__name__].__class__ = _CallablePackage
