"""Rich text for tensor summaries, sizes and bars, shared by the panels (no textual, no torch)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.text import Text

from backstep.tui.state.records import NodeState, Summary, is_nonfinite, number
from backstep.units import human_bytes

SPARKS = "▁▂▃▄▅▆▇█"
GLYPHS: dict[NodeState, tuple[str, str]] = {
    "done": ("✓", "green"),
    "current": ("➜", "bold yellow"),
    "pending": ("·", "dim"),
    "skipped": ("⊘", "dim"),
    "error": ("✗", "bold red"),
}


def num(value: Any) -> Text:
    """One number, compact; NaN/Inf in red."""
    if is_nonfinite(value):
        return Text(str(value), style="bold red")
    x = number(value)
    if x is None:
        return Text("—", style="dim")
    if x == int(x) and abs(x) < 1e6:
        return Text(f"{int(x)}" if abs(x) >= 1 or x == 0 else f"{x:.4g}")
    return Text(f"{x:.4g}")


def _short_exponent(text: str) -> str:
    """``1.1e-05`` as ``1.1e-5``: two cells a number in a narrow column."""
    mantissa, e, exponent = text.partition("e")
    if not e:
        return text
    sign = "-" if exponent.startswith("-") else ""
    return f"{mantissa}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"


def fit_number(x: float, width: int, sign: bool = False) -> str:
    """``x`` with as many significant digits (4 at most) as fit in ``width`` cells, in the
    shorter of the plain and the exponent form (``0.0106``, ``1.06e-5``): a narrow column
    loses digits, never the number's size. The shortest form when nothing fits."""
    plus = "+" if sign else ""
    if not math.isfinite(x):  # a difference of two huge finite numbers can overflow
        return f"{x:{plus}}"
    if x == int(x) and abs(x) < 1e4:
        return f"{int(x):{plus}d}"
    best = ""
    for digits in (4, 3, 2, 1):
        forms = (_short_exponent(f"{x:{plus}.{digits}g}"),
                 _short_exponent(f"{x:{plus}.{digits - 1}e}"))
        best = min(forms, key=len)
        if len(best) <= width:
            return best
    return best


def fit_num(value: Any, width: int, sign: bool = False) -> Text:
    """``num(value)`` in ``width`` cells: fewer digits rather than a number cut with "…"."""
    x = number(value)
    if x is None or is_nonfinite(value):
        return num(value)
    text = num(value)
    if text.cell_len <= width and not sign:
        return text
    return Text(fit_number(x, width, sign))


def cut_left(name: str, width: int) -> str:
    """``name`` in at most ``width`` cells, cut from the left: the tail of a dotted path is the
    informative part (``…h.0.ln_2.weight``)."""
    if len(name) <= width:
        return name
    return "…" + name[len(name) - width + 1 :] if width > 1 else "…"[:width]


def cut_apart(names: Sequence[str], width: int) -> list[str]:
    """``names`` in at most ``width`` cells each, cut in the middle at one place for all, that
    place chosen to keep names apart (``mat1…sizes``, ``mat2…strides``, not ``ma…sizes`` four
    times): the split that leaves the most distinct names, nearest ``cut_middle``'s."""
    if width < 3 or all(len(name) <= width for name in names):
        return [cut_middle(name, width) for name in names]
    default = (width - 1) // 3

    def cut(name: str, head: int) -> str:
        return name if len(name) <= width else \
            name[:head] + "…" + name[len(name) - (width - 1 - head):]

    best = max(range(1, width - 1),
               key=lambda head: (len({cut(n, head) for n in names}), -abs(head - default)))
    return [cut(name, best) for name in names]


def apart_width(names: Sequence[str]) -> int:
    """The fewest cells in which ``cut_apart`` keeps every one of ``names`` apart."""
    longest = max(map(len, names), default=0)
    distinct = len(set(names))
    return next((w for w in range(3, longest)
                 if len(set(cut_apart(names, w))) == distinct), longest)


def cut_middle(name: str, width: int) -> str:
    """``name`` in at most ``width`` cells, cut in the middle (keeps both ends readable)."""
    if len(name) <= width:
        return name
    if width < 3:
        return "…"[:width]
    head = (width - 1) // 3
    return name[:head] + "…" + name[len(name) - (width - 1 - head) :]


def scalar_text(value: Any, width: int = 24) -> str:
    """A saved scalar's value as the recorder wrote it (a number, bool, None, size list or
    repr), in at most ``width`` cells: ``-100``, ``True``, ``None``, ``[4096, 50257]``."""
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, list):
        text = "[" + ", ".join(scalar_text(v, width) for v in value) + "]"
    else:
        text = str(value)
    return cut_middle(text, width)


def shape_text(shape: Any) -> str:
    if not isinstance(shape, (list, tuple)):
        return "?"
    return "[" + ", ".join(str(s) for s in shape) + "]"


nbytes = human_bytes  # the one bytes format, shared with the engine


