"""The versions of a node's saved tensors, read without unpacking them: what the tagging mode
records when a node is made, so that a stop can say which saved tensor was modified in place
since (``SAVED_VERSIONS_KEY``)."""

from __future__ import annotations

from typing import Any

import torch

_RAW_PREFIX = "_raw_saved_"
_SavedTensor: Any = getattr(torch._C._autograd, "SavedTensor", None)
_saved_names: dict[type, tuple[tuple[str, str], ...]] = {}  # node type -> ((attribute, name), ...)


def saved_versions(node: Any) -> dict[str, int]:
    """{saved name: version now} for the node's saved tensors, read without unpacking them.

    List-valued saved tensors (``CatBackward0.tensors``) appear as ``tensors[0]``, ``tensors[1]``.
    """
    names = _saved_names.get(type(node))
    if names is None:
        names = tuple(
            (a, a[len(_RAW_PREFIX) :]) for a in dir(node) if a.startswith(_RAW_PREFIX)
        )
        _saved_names[type(node)] = names
    versions: dict[str, int] = {}
    for attribute, name in names:
        raw = getattr(node, attribute)
        if type(raw) is _SavedTensor:
            data = raw.data
            if data is not None:
                versions[name] = data._version
        elif isinstance(raw, (list, tuple)):
            for index, item in enumerate(raw):
                data = item.data
                if data is not None:
                    versions[f"{name}[{index}]"] = data._version
        else:
            data = raw.data
            if data is not None:
                versions[name] = data._version
    return versions
