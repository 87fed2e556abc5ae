"""Pilot tests: running one without an asyncio plugin, reading the screen through Textual's
public API (``App.export_screenshot``), an app at a stop of the example session."""

from __future__ import annotations

import asyncio
import functools
import html
import re
from collections.abc import Awaitable, Callable
from typing import Any

from rich.cells import cell_len

from backstep.tui.app import BackstepApp
from tests.tui_fixtures import RecordingLink, example_events, live_app

SIZE = (140, 42)
# a run of text in rich's SVG (``App.export_screenshot``): its x, and its row (the clip path
# it is drawn through); a cell is 12.2 px wide
_TEXT = re.compile(r'<text [^>]*?x="([\d.]+)"[^>]*?clip-path="url\(#[\w-]+-line-(\d+)\)"[^>]*>'
                   r'(.*?)</text>', re.S)
CELL_W = 20 * 0.61


def pilot(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async pilot test without an asyncio pytest plugin."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def screen_text(app: Any) -> str:
    """The whole screen as plain text, a line per row, read from Textual's own screenshot."""
    width, height = app.size
    rows: list[list[tuple[int, str]]] = [[] for _ in range(height)]
    for x, line, text in _TEXT.findall(app.export_screenshot()):
        row = int(line)
        if 0 <= row < height and text != "\n":  # the row's end
            rows[row].append((round(float(x) / CELL_W), html.unescape(text).replace("\xa0", " ")))
    lines = []
    for chunks in rows:
        line, cells = "", 0
        for col, text in sorted(chunks):
            line += " " * (col - cells) + text
            cells = col + cell_len(text)
        lines.append(line + " " * (width - cells))
    return "\n".join(lines)


async def settle(pilot: Any, tries: int = 25) -> None:
    """Pause until the screen stops changing. A panel whose height follows its content (saved
    tensors, the console) is drawn for the width it had, then again once its new width is
    known: a couple of refreshes, more on a loaded machine, that one ``pause()`` may not see."""
    await pilot.pause()
    last = screen_text(pilot.app)
    for _ in range(tries):
        await pilot.pause(0.02)
        now = screen_text(pilot.app)
        if now == last:
            return
        last = now


def line_with(text: str, *words: str) -> str:
    for line in text.splitlines():
        if all(w in line for w in words):
            return line
    raise AssertionError(f"no line with {words!r} in:\n{text}")


def make_app(stop: int = 1, events: list[dict[str, Any]] | None = None,
             **kwargs: Any) -> tuple[BackstepApp, RecordingLink]:
    link = RecordingLink(example_events() if events is None else events, stop=stop)
    return live_app(link, **kwargs), link


async def type_query(pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("slash")
    for ch in text:
        await pilot.press(ch)
    await pilot.press("enter")
    await pilot.pause()
