"""Provenance inside torch's own modules: regions and scopes instead of the per-op mode.

Every op run inside a *library* module's forward (a module whose class's ``forward`` is torch's
code: nn.Linear, nn.TransformerEncoderLayer, nn.Sequential, ...) gets, by ``find_source``'s rule,
the line of user code that called the outermost library module, so the torch-function mode's
per-op work is wasted there, and it is most of provenance's cost on models built from torch's
modules. So when a library module starts with the mode on top of the thread's torch-function
stack, the module tracker pops the mode until the module returns: a paused *region*.

Inside a region the hooks only log: each library module call appends its module's id and the
autograd sequence number at its start, and the number at its end, to the Region (a few attribute
reads and appends; no object per call). A user module inside (a user block in nn.Sequential) gets
the mode back for its forward, so its ops keep their exact lines and its library modules open
regions of their own. When the region's module returns, the nodes of its outputs made inside it
(and of arguments it modified in place) get the region's line and module path, and the Region in
``SCOPE_KEY``; the mode comes back. Nodes the mode tags in a user module inside a region carry
that Region in ``AROUND_KEY``, to find the nodes the region made before.

``annotate`` (and ``source_of``/``module_of``) turn a Region into Scopes when first asked: one
slotted Scope per module call (its [start, end) sequence numbers, module path, the user line, the
enclosing Scope), paths resolved from the root's module map (``naming.module_paths``). A node
made in a region belongs to the innermost Scope whose range holds its sequence number (a
bisection: ranges nest, and starts grow in call order); untagged parents of a node with a
Scope get theirs the same way.

Behaviour that differs from the per-op mode: user callables that are not modules, run inside a
library module (a custom activation function passed to nn.TransformerEncoderLayer), are attributed
to the line that called the library module; in-place changes inside a library module are recorded
per module call (the arguments of the outermost library module, and of library modules built with
``inplace=True``), named by the module's class, with that line; nodes made inside a library
module get no ``saved_versions`` (a stop still finds a modified saved tensor by unpacking it); a
library module called under no_grad inside another library module is not noted as a graph cut
(its caller is); an inner module not registered under the root gets the enclosing module's path.

Why a log and not an object per call, tagging each module's outputs as it returns: on the worst
case (a 32-layer nn.TransformerEncoder, 289 module calls in a 9 ms forward) no-op global module
hooks alone cost 1.06-1.07x; on them a Scope per call with output tags measured 1.12-1.20x, the
log about 1.09x (provenance_calls has since replaced the hooks: 1.03-1.04x).

A Region holds no frame, tensor, node or module once its module has returned (the naming context
and the arguments' versions are dropped at its end; modules are kept as ids and weak references).
A forward ended by any exception, KeyboardInterrupt included, closes its region (``leave`` runs)
and tags nothing of it. Should a region still be left open (a BaseException inside ``enter``
itself), the tracker notices at the next module call that takes its slow path (a user module, or
the same library module returning again) and forgets it untagged, putting the mode back.
"""

from __future__ import annotations

import weakref
from bisect import bisect_right
from typing import Any

import torch
from torch import nn

from backstep.engine.naming import module_paths
from backstep.engine.pending_tags import IF_UNTAGGED
from backstep.engine.pending_tags import entry as pending_entry
from backstep.engine.provenance.frames import code_file

SOURCE_KEY = "backstep.source"
MODULE_KEY = "backstep.module"
SAVED_VERSIONS_KEY = "backstep.saved_versions"
SPAN_KEY = "backstep.span"  # (first, end) sequence numbers of the call that made the node
SCOPE_KEY = "backstep.scope"  # the Region, then (once resolved) the Scope, that made the node
AROUND_KEY = "backstep.region"  # the Region around the user module whose op made the node

OPEN = 1 << 62  # ``end`` while the module still runs

# False until a node is given a span (tagging) or a Region is made: only such nodes give
# ``annotate`` anything to hand down, so until then it skips its walk (never reset: a graph
# made earlier may still be annotated later)
wide = False

USER, LIBRARY, LIBRARY_INPLACE = 0, 1, 2
_kinds: dict[type, int] = {}
# the classes module_kind found to be library code (membership is the hooks' cheapest test), and
# those of them whose constructor takes ``inplace``
LIBRARY_CLASSES: set[type] = set()
INPLACE_CLASSES: set[type] = set()

ModuleMap = dict[int, tuple["weakref.ref[nn.Module]", str | None]]
# root module -> {id(submodule): (weakref, dotted path under the root)}; shared by the trackers
TABLES: weakref.WeakKeyDictionary[nn.Module, ModuleMap] = weakref.WeakKeyDictionary()


