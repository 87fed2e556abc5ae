"""One tensor summarised on demand (a stop, the tensor view, a gradient edit), with a
histogram of its values when a person is looking at it."""

from __future__ import annotations

from typing import Any

import torch

from backstep.engine import transfers
from backstep.engine.sharded import local_shard
from backstep.engine.summary.batch import SummaryBatch
from backstep.engine.summary.format import SMALL

HIST_BINS = 24


def summarize(t: Any, hist: bool = False) -> dict[str, Any] | None:
    """The summary of one tensor (None for None). Never raises.

    ``hist`` adds ``"hist"``: counts of the finite values in equal bins between min and max — one
    more pass over the tensor, so only for summaries a person is looking at (a stop), never per
    node in a trace.
    """
    batch = SummaryBatch()
    slot = batch.add(t)
    if slot is None:
        return None
    out = batch.compute()[slot]
    shard = local_shard(t)
    if shard is not None:
        t = shard[0]  # the histogram of this rank's piece, as the summary is
    if hist and out is not None:
        counts = _histogram(t, out)
        if counts is not None:
            out = dict(out)  # a plain dict: its encoded text would miss the histogram
            out["hist"] = counts
    return out


def _histogram(t: torch.Tensor, summary: dict[str, Any]) -> list[int] | None:
    if t.numel() <= SMALL:
        return None
    try:
        with torch.no_grad():
            data = t.detach()
            if data.is_complex():
                data = data.abs()
            if data.layout != torch.strided or not data.is_floating_point():
                return None
            data = data.float()
            lo, hi = summary.get("min"), summary.get("max")
            if summary.get("nonfinite"):
                data = data[torch.isfinite(data)]  # NaN/Inf are counted in "nonfinite"
                if data.numel() == 0:
                    return None
                lo, hi = float(transfers.read(data.min())), float(transfers.read(data.max()))
            if not isinstance(lo, float) or not isinstance(hi, float):
                return None
            if hi <= lo:
                return [int(data.numel())]
            return [int(c) for c in transfers.read(torch.histc(data, bins=HIST_BINS, min=lo, max=hi))]
    except (RuntimeError, TypeError, NotImplementedError):
        return None
