"""The source panel: the forward line that created the node, with context, highlighted."""

from __future__ import annotations

import linecache
import os

from rich.syntax import Syntax
from rich.text import Text
from textual.widgets import Static

from backstep import safe_text
from backstep.tui.state.focus import Focus
from backstep.tui.state.records import Summary
from backstep.tui.widgets.titles import set_title

CONTEXT = 4
NOTHING = ("", 0, None)  # shown: no source recorded
BUILT_BEFORE = ("", -1, None)  # shown: no source, for the graph was built before attaching
BEFORE = (": this graph was built before backstep attached, and sources are recorded as the "
          "forward runs. Attach before the forward (in a notebook, %%backstep on the cell "
          "that runs it)")


def source_lines(file: str) -> list[str]:
    """The lines of ``file`` (cached), or none: a trace names any path, and only a regular file
    is read (``/dev/zero`` would fill the memory, a FIFO would block the UI)."""
    return linecache.getlines(file) if os.path.isfile(file) else []


class SourcePanel(Static):
    """Reads the file named by the node's ``source`` and shows the line in pygments colours."""

    def __init__(self, source_enabled: bool = True, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.border_title = "Source"
        self.source_enabled = source_enabled
        self._shown: tuple[str, int, str | None] | None = None  # the panel has a fixed height:
        # its updates ask for no layout (a layout pass repaints every scrollbar on screen)

    def show(self, focus: Focus) -> None:
        """The forward line of the focused node; for a compiled region, the code Dynamo
        compiled (each op's own line shows when the cursor is on the op)."""
        view = focus.snapshot.pass_
        compiled = view.log.regions.get(focus.node) if view is not None else None
        if compiled is not None and compiled.function is not None:
            self.show_source(compiled.function, "compiled function")
            return
        self.show_source(focus.info.source if focus.info is not None else None,
                         before=view is not None and view.before_provenance)

    def show_source(self, source: Summary | None, note: str | None = None,
                    before: bool = False) -> None:
        """Any ``{file, line, code}`` (a diagnosis's line); ``note`` says why in the title;
        ``before``: the pass's graph was built before backstep attached (why there is none)."""
        file = source.get("file") if source else None
        line = source.get("line") if source else None
        if not isinstance(file, str) or not isinstance(line, int):
            shown = BUILT_BEFORE if before and self.source_enabled else NOTHING
            if self._shown == shown:
                return
            self._shown = shown
            set_title(self, "Source")
            why = "" if self.source_enabled else " (--no-source)"
            why = BEFORE if shown is BUILT_BEFORE else why
            self.update(Text(f"no source recorded{why}", style="dim italic"), layout=False)
            return
        if self._shown == (file, line, note):
            return
        self._shown = (file, line, note)
        where = f"{os.path.basename(file)}:{line}"
        set_title(self, f"Source · {where}" + (f" · {note}" if note else ""))
        lines = source_lines(file)
        if not lines or line > len(lines):
            code = source.get("code") if source else None
            self.update(Syntax(code or "", "python", line_numbers=True, start_line=line,
                               highlight_lines={line}, theme="ansi_dark",
                               background_color="default", word_wrap=False)
                        if code else Text(f"{file}:{line} (file not readable)", style="dim"),
                        layout=False)
            return
        start = max(1, line - CONTEXT)
        end = min(len(lines), line + CONTEXT)
        code = safe_text.lines("".join(lines[start - 1 : end]))
        self.update(Syntax(code, "python", line_numbers=True, start_line=start,
                           highlight_lines={line}, theme="ansi_dark",
                           background_color="default", word_wrap=False), layout=False)