def build_table(root: nn.Module) -> ModuleMap:
    """Map the root's submodules, registered or held in plain containers (cached in TABLES)."""
    table = {id(m): (weakref.ref(m), name) for name, m in module_paths(root)}
    TABLES[root] = table
    return table


def module_kind(cls: type) -> int:
    """USER when ``cls.forward`` is user code; LIBRARY (LIBRARY_INPLACE when its constructor
    takes ``inplace``) when it is torch's. A user subclass that keeps torch's forward is library
    code: its ops get the caller's line either way. Cached per class."""
    kind = _kinds.get(cls)
    if kind is not None:
        return kind
    kind = USER
    try:
        code = getattr(getattr(cls, "forward", None), "__code__", None)
        if code is not None and code_file(code) is None:
            kind = LIBRARY
            init = getattr(getattr(cls, "__init__", None), "__code__", None)
            if init is not None:
                count = init.co_argcount + init.co_kwonlyargcount
                if "inplace" in init.co_varnames[:count]:
                    kind = LIBRARY_INPLACE
    except Exception:
        kind = USER  # the mode stays on: exact lines, the old cost
    _kinds[cls] = kind
    if kind:
        LIBRARY_CLASSES.add(cls)
        if kind == LIBRARY_INPLACE:
            INPLACE_CLASSES.add(cls)
    return kind


class Scope:
    """One module call of a region: nodes numbered in [start, end) were made during it."""

    __slots__ = ("start", "end", "parent", "path", "source", "region")

    def __init__(
        self, start: int, end: int, parent: Scope | None, path: str | None, region: Region
    ) -> None:
        self.start = start
        self.end = end
        self.parent = parent  # the enclosing module call's Scope (None: the region's module)
        self.path = path
        self.source = region.source  # the user line that called the region's module
        self.region = region


class Region:
    """A library module called with the mode on top, and the library modules it ran.

    On the thread's module stack while it runs (``key``, ``path``, ``origin`` and ``frame`` make
    it look like a running-module entry to the tracker and find_source); in its output nodes'
    metadata afterwards. ``log`` holds, in call order, ``id(module), start`` for each inner
    library module call and ``~end`` at its end.
    """

    __slots__ = (
        "module", "key", "path", "origin", "source", "start", "end", "log", "versions", "base",
        "root", "table", "rebuilt", "scopes", "starts", "caller", "resume",
    )  # fmt: skip

    frame = None  # no module call frame for find_source to match
    pushes = False  # the mode is off while it runs

    def __init__(self, module: nn.Module, path: str, origin: Any, source: Any, start: int) -> None:
        global wide
        wide = True  # its nodes carry it in SCOPE_KEY or AROUND_KEY
        self.module: nn.Module | None = module  # while it runs
        self.key = id(module)
        self.path = path
        # the naming context while it runs: the entry of the root module it is named from, or
        # itself when it is a root (``module``, ``path``, ``table`` and ``rebuilt`` serve)
        self.origin = origin if origin is not None else self
        self.source = source
        self.start = start
        self.end = OPEN
        self.log: list[int] = []
        self.versions: list[tuple[torch.Tensor, int]] | None = None
        self.base: str = path  # path of the naming root (inner paths are relative to it)
        self.root: weakref.ref[nn.Module] | None = None
        self.table: ModuleMap | None = None
        self.rebuilt = False
        self.caller: Any = None  # the module call's frame (provenance_calls), while it runs
        self.scopes: list[Scope] | None = None  # built from ``log`` when first asked
        self.starts: list[int] | None = None
        self.resume: Any = None  # run after its end gave the mode back (a re-run's own push)

    def finish(self, end: int) -> None:
        """The module returned: keep how to name its inner modules, drop every strong ref."""
        self.end = end
        origin = self.origin
        if origin is not None:
            self.base = origin.path
            self.table = origin.table  # None: fetched (or built) from ``root`` when first asked
            module = origin.module
            self.root = weakref.ref(module) if module is not None else None
        self.origin = self.module = self.caller = None
        self.versions = None

    # -- after the forward ------------------------------------------------------------------

    def build(self) -> None:
        """Turn the log into Scopes (once)."""
        if self.scopes is not None:
            return
        top = Scope(self.start, self.end, None, self.path, self)
        scopes, starts, keys = [top], [self.start], [self.key]
        stack = [top]
        log = self.log
        index = 0
        count = len(log)
        while index < count:
            value = log[index]
            if value >= 0:
                start = log[index + 1]
                index += 2
                scope = Scope(start, OPEN, stack[-1], None, self)
                stack.append(scope)
                scopes.append(scope)
                starts.append(start)
                keys.append(value)
            else:
                index += 1
                if len(stack) > 1:
                    stack.pop().end = ~value
        for scope in stack[1:]:
            scope.end = self.end
        names = self._names(set(keys[1:]))
        base = self.base
        for scope, key in zip(scopes[1:], keys[1:], strict=True):
            name = names.get(key)
            if name is None:  # not registered under the root: the enclosing module's path
                scope.path = scope.parent.path if scope.parent is not None else self.path
            else:
                scope.path = f"{base}.{name}" if name else base
        self.scopes, self.starts = scopes, starts

    def _names(self, keys: set[int]) -> dict[int, str | None]:
        """{id: dotted path under the naming root} for those of ``keys`` still registered there
        (a live weak reference confirms the id still means the same module)."""
        if not keys:
            return {}
        root = self.root() if self.root is not None else None
        table = self.table
        if table is None and root is not None:
            table = self.table = TABLES.get(root)
        names: dict[int, str | None] = {}
        for attempt in range(2):
            missing = False
            for key in keys:
                hit = table.get(key) if table is not None else None
                if hit is not None and hit[0]() is not None:
                    names[key] = hit[1]
                else:
                    missing = True
            if not missing or root is None or attempt:
                break
            table = self.table = build_table(root)
        return names

    def scope_of(self, number: int) -> Scope | None:
        """The innermost Scope of this region whose range holds ``number``, or None."""
        self.build()
        starts = self.starts
        assert starts is not None and self.scopes is not None
        index = bisect_right(starts, number) - 1
        if index < 0:
            return None
        scope: Scope | None = self.scopes[index]
        while scope is not None and not (scope.start <= number < scope.end):
            scope = scope.parent
        return scope


