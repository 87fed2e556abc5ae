"""Tensor summaries: shape, dtype, min/max/mean/norm, non-finite count, small values.

``batch.SummaryBatch`` summarises a pass's gradients together (host tensors by dtype in
``host.py``, accelerator ones reduced on the device in ``device.py``, the rest on the careful
path of ``careful.py``); ``single.summarize`` does one tensor alone; ``format.py`` is what they
share. No module here imports this package
back: each imports the module it needs.
"""

from backstep.engine.summary.batch import SummaryBatch
from backstep.engine.summary.single import summarize

__all__ = ["SummaryBatch", "summarize"]
