"""Human units shared by the engine's messages and the UI (stdlib only)."""

from __future__ import annotations


def human_bytes(size: int) -> str:
    """1536 -> ``1.5 KiB``; 512 -> ``512 B``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
