"""The status line: where the pass is, why it stopped, and the keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.widgets import Static

from backstep.events.breakpoints import STOP_REASONS
from backstep.tui.state.snapshot import Snapshot
from backstep.tui.text.edited import EDITED_STYLE, EDITED_WORDS
from backstep.tui.text.format import cut_middle

REASONS = {**STOP_REASONS, "review": "review (recorded)"}
# in the order they give way when the line is short; "? help" (which lists them all) stays
HINTS = (("n", "step"), ("c", "continue"), ("f", "finish"), ("b", "break"), ("B", "conditions"),
         ("m", "modules"), ("/", "search"), ("F", "flow"), ("z", "maximise"), ("?", "help"),
         ("q", "quit"))
HELP = ("?", "help")
BARE_KEYS = 3  # keys shown without their words where the words do not fit (`` n c f``)
EAGER = "compile disabled by --eager"  # the session's ``eager`` field (engine.compiled.eager)
# once the script has ended (or its debuggee is gone) nothing resumes: what still works
ENDED_HINTS = (("q", "quit"), ("p", "review"), ("m", "modules"), ("/", "search"),
               ("F", "flow"), ("z", "maximise"), ("?", "help"))


def status_text(snapshot: Snapshot, *, waiting: bool, gone: str | None,
                breakpoints: int, review: bool | str = False, width: int = 0,
                ended: bool = False) -> Text:
    """The line (``ended``: the script has ended, though a review shows an earlier step: the
    keys are only those that still work); with ``width``, cut to fit: the node's name and "? help" always, the thread
    when there is room, then as many keys as fit, in ``HINTS`` order. When even the required
    parts are too long (a long node name, detail or error), they are squeezed in ``SQUEEZE``
    order: "stopped:" goes, then what a nested pass is, the detail and error are cut at the
    right, then the node's name
    in the middle (its ``#id`` stays), so the line never runs past ``width``."""
    # (part, optional): 0 required; 1 while it fits, before the keys; 2 only if room is left
    # once the keys are in
    parts: list[tuple[Text, int]] = []
    squeeze: dict[str, int] = {}  # what may be squeezed: its index in ``parts``

    def add(text: str, style: str = "", optional: int = 0, role: str = "") -> None:
        if role:
            squeeze[role] = len(parts)
        parts.append((Text(text, style=style), optional))

    if review:  # p looked back: n walks forward again to the live stop
        add(" review ", "bold reverse magenta")
        if isinstance(review, str):  # e.g. older passes were dropped at the review cap
            add(f" {review} ", "magenta", optional=1)
    view = snapshot.pass_
    if view is not None:
        add(f" pass {view.number} ", "bold reverse")
        if view.edits:  # the person replaced a gradient: not the program's own from here on
            add(EDITED_WORDS, EDITED_STYLE)
        if view.parent is not None:  # what this pass is (a reentrant checkpoint's recompute)
            add(f" (pass {view.parent}'s recompute)" if view.recompute
                else f" (nested in pass {view.parent})", "yellow", role="nested")
        add(f" {view.api}", "bold", optional=1, role="api")  # the first to go on a short line
        if view.retain_graph:
            add(" retain_graph", "yellow")
        if view.create_graph:
            add(" create_graph", "yellow")
        total = len(view.graph.nodes)
        stop = snapshot.stop
        step = stop.step if stop is not None and stop.pass_ == view.number else view.done
        add(f"  step {step} of {total}")
    if gone is not None:
        add(f"  {gone}", "bold red", role="error")
    elif snapshot.exit is not None:
        code = snapshot.exit.code
        add(f"  script exited with code {code}", "bold green" if code == 0 else "bold red")
        if snapshot.exit.passes is not None:  # the passes shown may be only the watched ones
            ran = snapshot.exit.passes
            add(f" · {ran:,} pass{'es' if ran != 1 else ''} ran", "bold")
    elif snapshot.stop is not None and not waiting:
        stop = snapshot.stop
        add("  stopped: ", "dim", role="stopped")
        add(REASONS.get(stop.reason, stop.reason), "bold yellow")
        # the node's name before the detail: on a narrow terminal the line is cut at the right
        add(f" {'after' if stop.after else 'before'} ")
        add(stop.name, role="name")
        add(f" #{stop.id}")
        if snapshot.session is not None and snapshot.session.process_group:
            # before the detail: the other ranks wait on this stop
            add(group_note(snapshot.session.process_group,
                           snapshot.session.collective_timeout), "yellow")
        if stop.detail:
            add(f" ({stop.detail})", "yellow", role="detail")
        if stop.thread is not None:  # it matters off the main thread or with several passes;
            # else it comes after the keys
            several = bool(snapshot.waiting) or len(snapshot.live) > 1 or \
                stop.thread != "MainThread"
            add(f" on {stop.thread}" + (f" ({stop.device})" if stop.device else ""), "dim",
                optional=1 if several else 2)
        count = len(snapshot.waiting)
        if count:
            add(f"  {count} pass{'es' if count != 1 else ''} waiting", "bold magenta")
            where = ", ".join(f"#{w.pass_}" + (f" on {w.thread}" if w.thread else "")
                              for w in snapshot.waiting[:2])
            add(f" ({where}{', …' if count > 2 else ''})", "magenta", optional=1)
    elif view is not None and view.ended:
        add(f"  pass {view.status}", "green" if view.status == "ok" else "bold red")
        if view.error:
            add(f": {view.error}", "red", role="error")
    elif snapshot.session is None:
        add(" starting the script…", "dim")
    else:
        add("  running… (ctrl+c stops at the next node)", "dim")
    if breakpoints:
        add(f"  ●{breakpoints}", "red")
    if snapshot.session is not None and snapshot.session.eager:
        add(f"  {EAGER}", "cyan")
    ended = ended or gone is not None or snapshot.exit is not None
    hints = ENDED_HINTS if ended else HINTS
    count = len(snapshot.diagnoses)
    if count:  # the banner may be dismissed: say how to bring it back (first: it matters most)
        what = f"{count} diagnos{'is' if count == 1 else 'es'}"
        hints = (("d", what), *hints)

    # what is left once the required parts, the gap and "? help" are in
    room = (width - sum(p.cell_len for p, optional in parts if not optional) - 3
            - hint_text(*HELP).cell_len) if width else 10**9
    if room < 0:
        room = _squeeze(parts, squeeze, -room)
    keep: set[int] = set()
    # the first keys, bare (" n c f"), come before "backward" and "stopped:"
    reserve = 2 * min(BARE_KEYS, len(hints) - 1) if width else 0
    if 0 <= room < reserve and "stopped" in squeeze:
        i = squeeze["stopped"]
        part, optional = parts[i]
        room += part.cell_len - 2
        parts[i] = (Text("  ", style=part.style), optional)
    for i, (part, optional) in enumerate(parts):  # the first optional parts while they fit
        if optional == 1 and part.cell_len <= room - (reserve if i == squeeze.get("api") else 0):
            keep.add(i)
            room -= part.cell_len
    keys, room = fit_keys(hints, room)
    for i, (part, optional) in enumerate(parts):  # then the others, if room is left
        if optional == 2 and part.cell_len <= room:
            keep.add(i)
            room -= part.cell_len
    text = Text()
    for i, (part, optional) in enumerate(parts):
        if not optional or i in keep:
            text.append_text(part)
    if width and text.cell_len + 3 + keys.cell_len > width:  # still too long: crop, keep the keys
        text.truncate(max(width - 3 - keys.cell_len, 0), overflow="ellipsis")
    text.append("   ")
    text.append_text(keys)
    return text


SQUEEZE = (("stopped", 0), ("nested", 0), ("detail", 0), ("error", 16),  # (role, fewest cells)
           ("name", 8))


def _squeeze(parts: list[tuple[Text, int]], roles: dict[str, int], over: int) -> int:
    """Shorten the squeezable parts by ``over`` cells in all (``SQUEEZE`` order); the room left
    (0, or less when even the shortest forms do not fit: the line is then cropped)."""
    for role, fewest in SQUEEZE:
        if over <= 0:
            break
        if role not in roles:
            continue
        i = roles[role]
        part, optional = parts[i]
        plain = part.plain
        keep = max(fewest, len(plain) - over)
        if keep >= len(plain):
            continue
        if role == "stopped":
            short = "  "
        elif role == "name":
            short = cut_middle(plain, keep)
        elif keep < 6:  # too short to say anything: the detail goes (the node's name stays)
            short = ""
        else:  # a message: its start says what happened
            short = plain[: keep - 1] + "…"
        over -= len(plain) - len(short)
        parts[i] = (Text(short, style=part.style), optional)
    return -over


def group_note(group: str, timeout: float | None) -> str:
    """A stop holds up the other ranks: their collectives give up after the group's timeout."""
    if timeout is None:
        after = "the group's timeout"
    elif timeout >= 120 and timeout % 60 == 0:
        after = f"{timeout / 60:g} min"
    else:
        after = f"{timeout:g} s"
    return f"  under {group}: collectives time out after {after}"


def hint_text(key: str, what: str) -> Text:
    return Text.assemble((f" {key}", "bold cyan"), (f" {what}", "dim"))


def live_passes(snapshot: Snapshot, width: int = 0) -> str:
    """The passes running at once, for the graph panel's lower border ("" for just one);
    without their threads when that does not fit in ``width`` columns."""
    live = snapshot.live
    if len(live) < 2 and not snapshot.waiting:
        return ""
    full = " · ".join(f"#{p.number} {p.state}" + (f" ({p.thread})" if p.thread else "")
                      for p in live)
    if not width or len(full) + 6 <= width:
        return full
    return " · ".join(f"#{p.number} {p.state}" for p in live)


def fit_keys(hints: tuple[tuple[str, str], ...], room: int) -> tuple[Text, int]:
    """The keys in order while they fit in ``room`` cells ("? help" always, its room already
    set aside), then, from the first whose words do not fit, up to ``BARE_KEYS`` bare keys
    (`` n c f``: "? help" names them) while those fit; and the room left (-1 once one did not fit whole)."""
    keys = Text()
    bare = full = False  # bare: a key's words did not fit; full: nor did a bare key (only the
    # first BARE_KEYS go bare: they say what matters most)
    words = [hint_text(*h).cell_len for h in hints if h != HELP]
    # where not all fit with their words, the words leave room for the first keys bare
    spare = 0 if sum(words) <= room else 2 * BARE_KEYS
    for index, (key, what) in enumerate(hints):
        hint = hint_text(key, what)
        if (key, what) == HELP:
            keys.append_text(hint)
            continue
        spare = max(spare - 2, 0)
        if not bare and hint.cell_len + spare <= room:
            keys.append_text(hint)
            room -= hint.cell_len
            continue
        bare = True
        hint = Text(f" {key}", style="bold cyan")
        if full or index >= BARE_KEYS or hint.cell_len > room:
            full = True  # the order stays the order of the hints
            continue
        keys.append_text(hint)
        room -= hint.cell_len
    return keys, -1 if bare else room


def with_keys(head: Text, hints: tuple[tuple[str, str], ...], width: int = 0) -> Text:
    """``head``, then the keys of ``hints`` in order while they fit in ``width`` (all when 0);
    "? help" always, ``head`` cut at the right when even that does not fit."""
    room = width - head.cell_len - 3 - hint_text(*HELP).cell_len if width else 10**9
    keys, _ = fit_keys(hints, room)
    line = head.copy()
    if width and line.cell_len + 3 + keys.cell_len > width:
        line.truncate(max(width - 3 - keys.cell_len, 0), overflow="ellipsis")
    line.append("   ")
    line.append_text(keys)
    return line


class StatusLine(Static):
    """One line at the bottom of the screen, cut to the terminal's width (again on resize)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._shown: tuple[Snapshot, dict[str, Any]] | None = None
        self._line: Callable[[int], Text] | None = None

    def show(self, snapshot: Snapshot, *, waiting: bool, gone: str | None,
             breakpoints: int, review: bool | str = False, ended: bool = False) -> None:
        self._shown = (snapshot, {"waiting": waiting, "gone": gone, "breakpoints": breakpoints,
                                  "review": review, "ended": ended})
        self._line = None
        self._draw()

    def show_line(self, line: Callable[[int], Text]) -> None:
        """Show what ``line(width)`` makes (a replay's own status), again on every resize."""
        self._line = line
        self._draw()

    def _draw(self) -> None:
        # one line, always: no layout (a layout pass repaints every scrollbar on screen)
        if self._line is not None:
            self.update(self._line(self.size.width), layout=False)
            return
        if self._shown is None:
            return
        snapshot, options = self._shown
        self.update(status_text(snapshot, width=self.size.width, **options), layout=False)

    def on_resize(self) -> None:
        self._draw()
