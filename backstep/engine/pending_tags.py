"""Provenance's forward tags, held off ``node.metadata`` until a node is first read.

The first touch of ``node.metadata`` makes a small C++ object per node; made during the forward,
between the tensors' buffers, those objects pin glibc's heap, so buffers freed after a step are
not reused for the next step's (``backstep trace`` peaked at 1.10-1.13x plain RSS on the
realistic GPT; a script that only sets ``grad_fn.metadata`` per op, 1.19x). So provenance writes
a new node's tags here, keyed by its autograd sequence number and checked against its Python
type, and ``metadata(node)`` (the one way every reader gets a node's tags) moves them into
``node.metadata`` when a pass, a stop or a diagnosis first reads the node: after the forward,
when the capture numbers the graph's nodes and makes their metadata anyway.

Nothing here holds a node or a tensor: an entry is the node's type and a small dict of tags (the
source dicts are provenance's, shared). Sequence numbers are per thread and never reused on a
thread; a node of another thread with the same number and the same type would be mistaken for
the tagged one (provenance tags only on the threads that installed it). Entries of nodes never
read (a forward with grad whose graph is dropped, a checkpoint's recomputation) are not seen to
die: past ``LIMIT`` entries the oldest quarter is dropped (those nodes, if ever read, simply
have no tags). Imports nothing, so every reader can.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

# sequence number -> (type of the node, its tags); insertion order is creation order
PENDING: dict[int, tuple[type, dict[str, Any]]] = {}
LIMIT = 1 << 16  # about 10 MB of entries at most
IF_UNTAGGED = "backstep.if_untagged"  # in an entry: apply only to a node with no tags yet
_TAG_KEYS = ("backstep.source", "backstep.module", "backstep.scope")


def entry(node: Any, number: int) -> dict[str, Any]:
    """The pending tags of ``node`` (numbered ``number``), made empty on first use: write the
    forward's tags here, never into ``node.metadata``."""
    found = PENDING.get(number)
    kind = type(node)
    if found is not None and found[0] is kind:
        return found[1]
    tags: dict[str, Any] = {}
    PENDING[number] = (kind, tags)
    if len(PENDING) > LIMIT:
        bound()
    return tags


def bound() -> None:
    """Past ``LIMIT`` entries, drop the oldest quarter (nodes never read, most likely dead)."""
    if len(PENDING) > LIMIT:
        for key in list(islice(PENDING, LIMIT // 4)):
            PENDING.pop(key, None)  # another thread may have read it meanwhile


def peek(node: Any) -> dict[str, Any] | None:
    """``node``'s pending tags, if any, left pending (a read during the forward)."""
    if not PENDING:
        return None
    found = PENDING.get(node._sequence_nr())
    return found[1] if found is not None and found[0] is type(node) else None


def metadata(node: Any) -> dict[str, Any]:
    """``node.metadata``, with any tags provenance left pending for it moved in."""
    metadata = node.metadata
    if PENDING:
        number = node._sequence_nr()
        found = PENDING.pop(number, None)
        if found is not None:
            if found[0] is not type(node):
                PENDING[number] = found  # another node with the same number: not ours
            else:
                settle(metadata, found[1])
    return metadata


def settle(metadata: dict[str, Any], tags: dict[str, Any]) -> None:
    """Write pending ``tags`` into a node's ``metadata``, as writing them there directly, in
    order, would have (an ``IF_UNTAGGED`` entry only where no tag is there yet)."""
    if IF_UNTAGGED in tags:
        if any(key in metadata for key in _TAG_KEYS):
            return
        metadata.update(tags)
        del metadata[IF_UNTAGGED]
    else:
        metadata.update(tags)
