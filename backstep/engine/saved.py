"""Saved tensors of a node and their status, read without unpacking a live tensor (unpacking
re-runs the forward under checkpoint and raises when stale).

Statuses: ``alive``; ``freed`` (released by an earlier pass without retain_graph); ``modified``
(changed in place since it was saved); ``none`` (PyTorch did not need to save it); ``packed``
(held by saved_tensors_hooks, as under checkpoint); ``scalar`` (a saved number or size);
a 0-dim tensor on the CPU (a wrapped scalar) is ``alive`` with its ``value`` too;
``unknown`` (a torch without ``SavedTensor.data``, before 2.10: nothing about a saved tensor can be
read without unpacking it, and unpacking re-runs checkpoint forwards, so only its name is known).
"""

from __future__ import annotations

import json
import re
from typing import Any

import torch

from backstep.engine.pending_tags import metadata as node_metadata
from backstep.engine.summary.format import dtype_text
from backstep.engine.torch_api import saved_tensor_data
from backstep.events.form import compact_saved

VERSIONS_KEY = "backstep.saved_versions"
_RAW = "_raw_saved_"
_names: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}
_VERSION_RE = re.compile(r"is at version (\d+); expected version (\d+)")
_SavedTensor = getattr(torch._C._autograd, "SavedTensor", ())
# False on a torch without SavedTensor.data: saved tensors are then listed with status "unknown"
# and never unpacked (tests set it False to stand in for such a torch)
SAVED_DATA = saved_tensor_data(torch)


def _attribute_names(node: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tensor names, scalar names) of a node type, cached: dir() costs microseconds."""
    kind = type(node)
    names = _names.get(kind)
    if names is None:
        attrs = dir(node)
        tensors = tuple(a[len(_RAW):] for a in attrs if a.startswith(_RAW))
        scalars = tuple(
            a[len("_saved_"):]
            for a in attrs
            if a.startswith("_saved_") and a[len("_saved_"):] not in tensors
        )
        names = _names[kind] = (tensors, scalars)
    return names


def has_saved(node: Any) -> bool:
    tensors, scalars = _attribute_names(node)
    return bool(tensors or scalars)


def _scalar(value: Any) -> Any:
    """A saved scalar as JSON; an int -1 reads back from C++ as 2**64-1."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value - (1 << 64) if value >= (1 << 63) else value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, (list, tuple)):
        value = value[:64]
        if all(type(v) is int and 0 <= v < (1 << 63) for v in value):
            return list(value)  # sizes and strides, the usual case
        return [_scalar(v) for v in value]
    return repr(value)[:80]


def _one(node: Any, name: str, raw: Any, attr: str, recorded: dict | None, check: bool) -> dict:
    entry: dict[str, Any] = {"name": name, "status": "alive", "shape": None, "dtype": None,
                             "bytes": 0, "version": None}
    if not SAVED_DATA:
        entry["status"] = "unknown"  # only unpacking could tell, and backstep never unpacks
        return entry
    if getattr(raw, "unpack_hook", None) is not None:
        # saved through saved_tensors_hooks (checkpoint, offloading): unpacking would run the
        # user's hook (a forward recompute under checkpoint), so report it as packed
        entry["status"] = "packed"
        return entry
    data = raw.data
    if data is None:
        entry["status"] = "freed"
        if attr:
            try:
                if getattr(node, attr) is None:
                    entry["status"] = "none"  # PyTorch never saved it (nothing needed it)
            except RuntimeError:
                pass  # freed by an earlier pass without retain_graph
        return entry
    entry["shape"] = list(data.shape)
    entry["dtype"] = dtype_text(data.dtype)
    entry["bytes"] = data.numel() * data.element_size()
    value = zero_dim_value(data)
    if value is not _NO_VALUE:  # written before "version", as the cached records expect
        del entry["version"]
        entry["value"] = value
        entry["version"] = None
    now = data._version
    saved = recorded.get(name) if recorded else None
    if saved is not None:
        entry["version"] = {"saved": saved, "now": now}
        if saved != now:
            entry["status"] = "modified"
            entry["modified_by"] = _modified_by(data, saved, now)
    elif check and attr:
        try:
            getattr(node, attr)
        except RuntimeError as exc:
            match = _VERSION_RE.search(str(exc))
            if match:
                entry["status"] = "modified"
                entry["version"] = {"saved": int(match.group(2)), "now": int(match.group(1))}
                entry["modified_by"] = _modified_by(data, int(match.group(2)), now)
    return entry


_NO_VALUE = object()


def zero_dim_value(data: torch.Tensor) -> Any:
    """The value of a 0-dim tensor on the CPU (a wrapped scalar such as ``-0.5``), as JSON:
    reading it costs no more than its summary would; else ``_NO_VALUE`` (a GPU tensor's value
    would cost a device sync, a bigger tensor has a shape and no one value)."""
    try:
        if data.dim() != 0 or data.device.type != "cpu" or data.is_sparse:
            return _NO_VALUE
        return _scalar(data.item())
    except Exception:  # noqa: BLE001 - a tensor that will not say has no value to record
        return _NO_VALUE


