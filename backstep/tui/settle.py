"""Keep the garbage collector off what a replay builds once and holds for its whole life.

A full collection walks every tracked object: Textual's widgets and styles, the trace's index
and each pass's folded leaf state, over 100,000 objects on a large trace. Opening passes
allocates enough to set one off every few keys, ~85 ms each (measured on a 1 GB trace: 25 ms
of every ``]`` on average). Once the file is indexed and folded, ``settle()`` moves what exists
out of the collector's reach (``gc.freeze``); what is made later is collected as before. A
frozen object is still freed when its last reference goes; only a reference cycle among frozen
objects would stay, so a collection runs first. ``backstep show`` is its own process (no user
code runs in it), so this changes nothing but when its memory is scanned.
"""

from __future__ import annotations

import gc


def settle() -> bool:
    """Collect once, then freeze everything alive; False when the collector is off."""
    if not gc.isenabled():
        return False
    gc.collect()
    gc.freeze()
    return True
