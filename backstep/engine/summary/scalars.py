"""Summaries of one-element host tensors (a loss, scalar parameters and their gradients),
written straight from their one value.

Many tiny passes are mostly such gradients. Their min, max and mean are the value and their
norm its magnitude, as the kernels give them (``host._reduce``); rounded and written here as
``host._write`` writes them, byte for byte, without the lists, zips and second read of the
general path (which measured ~10 us a tensor). Anything unusual (a value that is not finite,
or rounds to one that is not) is left to the general path.
"""

from __future__ import annotations

from typing import Any

import torch

from backstep.engine.rounding import DIGITS, round_for_dtype, round_single
from backstep.engine.summary.format import device_text, dtype_text
from backstep.events.text import Encoded, json_safe

MEAN_FORMAT = {torch.float32: "%.8g", torch.float16: "%.5g", torch.bfloat16: "%.5g",
               torch.float64: "%.10g"}  # as stat_value rounds
_MEAN_DIGITS = {dtype: int(spec[2:-1]) for dtype, spec in MEAN_FORMAT.items()}
_SHAPES: dict[torch.Size, str] = {}  # shape -> the start of a summary's text


def shape_text(size: torch.Size) -> str:
    """``{"shape":[...]``: the start of a summary's text."""
    text = _SHAPES.get(size)
    if text is None:
        if len(_SHAPES) >= 4096:
            _SHAPES.clear()
        text = _SHAPES[size] = '{"shape":[' + ",".join(map(str, size)) + "]"
    return text


def tail(low: float, high: float, mean: float, norm: float) -> str:
    """The rest of a finite summary's text after its dtype and device, as json.dumps writes it
    (an f-string: ``str.format`` of the same text took 0.5 us more a summary); its
    ``"nonfinite":0`` is left out, as trace files leave it (events.form)."""
    return f'"min":{low!r},"max":{high!r},"mean":{mean!r},"norm":{norm!r}'


def write_scalars(dtype: torch.dtype, tensors: list[torch.Tensor], numels: list[int],
                  slots: list[int], results: Any) -> list[int]:
    """Write the summary of each finite one-element tensor to ``results[slot]``; returns the
    positions (in ``tensors``) of those written.

    One rounding serves min, max and mean (``stat_value`` and ``MEAN_FORMAT`` keep the same digits,
    and a mean of one element is the element) and the norm (the magnitude of the rounded value:
    a decimal rounds the same either side of zero)."""
    digits = DIGITS.get(dtype)
    if not digits or _MEAN_DIGITS.get(dtype) != digits or not tensors:
        return []
    spec = f".{digits}g"
    dtype_name = dtype_text(dtype)
    device_name = device_text(tensors[0].device)
    if not (json_safe(dtype_name) and json_safe(device_name)):
        return []
    head = (f',"dtype":"{dtype_name}",' if device_name == "cpu"
            else f',"dtype":"{dtype_name}","device":"{device_name}",')
    single = dtype == torch.float32 and spec == ".8g"  # ``shown`` is round_single's eight
    done = []
    for k, n in enumerate(numels):
        if n != 1:
            continue
        t = tensors[k]
        v = t.item()
        shown = float(format(v, spec))
        if shown - shown != 0.0:  # not finite (nor, then, is ``v``): the general path's
            continue
        # as ``value_list`` writes a floating value (``round_for_dtype``; ``v`` is finite here)
        value = round_single(v, shown) if single else round_for_dtype(v, dtype)
        size = t.shape
        text = repr(shown)
        out = Encoded({"shape": list(size), "dtype": dtype_name, "device": device_name,
                       "min": shown, "max": shown, "mean": shown, "norm": abs(shown),
                       "nonfinite": 0, "values": [value]})
        out.text = (f'{shape_text(size)}{head}"min":{text},"max":{text},"mean":{text},'
                    f'"norm":{text.removeprefix("-")},"values":[{value!r}]}}')
        results[slots[k]] = out
        done.append(k)
    return done