def _modified_by(data: Any, saved: int, now: int) -> dict[str, Any] | None:
    """The in-place op (line and name) that moved the tensor past its saved version."""
    if saved == now:
        return None
    try:  # the module, not the package: the package's tagging imports this one
        from backstep.engine.provenance.inplace import history as inplace_history
    except ImportError:
        return None
    history = [h for h in inplace_history(data) if saved < h.get("version", 0) <= now]
    return history[0] if history else None


_RECORDS: dict[tuple, _Record] = {}
_RECORDS_MAX = 4096
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def saved_record(node: Any) -> tuple[list[dict[str, Any]], str | None]:
    """``saved_status(node)`` and its JSON text, for a node event of a recorded pass.

    Nodes of one kind in a model's repeated layers save alike: the same names, shapes and
    numbers. So the common case (every saved tensor alive, unmodified, saved without hooks) is
    keyed by what decides the entries and looked up: equal keys give the same list (shared,
    never mutated) and text. The version each tensor was saved at (provenance's) is no part of
    the key: an optimizer bumps a parameter's every step, and only those numbers change in the
    entries and their text. Anything else is read as ``saved_status`` reads it (text None).
    """
    kind = type(node)
    plan = _PLANS.get(kind)
    if plan is None:
        tensors, scalars = _attribute_names(node)
        plan = _PLANS[kind] = (tuple((_RAW + n, "_saved_" + n, n) for n in tensors),
                               tuple("_saved_" + n for n in scalars))
    tensors, scalars = plan
    if not tensors and not scalars:
        return [], "[]"
    try:
        key: list[Any] = [kind]
        versions: list[int] = []  # recorded versions, in entry order
        if tensors:
            recorded = node_metadata(node).get(VERSIONS_KEY)
            for raw_attr, attr, name in tensors:
                raw = getattr(node, raw_attr)
                if not SAVED_DATA:  # each one "unknown": the node's kind decides the entries
                    if type(raw) is not _SavedTensor:
                        return saved_status(node), None
                    continue
                if type(raw) is tuple:  # a custom Function's saved_tensors
                    key.append(_TUPLE)
                    for index, item in enumerate(raw):
                        if item is None:
                            key.append(None)
                            continue
                        data = item.data if type(item) is _SavedTensor else None
                        if data is None or item.unpack_hook is not None:
                            return saved_status(node), None
                        saved = recorded.get(f"{name}[{index}]") if recorded else None
                        if not _keyed(key, versions, data, saved):
                            return saved_status(node), None
                    key.append(_TUPLE)
                    continue
                if type(raw) is not _SavedTensor or raw.unpack_hook is not None:
                    return saved_status(node), None
                data = raw.data
                if data is None:
                    if getattr(node, attr) is not None:  # freed: raises, or not
                        return saved_status(node), None
                    key.append(None)  # "none": PyTorch never saved it
                    continue
                saved = recorded.get(name) if recorded else None
                if not _keyed(key, versions, data, saved):
                    return saved_status(node), None  # modified: its culprit is looked up
        for attr in scalars:
            try:
                value = getattr(node, attr)
            except RuntimeError:
                key.append(_SKIPPED)
                continue
            kind = type(value)
            if kind is tuple:
                if not _INTS.issuperset(map(type, value)):
                    return saved_status(node), None
                key += (kind, value)  # sizes and strides
            elif kind is int or kind is bool or kind is str or value is None:
                key += (kind, value)
            elif kind is float:
                key += (kind, repr(value))  # -0.0 == 0.0, but they read differently
            else:
                return saved_status(node), None  # tensors, lists, anything else
        whole = tuple(key)
        hit = _RECORDS.get(whole)
        if hit is None or (versions != hit.versions and hit.parts is None):
            out = saved_status(node)
            if len(_RECORDS) >= _RECORDS_MAX:
                _RECORDS.clear()
            hit = _RECORDS[whole] = _Record(out, _encode(compact_saved(out)), versions)
        return hit.at(versions)
    except Exception:  # noqa: BLE001 - read it the careful way
        return saved_status(node), None


def _keyed(key: list[Any], versions: list[int], data: torch.Tensor, saved: int | None) -> bool:
    """Add an alive saved tensor to ``key`` (its recorded version to ``versions``); False when
    it was modified since it was saved (read the careful way: its culprit is looked up)."""
    if saved is not None:
        if saved != data._version:
            return False
        versions.append(saved)
    key += (data.shape, data.dtype, saved is not None)  # the bytes follow from these two
    if not data.shape:  # a 0-dim tensor's entry holds its value (repr: -0.0 is not 0.0)
        key.append(repr(zero_dim_value(data)))
    return True


