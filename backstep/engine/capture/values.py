"""Tensor values on demand: the live UI's tensor view reads a held gradient page by page."""

from __future__ import annotations

from typing import Any

from backstep.engine.capture.passes import Pass
from backstep.engine.sharded import local_shard


class TensorValues:
    """Capture's answer to ``tensor`` requests (a mixin of ``Capture``)."""

    _live: dict[int, Pass]

    def _tensor_values(self, request: dict[str, Any]) -> dict[str, Any]:
        p = self._live.get(request["pass"])
        if p is None:
            raise LookupError(f"pass {request['pass']} is not running")
        grads = p.held.get(request["node"])
        if grads is None:
            raise LookupError("that node's gradients are no longer held")
        group = grads[0] if request["slot"] == "grad_outputs" else grads[1]
        index = request["index"]
        if not 0 <= index < len(group) or group[index] is None:
            raise LookupError("no gradient in that slot")
        tensor = group[index]
        shard = local_shard(tensor)
        if shard is not None:  # this rank's piece: the whole would need a collective
            tensor = shard[0]
        tensor = tensor.detach()
        offset = request.get("offset", 0)
        limit = min(request.get("limit", 1000) or 1000, 10_000)
        flat = tensor.reshape(-1)[offset : offset + limit]
        if flat.is_complex():
            values = [[v.real, v.imag] for v in flat.tolist()]
        else:
            values = flat.tolist()
        from backstep.protocol import clean_number

        if tensor.is_floating_point():
            values = [clean_number(v) for v in values]
        return {
            "shape": list(tensor.shape),
            "dtype": str(tensor.dtype).removeprefix("torch."),
            "numel": tensor.numel(),
            "offset": offset,
            "values": values,
            **({"shard": shard[1]} if shard is not None else {}),
        }
