"""Fitting a node's name and its leaf's name into a row's cells (graph panel, module view,
Gradients panel): the leaf's tail is the informative part."""

from __future__ import annotations

from backstep.tui.text.format import cut_left, cut_middle

__all__ = ["LEAF_ROOM", "SHORT_ACCUMULATE", "cut_middle", "name_and_leaf"]

LEAF_ROOM = 16  # a leaf's name cut shorter than this makes "AccumulateGrad" give way
SHORT_ACCUMULATE = "AccGrad"


def name_and_leaf(name: str, leaf: str, room: int) -> tuple[str, str]:
    """A node's name and its leaf's name in ``room`` cells (with one space between): the leaf is
    cut from the left; an AccumulateGrad is shortened first, as the leaf's name says more."""
    if room - len(name) - 1 < min(len(leaf), LEAF_ROOM) and name == "AccumulateGrad":
        name = SHORT_ACCUMULATE
    return name, cut_left(leaf, max(2, room - len(name) - 1))