def sparkline(values: Sequence[float], width: int = 16) -> Text:
    """A histogram of finite values as one line of block characters."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return Text("")
    lo, hi = min(finite), max(finite)
    bins = [0] * width
    for v in finite:
        i = 0 if hi == lo else min(width - 1, int((v - lo) / (hi - lo) * width))
        bins[i] += 1
    top = max(bins)
    chars = "".join(SPARKS[min(7, (b * 8 - 1) // top)] if b else " " for b in bins)
    return Text(chars, style="cyan")


def histogram(summary: Summary) -> Text:
    """The sparkline for a summary: its ``hist`` counts if the engine sent them, else its values."""
    hist = summary.get("hist")
    if isinstance(hist, list) and hist and all(isinstance(h, int) for h in hist):
        top = max(hist) or 1
        return Text("".join(SPARKS[min(7, (h * 8 - 1) // top)] if h else " " for h in hist),
                    style="cyan")
    values = summary.get("values")
    if isinstance(values, list) and len(values) > 1:
        floats = [number(v) for v in values]
        return sparkline([v for v in floats if v is not None])
    return Text("")


# the fields of a summary, in the order they give way when the room is short: the device
# first, the dtype last (under bf16 autocast it is what tells two gradients apart); the shape,
# the norm and the NaN/Inf count always stay (the tensor view has all of it)
DROPPED = ("device", "mean", "max", "min", "dtype")
STATS = ("min", "max", "mean", "norm")


def summary_line(summary: Summary | None, width: int = 0) -> Text:
    """``[2, 3] float32 cpu  min .. max .. mean .. norm ..  2 NaN/Inf``; with ``width``, the
    most that fits on one line (``summary_lines``)."""
    return summary_lines(summary, width, 1)[0]


def summary_lines(summary: Summary | None, width: int = 0, most: int = 2) -> list[Text]:
    """A summary in at most ``most`` lines of ``width`` cells: the fields wrap onto the next
    line before any is dropped, then they give way in ``DROPPED``'s order."""
    if summary is None:
        return [Text("None (no gradient)", style="dim italic")]
    shown = ["dtype", "device", *STATS]
    while True:
        lines = _wrap(_summary_parts(summary, shown), width)
        if width <= 0 or len(lines) <= most:
            return lines
        gone = next((f for f in DROPPED if f in shown), None)
        if gone is None:  # the least there is, over the room: the caller wraps or cuts it
            return lines[: most - 1] + [Text("  ").join(lines[most - 1 :])]
        shown.remove(gone)


def _summary_parts(summary: Summary, fields: Sequence[str]) -> list[Text]:
    """The summary's pieces, each kept whole on a line: the shape with its dtype and device,
    then one ``key value`` a statistic (or the one value), then the NaN/Inf count."""
    head = Text()  # spans, not a base style: a Text's own style colours what is appended too
    shard = shard_text(summary)
    if shard is not None:  # a DTensor's summary: of this rank's piece only
        head.append(f"{shard[0]} local ", style="magenta")
    head.append(shape_text(summary.get("shape")), style="bold")
    if shard is not None:
        head.append(f" of {shard[1]}", style="magenta")
    kind = " ".join(str(summary.get(key, "?")) for key in ("dtype", "device") if key in fields)
    if kind:
        head.append(f" {kind}", style="dim")
    parts = [head]
    values = summary.get("values")
    if isinstance(values, list) and len(values) == 1:
        parts.append(Text().append("value ", style="dim").append_text(num(values[0])))
    else:
        parts += [Text().append(f"{key} ", style="dim").append_text(num(summary.get(key)))
                  for key in STATS if key in fields]
    bad = summary.get("nonfinite")
    if isinstance(bad, int) and bad:
        parts.append(Text().append(f"{bad} NaN/Inf", style="bold white on red"))
    return parts


def shard_text(summary: Summary) -> tuple[str, str] | None:
    """``("Shard(0)", "[4, 4]")`` for the summary of a DTensor's local shard, else None."""
    shard = summary.get("shard")
    if not isinstance(shard, dict):
        return None
    placements = shard.get("placements")
    if not isinstance(placements, list):
        placements = []
    return (", ".join(p for p in placements if isinstance(p, str)) or "shard",
            shape_text(shard.get("global_shape")))


def _wrap(parts: list[Text], width: int) -> list[Text]:
    """``parts`` two spaces apart, a new line where the next would pass ``width`` (0: one)."""
    lines = [parts[0].copy()]
    for part in parts[1:]:
        if width > 0 and lines[-1].cell_len + 2 + part.cell_len > width:
            lines.append(part.copy())
        else:
            lines[-1].append("  ", style="dim").append_text(part)
    return lines


def values_text(summary: Summary | None, limit: int = 16) -> Text | None:
    """The values of a small tensor, if the summary carries them."""
    if summary is None:
        return None
    values = summary.get("values")
    if not isinstance(values, list):
        return None
    text = Text("= ", style="dim")
    for i, v in enumerate(values[:limit]):
        if i:
            text.append(", ")
        text.append_text(num(v))
    if len(values) > limit:
        text.append(", …", style="dim")
    return text
