"""``attach()`` in a Jupyter kernel (or with ``serve=``): the UI served to a browser.

The UI cannot run in the kernel (Textual does not run there, and the kernel's main thread is
the one that blocks in ``backward()`` while you step), so this is the remote attachment
(``attach_remote``) on 127.0.0.1 with any free port, plus a browser server (``served``) that
runs ``backstep connect`` to it for each browser connection. The connect token goes to that
server in its environment; the browser's URL carries a token of its own. The cell shows the
page in a frame and a link (``notebook_cell.show``), then ``attach`` waits for the page to connect:
the next ``backward()`` stops for it. ``q`` (or closing the page) detaches for good, as ``q``
does in a terminal: the cell runs on, the server ends, a later ``attach()`` starts afresh.
``detach()`` (the end of ``with attached()``) and the kernel's end do the same.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from backstep.process.attach import registry
from backstep.process.attach.remote import RemoteAttachment
from backstep.process.remote import ENV_TOKEN, RemoteServer
from backstep.process.served import ServedUI, serve_address, ui_command

CAPTION = "backstep.attach()"  # what the cell's caption says is in the frame
WATCH_INTERVAL = 0.1  # seconds between looks at whether the page's UI is still attached


def connect_command(address: str, breakpoints: list[dict[str, Any]],
                    stop_at_pass_start: bool) -> list[str]:
    """``backstep connect ADDRESS`` with ``attach()``'s options (the token is in the env)."""
    return ui_command(["connect", address, "--breakpoints-json", json.dumps(breakpoints),
                       *([] if stop_at_pass_start else ["--no-stop-at-start"])])


def _quiet(line: str) -> None:
    pass


class ServedAttachment(RemoteAttachment):
    """The engine behind a loopback remote server, its UI served to a browser."""

    def __init__(self, breakpoints: list[dict[str, Any]], stop_at_pass_start: bool,
                 source: bool, serve: str | None) -> None:
        from backstep.process.notebook_cell import COLAB, current_cell, in_colab, in_notebook

        super().__init__("127.0.0.1:0", breakpoints, stop_at_pass_start, source, wait=True)
        try:  # ValueError before anything is armed
            self.serve_address = serve_address(serve)
        except ValueError as exc:
            raise ValueError(f"serve={serve!r}: {exc}") from None
        if serve is None and in_colab():
            raise ValueError(COLAB)
        self.notebook = in_notebook()
        self.cell = current_cell() if self.notebook else None  # the cell that shows the frame
        self.served: ServedUI | None = None
        self.caption = CAPTION
        self.interrupt: Any = None  # notebook_interrupt.InterruptAtStop, while armed

    def start(self) -> None:
        if self.notebook:  # before provenance installs: a cell's code goes by In [N]
            from backstep.engine.provenance import frames
            from backstep.process.notebook_cell import cell_name

            frames.file_names = cell_name
        super().start()  # returns once the page has attached
        controller = self.capture.controller if self.capture is not None else None
        if self.notebook and controller is not None:
            from IPython import get_ipython

            from backstep.process.notebook_interrupt import InterruptAtStop

            self.interrupt = InterruptAtStop(get_ipython(), lambda: controller.interrupted,
                                             self.detach_after_interrupt)
            self.interrupt.install()
        threading.Thread(target=self._watch, args=(self.server,), name="backstep-served",
                         daemon=True).start()

    def detach_after_interrupt(self) -> None:
        """The cell interrupted at a stop has ended: detach for good, as ``q`` would."""
        with registry.lock:
            if registry.current is self:
                self.stop()

    def elsewhere(self) -> bool:
        """In a notebook, ``attach()`` run from another cell (or this cell run again, whose
        output Jupyter clears, frame and all) moves the UI to that cell: a stop shown in a
        frame scrolled out of view, or gone, would leave the cell busy for no visible reason."""
        from backstep.process.notebook_cell import current_cell

        return self.notebook and self.cell != current_cell()

    def _watch(self, server: RemoteServer | None) -> None:
        """When the page's UI leaves (``q``, the page closed), detach for good, as ``q`` does
        in a terminal: the hooks go, the server and its page end; ``attach()`` starts anew."""
        while server is not None and self.server is server and server.attached():
            time.sleep(WATCH_INTERVAL)
        with registry.lock:  # not while attach() replaces this attachment
            if server is not None and self.server is server:
                self.stop()

    def _announce(self, server: RemoteServer) -> None:
        # the page's UI attaching and leaving is no news here (refusals still log: their own)
        server.log = _quiet
        self.served = served = ServedUI(
            connect_command(server.address, self.breakpoints, self.stop_at_pass_start),
            self.serve_address, env={ENV_TOKEN: server.token})
        served.start()
        from backstep.process import notebook_cell

        notebook_cell.show(served, self.caption, self.notebook)

    def stop(self) -> None:
        interrupt, self.interrupt = self.interrupt, None
        if interrupt is not None:
            interrupt.uninstall()
        if self.notebook:
            from backstep.engine.provenance import frames

            frames.file_names = None
        super().stop()  # the UI reads the end of the script's stream, then its page ends
        served, self.served = self.served, None
        if served is not None:
            served.end_later()  # the cell goes on meanwhile (a page takes seconds to quit)

    def release(self) -> None:
        """``detach()`` (the end of ``with attached()`` or of a ``%%backstep`` cell): the
        engine disarms at once and the cell goes on, while the page stays on the session's
        last state for the person to review, until it is quit or closed (then its server
        ends). Waiting for that page to quit would hold the cell for seconds."""
        served, self.served = self.served, None
        try:
            self.stop()
        finally:
            if served is not None:
                served.finish_later()

    def _abandon(self) -> None:
        self.served = None  # the parent's server: it ends with the parent
        super()._abandon()