def region_of(holder: Any) -> Region | None:
    """The Region behind a SCOPE_KEY value (a Region or a Scope)."""
    if isinstance(holder, Region):
        return holder
    if isinstance(holder, Scope):
        return holder.region
    return None


def resolve(node: Any, metadata: dict[str, Any]) -> Scope | None:
    """Complete a node tagged with a Region (an output of the region's module, tagged with its
    source and path when it returned): the source, module path and Scope of the innermost module
    call that made it. Returns that Scope (None when the node has none)."""
    holder = metadata.get(SCOPE_KEY)
    if holder is None or isinstance(holder, Scope):
        return holder
    if not isinstance(holder, Region):
        return None
    scope = holder.scope_of(node._sequence_nr())
    if scope is None:
        return None
    _write(scope, metadata)
    return scope


def inherit(holder: Any, parent: Any, metadata: dict[str, Any]) -> bool:
    """Give ``parent`` (untagged; ``metadata`` its metadata) the tags of the innermost scope of
    ``holder``'s region that made it; False when the region did not make it."""
    region = region_of(holder)
    if region is None:
        return False
    number = parent._sequence_nr()
    if not region.start <= number < region.end:
        return False
    scope = region.scope_of(number)
    if scope is None:
        return False
    _write(scope, metadata)
    return True


def _write(scope: Scope, metadata: dict[str, Any]) -> None:
    """A node's tags from the scope that made it."""
    if scope.source is not None:
        metadata[SOURCE_KEY] = scope.source
    if scope.path is not None:
        metadata[MODULE_KEY] = scope.path
    metadata[SCOPE_KEY] = scope


_Tensor = torch.Tensor


def _tag(region: Region, tensor: Any) -> None:
    node = tensor.grad_fn
    if node is None:
        return
    number = node._sequence_nr()
    if number < region.start or number >= region.end:
        return
    metadata = pending_entry(node, number)  # not node.metadata: see pending_tags
    if metadata and (SOURCE_KEY in metadata or MODULE_KEY in metadata or SCOPE_KEY in metadata):
        return
    metadata[IF_UNTAGGED] = True  # a node read (and tagged) before this keeps its tags
    # the region's line and module until resolve() names the innermost module call
    if region.source is not None:
        metadata[SOURCE_KEY] = region.source
    metadata[MODULE_KEY] = region.path
    metadata[SCOPE_KEY] = region


def tag_outputs(region: Region, output: Any) -> None:
    """Tag the nodes of ``output`` (a tensor, or tensors in tuples/lists two levels deep) made
    during the region and not tagged yet (the mode, in a user module inside, tagged it first)."""
    if isinstance(output, _Tensor):
        _tag(region, output)
    elif isinstance(output, (tuple, list)):
        for item in output:
            if isinstance(item, _Tensor):
                _tag(region, item)
            elif isinstance(item, (tuple, list)):
                for inner in item:
                    if isinstance(inner, _Tensor):
                        _tag(region, inner)
