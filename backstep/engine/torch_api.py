"""Which torch backstep runs on: the version floor, and every private torch name it relies on.

backstep works below torch's public API (the engine's entry point, module calls, node internals).
A torch release that renames one of those names would otherwise fail deep inside the user's own
``import torch``; listed here, they are checked once before a script runs, and a missing one is
reported in one line that names it.

Nothing here imports torch at module level. The floor is read from the installed metadata. The
names are probed in a child Python, once per torch installation (the answer is cached), so that
the script's own ``import torch`` stays the first one in its process, exactly as under plain
python: its warnings, their filters and their order unchanged.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from typing import Any

FLOOR = (2, 4)
FLOOR_TEXT = "2.4"

# Private names the engine needs, dotted from ``torch``, and where and why it uses each. Node
# internals are checked on a representative generated node class (MulBackward0 saves ``self``
# and ``other``); every node class has them the same way.
REQUIRED: dict[str, str] = {
    "torch.autograd._engine_run_backward":
        "capture: the one call every backward() and autograd.grad() goes through",
    "torch.nn.Module._call_impl":
        "provenance_calls: module calls, for the module path of each node",
    "torch.autograd.function.Function.apply":
        "provenance_tagging: Function.apply, which it wraps to tag the nodes of custom Functions "
        "(a Python classmethod before torch 2.14, a C classmethod descriptor since)",
    "torch._C._autograd._get_sequence_nr":
        "provenance_tagging, provenance_modules: which nodes a forward call created",
    "torch._C._len_torch_function_stack":
        "provenance: its torch-function mode, kept off the stack inside torch's own modules",
    "torch._C._get_function_stack_at": "provenance: (as above)",
    "torch._C._push_on_torch_function_stack": "provenance: (as above)",
    "torch._C._pop_torch_function_stack": "provenance: (as above)",
    "torch._C._functions.AccumulateGrad._sequence_nr":
        "graph, capture, provenance_scopes: Node._sequence_nr(), the execution order of nodes",
    "torch._C._functions.MulBackward0._saved_self":
        "saved, diagnostics: Node._saved_<name>, a node's saved tensors and scalars",
    "torch._C._functions.MulBackward0._raw_saved_self":
        "saved, provenance_tagging, provenance_inplace: Node._raw_saved_<name>, their status "
        "read without unpacking",
    "torch.Tensor._version":
        "saved, provenance_*: the in-place version counter, for 'modified in place'",
    "torch._foreach_norm": "summary: the norms of a batch of gradients in one kernel",
}

# Used when present, with a fallback when not: never a reason to refuse a torch.
OPTIONAL: dict[str, str] = {
    "torch._C._autograd.SavedTensor.data":
        "saved, provenance_tagging: a saved tensor's data, None once freed, read without "
        "unpacking; without it (torch < 2.10) each saved tensor is listed by name, status "
        "unknown (see saved_tensor_data)",
    "torch._C._autograd.SavedTensor.unpack_hook":
        "saved: whether a saved tensor went through saved_tensors_hooks (read with .data)",
    "torch.compiler._is_compiling_flag": "provenance_calls, provenance_tagging: fast path",
    "torch._C._get_dispatch_mode":
        "capture: a backward traced under make_fx's proxy mode is torch.compile's own "
        "(AOTAutograd), not one of the user's passes; see compile_tracing",
    "torch._C._TorchDispatchModeKey.PROXY": "capture: (as above)",
    "torch.compiler.is_dynamo_compiling": "provenance_calls, provenance_tagging: fast path",
    "torch.distributed.distributed_c10d._get_default_group":
        "process_group: the default group's backends (ProcessGroup._get_backend, "
        "_device_types, options._timeout) for the collective timeout; left out without them",
    "torch._C._current_graph_task_id":
        "provenance_modules: a forward re-run inside a backward (reentrant checkpoint) gets the "
        "mode back; left untagged without it",
    "torch._C._current_autograd_node":
        "provenance_modules: the line of the node that re-runs a forward (the checkpoint call)",
    # FSDP2 and DTensor (engine/sharded.py), read only once the script imported them; without
    # one, FSDP's leaves keep their leaf#N names and its nodes their bare names
    "torch.distributed.fsdp.FSDPModule._get_fsdp_state":
        "sharded: a fully_shard module's FSDPState, whose _state_ctx.all_states lists its "
        "tree's states and each state's _fsdp_param_groups their .fsdp_params",
    "torch.distributed.fsdp._fully_shard._fsdp_param.FSDPParam.unsharded_param":
        "sharded: FSDPParam's _unsharded_param (the AccumulateGrad node's tensor), with "
        "sharded_param (the DTensor the model holds) and _param_fqn",
    "torch.distributed.fsdp._fully_shard._fsdp_param_group.RegisterPostBackwardFunction":
        "sharded: its node's ctx keeps param_group (._module_fqn), the reduce-scatter point",
    "torch.distributed.tensor._redistribute.Redistribute":
        "sharded: RedistributeBackward's ctx keeps current_spec, the placements it goes back to",
}

_PROBE_TIMEOUT = 300.0
_SAFE_PATH = ("-P",) if hasattr(sys.flags, "safe_path") else ()  # Python 3.11+
_FAILED = "-import-failed"  # suffix of the cache marker of a probe whose torch did not import
# what the child runs: self-contained, so it works wherever backstep itself is importable or not
_PROBE = """import sys
if sys.path and sys.path[0] == "":
    del sys.path[0]  # the working directory, where -P (3.11+) does not exist (3.10)
