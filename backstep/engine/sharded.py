"""FSDP2 and DTensor: sharded parameters named as the model names them, their gradients shown
per shard, and FSDP's communication points labelled — all without a single collective.

Measured on torch 2.13, 2 gloo ranks, ``fully_shard`` per layer and on the root:
- the model's parameters are DTensors (``Shard(0)``, local [2, 4] of [4, 4]), but the graph's
  ``AccumulateGrad`` nodes hold the all-gathered *unsharded* plain parameters
  (``FSDPParam._unsharded_param``), which no variable names: without this module every leaf
  reads ``leaf#12 (4, 4) float32``. The same Parameter object serves every iteration;
- ``RegisterPostBackwardFunctionBackward`` (a custom Function whose node is its ctx, so
  ``node.param_group`` is the ``FSDPParamGroup``) ends each module's backward: it runs
  ``post_backward``, the reduce-scatter that turns the unsharded gradients into sharded
  ``.grad`` DTensors. The first module's group has no such node (its inputs need no gradient):
  the root's final callback reduces it after the last node;
- the pre-backward all-gather is a tensor hook on each module's outputs, not a node;
- ``p.register_hook`` on the DTensor parameter never fires; its
  ``register_post_accumulate_grad_hook`` does (FSDP calls it after the reduce-scatter).
Tensor parallelism (``parallelize_module``, Colwise/Rowwise): the leaves are the DTensor
parameters themselves, the gradients flowing through nodes are DTensors, and
``RedistributeBackward`` (``Redistribute``'s node, ctx ``current_spec``) is where a gradient may
be all-reduced or gathered. Before this module, a DTensor summary ran DTensor ops: 3 extra gloo
collectives per pass in the two-rank test, symmetric there, a hang wherever one rank records and
the other does not.

So an FSDP leaf's ``.grad`` before and after is the sharded parameter's, read at pass start and
at pass end (after the reduce-scatters), where its ``register_post_accumulate_grad_hook`` would
see it. Every DTensor is summarised as its local shard (``to_local()``: no communication) and
labelled so. A global statistic would need a collective, and a collective inside a hook on one
rank, with the other rank elsewhere, hangs the job: backstep never computes one.

Private FSDP names read here are listed in ``torch_api.OPTIONAL``; each read is guarded, and a
torch without one only loses the labels, never the pass.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import torch

FSDP_POST_BACKWARD = "RegisterPostBackwardFunctionBackward"
DTENSOR_REDISTRIBUTE = "RedistributeBackward"  # Redistribute's node: its ctx keeps current_spec
_COMM_NODES = frozenset({FSDP_POST_BACKWARD, DTENSOR_REDISTRIBUTE})
_FSDP_MODULE = "torch.distributed.fsdp._fully_shard._fully_shard"
_DTENSOR_MODULE = "torch.distributed.tensor"
_MAX_MODULES = 100_000  # a frame's model walked for FSDP roots: never without end


def dtensor_class() -> type | None:
    """``DTensor`` once anything imported it (a script that never did has none to show)."""
    module = sys.modules.get(_DTENSOR_MODULE)
    return getattr(module, "DTensor", None) if module is not None else None


def placement_text(placement: Any) -> str:
    """``Shard(0)``, ``Replicate()``, ``Partial(sum)`` (torch writes ``Shard(dim=0)``, ``R``)."""
    kind = type(placement).__name__
    dim = getattr(placement, "dim", None)
    if "Shard" in kind and isinstance(dim, int):
        return f"Shard({dim})"
    if kind == "Replicate":
        return "Replicate()"
    op = getattr(placement, "reduce_op", None)
    if "Partial" in kind and isinstance(op, str):
        return f"Partial({op})"
    return str(placement)


def local_shard(t: Any) -> tuple[torch.Tensor, dict[str, Any]] | None:
    """``(local tensor, shard fields)`` of a DTensor, else None. ``to_local()`` reads this
    rank's piece as it is: no redistribution, no collective."""
    cls = dtensor_class()
    if cls is None or not isinstance(t, cls):
        return None
    try:
        with torch.no_grad():
            local = t.to_local()
        fields = {"placements": [placement_text(p) for p in t.placements],
                  "global_shape": list(t.shape)}
    except Exception:  # noqa: BLE001 - a DTensor we cannot read is summarised as it is
        return None
    return local, fields


class FsdpLeaf:
    """An ``AccumulateGrad`` node's unsharded parameter seen as the sharded one it stands for."""

    __slots__ = ("param", "fqn")

    def __init__(self, param: Any, fqn: str | None) -> None:
        self.param = param  # the sharded DTensor parameter, as the model holds it
        self.fqn = fqn  # its name under the FSDP root (``layers.0.weight``), when FSDP knows it