class _Record:
    """A cached ``saved`` list and its text, and where its recorded versions go: the entries
    that carry ``"version": {"saved": v, "now": v}`` (every saved tensor is unmodified here)
    and the text around those numbers. ``parts`` is None when the text cannot be split so
    (checked against the encoder's own text); such a record only serves its own versions."""

    __slots__ = ("entries", "text", "versions", "positions", "parts")

    def __init__(self, entries: list[dict[str, Any]], text: str, versions: list[int]) -> None:
        self.entries, self.text, self.versions = entries, text, versions
        self.positions = [k for k, e in enumerate(entries) if e.get("version") is not None]
        self.parts: list[str] | None = None
        if not versions:
            return
        parts, chunk = [], []
        for k, entry in enumerate(entries):
            if k in self.positions:
                bare = {key: value for key, value in entry.items() if key != "version"}
                head = _encode(compact_saved([bare]))[1:-2]  # the entry without its last "}"
                parts.append("".join(chunk) + ("," if k else "") + head + ',"version":{"saved":')
                chunk = ['}}']
            else:
                chunk.append(("," if k else "") + _encode(compact_saved([entry]))[1:-1])
        parts.append("".join(chunk))
        if (len(self.positions) == len(versions) and self._join(parts, versions) == text
                and all(entries[k]["version"] == {"saved": v, "now": v}
                        for k, v in zip(self.positions, versions, strict=True))):
            self.parts = parts

    @staticmethod
    def _join(parts: list[str], versions: list[int]) -> str:
        pieces = ["[", parts[0]]
        for version, part in zip(versions, parts[1:], strict=True):
            pieces += (str(version), ',"now":', str(version), part)
        pieces.append("]")
        return "".join(pieces)

    def at(self, versions: list[int]) -> tuple[list[dict[str, Any]], str]:
        """The list and text with these recorded versions (the cached ones when equal)."""
        if versions == self.versions or self.parts is None:
            return self.entries, self.text
        entries = list(self.entries)
        for k, version in zip(self.positions, versions, strict=True):
            entries[k] = {**entries[k], "version": {"saved": version, "now": version}}
        return entries, self._join(self.parts, versions)


_TUPLE = object()  # brackets a custom Function's saved tensors in a key
_PLANS: dict[type, tuple[tuple[tuple[str, str, str], ...], tuple[str, ...]]] = {}
_INTS = frozenset({int})
_SKIPPED = object()


def saved_status(node: Any, check: bool = False) -> list[dict[str, Any]]:
    """Each saved tensor and scalar of ``node`` with its status; never raises.

    ``check`` also detects in-place modification by unpacking when no version was recorded at
    forward time; the engine asks for it only at stops and on errors, never per node.
    """
    try:
        tensors, scalars = _attribute_names(node)
        recorded = node_metadata(node).get(VERSIONS_KEY) if tensors else None
        out = []
        for name in tensors:
            raw = getattr(node, _RAW + name)
            if isinstance(raw, tuple):  # custom Function saved_tensors, or a saved list
                for k, item in enumerate(raw):
                    if item is not None:
                        out.append(_one(node, f"{name}[{k}]", item, "", recorded, False))
            elif raw is not None:
                out.append(_one(node, name, raw, "_saved_" + name, recorded, check))
        for name in scalars:
            try:
                value = getattr(node, "_saved_" + name)
            except RuntimeError:
                continue
            if isinstance(value, torch.Tensor) or (
                isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor)
            ):
                continue
            out.append({"name": name, "status": "scalar", "value": _scalar(value)})
        return out
    except Exception as exc:  # noqa: BLE001 - status is informative; never break a pass
        return [{"name": "?", "status": "unknown", "note": f"{type(exc).__name__}: {exc}"[:120]}]


def saved_tensors(node: Any) -> list[tuple[str, torch.Tensor]] | tuple[()]:
    """``(name, tensor)`` of each saved tensor of ``node`` that is held now and saved without
    hooks, read without unpacking (``SavedTensor.data``); a custom Function's ``saved_tensors``
    as ``name[k]``. Empty on a torch without ``SavedTensor.data``. For memory accounting: read
    on every node of a recorded pass at its start, so the attribute names are cached per type."""
    kind = type(node)
    attrs = _TENSOR_ATTRS.get(kind)
    if attrs is None:
        attrs = _TENSOR_ATTRS[kind] = tuple((_RAW + n, n) for n in _attribute_names(node)[0])
    if not attrs or not SAVED_DATA:
        return ()
    out = []
    for attr, name in attrs:
        try:
            raw = getattr(node, attr)
        except Exception:  # noqa: BLE001
            continue
        if type(raw) is _SavedTensor:
            if raw.unpack_hook is None:
                data = raw.data
                if data is not None:
                    out.append((name, data))
        elif type(raw) is tuple:
            for k, item in enumerate(raw):
                if type(item) is _SavedTensor and item.unpack_hook is None:
                    data = item.data
                    if data is not None:
                        out.append((f"{name}[{k}]", data))
    return out


_TENSOR_ATTRS: dict[type, tuple[tuple[str, str], ...]] = {}