import torch
for name in sys.argv[1:]:
    value = torch
    try:
        for part in name.split(".")[1:]:
            value = getattr(value, part)
    except Exception:
        print("missing", name)
"""


def saved_tensor_data(torch: Any) -> bool:
    """Whether this torch reads a saved tensor without unpacking it (``SavedTensor.data``).

    Without it the only way to a saved tensor's shape or status is to unpack it, which runs the
    unpack hook (a forward recompute under checkpoint) and raises on a freed or modified tensor:
    backstep never does that, and lists such tensors by name with status ``unknown``."""
    saved_tensor = getattr(getattr(torch._C, "_autograd", None), "SavedTensor", None)
    return saved_tensor is not None and hasattr(saved_tensor, "data")


def compile_tracing(torch: Any) -> Callable[[], bool]:
    """A check for a backward that torch.compile traces (AOTAutograd, under make_fx's proxy
    dispatch mode) rather than runs. Recent torch says so in ``torch.compiler.is_compiling()``;
    before that (seen on 2.4 to 2.12) only the proxy mode on the stack does. Always False on a
    torch without the mode's getter."""
    get_mode = getattr(torch._C, "_get_dispatch_mode", None)
    proxy = getattr(getattr(torch._C, "_TorchDispatchModeKey", None), "PROXY", None)
    if get_mode is None or proxy is None:
        return lambda: False
    return lambda: get_mode(proxy) is not None


def installed_version() -> str | None:
    """The installed torch's version, read without importing it; None when not installed."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def parse(version: str) -> tuple[int, int] | None:
    """(major, minor) of a torch version string ("2.13.0+cpu", "2.4.0a0+git1234")."""
    match = re.match(r"\s*(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def version_problem(version: str | None) -> str | None:
    """The one line to show when ``version`` is below the floor (None when fine or unknown)."""
    if version is None:
        return None
    parsed = parse(version)
    if parsed is None or parsed >= FLOOR:
        return None
    return f"backstep needs torch >= {FLOOR_TEXT}; found {version}"


def names_problem(version: str | None, missing: list[str]) -> str | None:
    """The one line to show when this torch lacks names backstep needs."""
    if not missing:
        return None
    which = ", ".join(missing)
    return (f"backstep needs {which}, which torch {version or '(unknown version)'} lacks "
            f"(backstep supports torch >= {FLOOR_TEXT})")


def missing_names(torch: Any, names: Iterable[str] | None = None) -> list[str]:
    """The names (default: ``REQUIRED``) that the imported ``torch`` module lacks."""
    missing = []
    for name in REQUIRED if names is None else names:
        value: Any = torch
        try:
            for part in name.split(".")[1:]:
                value = getattr(value, part)
        except Exception:  # noqa: BLE001 - a descriptor that raises counts as missing
            missing.append(name)
    return missing


def check_imported() -> str | None:
    """For a process that has imported torch (or may import it now): the problem line, or None.
    Never raises. Used by ``attach()`` and by the debuggee's post-import hook."""
    try:
        version = installed_version()
        problem = version_problem(version)
        if problem is not None:
            return problem
        torch = sys.modules.get("torch")
        if torch is None:
            if version is None:
                return None
            import torch  # noqa: PLC0415 - attach() arms capture, which imports it anyway
        version = getattr(torch, "__version__", version)
        return version_problem(version) or names_problem(version, missing_names(torch))
    except Exception as exc:  # noqa: BLE001 - a check must never break the script
        return f"backstep could not check torch: {exc!r}"