def fsdp_leaves(variables: dict[int, Any], nodes: list[Any], names: list[str],
                frame: Any) -> dict[int, FsdpLeaf]:
    """For the leaves ``variables`` (index -> AccumulateGrad's tensor), those that are FSDP's
    unsharded parameters: index -> ``FsdpLeaf``. FSDP's parameters are found through the
    graph's post-backward nodes (a node's group knows its modules, and an FSDP module its whole
    tree), else through the FSDP modules in the calling frames. Never raises."""
    if _FSDP_MODULE not in sys.modules or not variables:
        return {}
    try:
        modules = [m for node, name in zip(nodes, names, strict=True)
                   if name == FSDP_POST_BACKWARD
                   for m in getattr(getattr(node, "param_group", None), "modules", ())]
        out = _match(variables, _states(modules))
        if len(out) < len(variables):
            out.update(_match(variables, _states_in_frames(frame)))
        return out
    except Exception:  # noqa: BLE001 - naming is informative only
        return {}


def _match(variables: dict[int, Any], states: list[Any]) -> dict[int, FsdpLeaf]:
    by_unsharded: dict[int, Any] = {}
    for state in states:
        for group in getattr(state, "_fsdp_param_groups", None) or ():
            for fsdp_param in getattr(group, "fsdp_params", ()):
                unsharded = getattr(fsdp_param, "__dict__", {}).get("_unsharded_param")
                if unsharded is not None:
                    by_unsharded[id(unsharded)] = fsdp_param
    out = {}
    for i, variable in variables.items():
        fsdp_param = by_unsharded.get(id(variable))
        if fsdp_param is not None and fsdp_param._unsharded_param is variable:
            fqn = getattr(fsdp_param, "_param_fqn", None)
            out[i] = FsdpLeaf(fsdp_param.sharded_param, fqn if isinstance(fqn, str) else None)
    return out


def _states_in_frames(frame: Any) -> list[Any]:
    """Every FSDP state of the FSDP trees that the frames' modules hold."""
    from backstep.engine import naming

    fsdp = sys.modules.get(_FSDP_MODULE)
    cls = getattr(fsdp, "FSDPModule", None)
    if cls is None:
        return []
    modules = [v for v in naming.held_values(frame) if isinstance(v, torch.nn.Module)]
    found: list[Any] = []
    seen: set[int] = set()
    budget = _MAX_MODULES
    for top in modules:
        for module in top.modules():
            budget -= 1
            if budget < 0:
                return _states(found)
            if id(module) not in seen:
                seen.add(id(module))
                if isinstance(module, cls):
                    found.append(module)
    return _states(found)


def _states(modules: Iterable[Any]) -> list[Any]:
    """The FSDP states of the trees these FSDP modules belong to, each once."""
    states: dict[int, Any] = {}
    for module in modules:
        state = module._get_fsdp_state()
        if id(state) in states:
            continue
        context = getattr(state, "_state_ctx", None)
        for each in getattr(context, "all_states", None) or [state]:
            states[id(each)] = each
    return list(states.values())


def comm_points(nodes: list[Any], names: list[str]) -> dict[int, str]:
    """Index -> ``comm_label`` for the nodes where FSDP or DTensor communicate ({} when
    neither was imported)."""
    if _FSDP_MODULE not in sys.modules and _DTENSOR_MODULE not in sys.modules:
        return {}
    out = {}
    for i, name in enumerate(names):
        if name in _COMM_NODES:
            label = comm_label(nodes[i], name)
            if label is not None:
                out[i] = label
    return out


def comm_label(node: Any, name: str) -> str | None:
    """What FSDP or DTensor communicates at this node, in words, else None."""
    try:
        if name == FSDP_POST_BACKWARD:
            group = getattr(node, "param_group", None)
            if group is None:
                return None
            module = getattr(group, "_module_fqn", None)
            where = f" of {module}" if isinstance(module, str) and module else ""
            return f"FSDP post-backward{where}: reduce-scatter of its gradients into the shards"
        placements = getattr(getattr(node, "current_spec", None), "placements", None) or ()
        to = ", ".join(placement_text(p) for p in placements)
        return (f"DTensor redistribute of the gradient{' to ' + to if to else ''}"
                " (a collective where the placement changes)")
    except Exception:  # noqa: BLE001 - a label is informative only
        return None


def as_local(grads: tuple) -> tuple:
    """``grads`` with each DTensor replaced by its local shard (the same tuple when no DTensor
    is there): what a gradient check may reduce without a collective."""
    cls = dtensor_class()
    if cls is None or not any(isinstance(g, cls) for g in grads):
        return grads
    return tuple(g if not isinstance(g, cls) else (local_shard(g) or (None,))[0] for g in grads)
