"""The app's breakpoint keys: ``b`` toggles a breakpoint on the selected node's type, ``B`` opens
the dialog for other conditions (``tui/panels/breakpoint_dialog.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backstep.tui.panels.breakpoint_dialog import BreakpointDialog, describe
from backstep.tui.state.focus import focus

if TYPE_CHECKING:  # the mixin's self is the app, as the AppHost protocol describes it
    from backstep.tui.actions.host import AppHost as _App
else:
    _App = object


class BreakpointActions(_App):
    """The app's breakpoint keys (``b``, ``B``): a mixin of ``BackstepApp``."""

    def action_toggle_break(self) -> None:
        f = focus(self.snapshot, self.selected)
        if f.info is None:
            self.notify("select a node first", timeout=2)
            return
        bp = {"kind": "node", "pattern": f.info.name}
        if bp in self.breakpoints:
            self.breakpoints.remove(bp)
            self.notify(f"breakpoint removed: {describe(bp)}", timeout=2)
        else:
            self.breakpoints.append(bp)
            self.notify(f"breakpoint set: {describe(bp)}", timeout=2)
        self._send_breakpoints()

    def action_break_dialog(self) -> None:
        def done(result: list[dict[str, Any]] | None) -> None:
            if result is not None and result != self.breakpoints:
                self.breakpoints = result
                self._send_breakpoints()

        self.push_screen(BreakpointDialog(self.breakpoints), done)

    def _send_breakpoints(self) -> None:
        self.send({"cmd": "break", "breakpoints": list(self.breakpoints)})
        self._refresh_status()
