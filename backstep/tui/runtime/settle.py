"""Keep the garbage collector off what a replay builds once and holds for its whole life.

A full collection walks every tracked object: Textual's widgets and styles, the trace's index
and each pass's folded leaf state, over 100,000 objects on a large trace. Opening passes
allocates enough to set one off every few keys, ~85 ms each (measured on a 1 GB trace: 25 ms
of every ``]`` on average). Once the file is indexed and folded, ``settle()`` moves what exists
out of the collector's reach (``gc.freeze``); what is made later is collected as before. A
frozen object is still freed when its last reference goes; only a reference cycle among frozen
objects would stay, so a collection runs first. The youngest generation is then collected
every ``YOUNG`` allocations rather than 700: opening a pass makes tens of thousands of objects
that live as long as the pass is shown, and each was walked several times on its way to the
oldest generation (GC time per key measured with ``gc.callbacks``, 2,500-node passes: 33.6 ms,
22.8 ms frozen, 11.4 ms frozen with a threshold of 10,000; 2026-11-23, ``]`` back to back:
5.5-17 ms with 10,000, 2.8-3.9 ms with 50,000: most of a pass's objects are gone, with the pass,
before a collection comes round). ``backstep show`` is its own process (no
user code runs in it), so this changes nothing but when its memory is scanned.

What a collection would find between keys is collected while the person reads instead
(``tidy``, a second after the last move): a run of keys then starts with
an empty young generation, and 30 ``]`` back to back (~1,200 young objects each, once the graph
panel stopped leaving its rows in reference cycles) never reach the threshold. Measured
2026-11-23, 1 GB trace, a young collection landing on a key: 25-45 ms.
"""

from __future__ import annotations

import gc

YOUNG = 50_000


def settle() -> bool:
    """Collect once, freeze everything alive, collect the young less often; False when the
    collector is off."""
    if not gc.isenabled():
        return False
    gc.collect()
    gc.freeze()
    first, *older = gc.get_threshold()
    if 0 < first < YOUNG:
        gc.set_threshold(YOUNG, *older)
    return True


def tidy() -> bool:
    """Collect everything the collector can reach (what ``settle`` froze stays out of it), for
    an idle moment; False when the collector is off."""
    if not gc.isenabled():
        return False
    gc.collect()
    return True