def check() -> str | None:
    """Before a script runs, without importing torch here: the problem line, or None.

    The floor comes from the metadata. The names are probed in a child Python that imports
    torch; a passing answer is cached per torch installation (its path, version and the
    timestamps of its files), so only the first command after an install or upgrade pays for
    one torch import. With no torch installed there is nothing to check: a script that needs it
    fails on its own ``import torch`` exactly as under plain python. A probe whose torch does not
    import is remembered too (the script's own import says why, and the debuggee's post-import
    check still names a missing name), so a broken install costs one failed import, not one per
    command.
    """
    version = installed_version()
    if version is None:
        return None
    problem = version_problem(version)
    if problem is not None:
        return problem
    names = list(REQUIRED)
    marker = _cache_marker(version, names)
    failed = None if marker is None else marker + _FAILED
    if marker is not None and (os.path.exists(marker) or os.path.exists(failed)):
        return None
    missing = _probe(names)
    if missing is None:
        if failed is not None:
            _touch(failed, "torch did not import in the probe; the script's import will say why\n")
        return None  # torch does not import: the script's own import will say why
    if missing:
        return names_problem(version, missing)
    if marker is not None:
        _touch(marker)
    return None


def _probe(names: list[str]) -> list[str] | None:
    """Import torch in a child Python and list which ``names`` it lacks; None if it fails.

    ``-P`` (Python 3.11+; on 3.10 the probe drops that entry itself): nothing is put before
    the installed packages on ``sys.path``. A plain ``python -c`` puts the working directory
    there, so a ``torch.py`` in it would run here, although ``python /abs/script.py`` never
    looks in the working directory. PYTHONPATH and the
    user site stay, as for the script, so the probe finds the torch the script would find, except
    one in the script's own directory (its ``sys.path[0]``): that one is checked after the
    script's own import, by the debuggee's post-import hook (``check_imported``)."""
    try:
        done = subprocess.run(
            [sys.executable, *_SAFE_PATH, "-c", _PROBE, *names],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=_PROBE_TIMEOUT,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return [line[len("missing "):] for line in done.stdout.splitlines()
            if line.startswith("missing ")]


def _cache_marker(version: str, names: list[str]) -> str | None:
    """Where a passing probe of this exact torch installation is remembered (None: nowhere)."""
    try:
        spec = importlib.util.find_spec("torch")
        origin = spec.origin if spec is not None else None
        if origin is None:
            return None
        directory = os.path.dirname(origin)
        key = [sys.executable, origin, version, *names]
        for entry in sorted(os.listdir(directory)):
            if entry == "__init__.py" or entry.startswith("_C."):
                stat = os.stat(os.path.join(directory, entry))
                key.append(f"{entry}:{stat.st_size}:{stat.st_mtime_ns}")
        digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:32]
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                 ".cache")
        return os.path.join(cache, "backstep", f"torch-ok-{digest}")
    except (OSError, ImportError, ValueError):
        return None


def _touch(path: str, text: str = "the private torch names backstep needs were all found\n",
           ) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(text)
    except OSError:
        pass
