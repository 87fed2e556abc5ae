"""A real Jupyter kernel (jupyter_client + ipykernel) for the notebook tests: run cells, read
their outputs as a notebook front end receives them, while the test does other things."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any


class Cell:
    """One executing cell: its outputs arrive on a thread until the kernel is idle again."""

    def __init__(self, client: Any, code: str) -> None:
        self.outputs: list[dict[str, Any]] = []
        self.reply: dict[str, Any] | None = None
        self.done = threading.Event()
        self._new = queue.Queue[dict[str, Any]]()
        self.msg_id = client.execute(code, allow_stdin=False)
        self._client = client
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        client = self._client
        while True:
            try:
                msg = client.get_iopub_msg(timeout=1)
            except queue.Empty:
                continue
            if msg.get("parent_header", {}).get("msg_id") != self.msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content.get("execution_state") == "idle":
                break
            if kind in ("stream", "display_data", "execute_result", "error"):
                output = {"output_type": kind, **content}
                self.outputs.append(output)
                self._new.put(output)
        while True:  # the reply to this cell (a reply to an earlier request is not)
            reply = client.get_shell_msg(timeout=30)
            if reply.get("parent_header", {}).get("msg_id") == self.msg_id:
                break
        self.reply = reply["content"]
        self.done.set()

    def wait(self, timeout: float) -> dict[str, Any]:
        """The execute reply once the cell has finished; AssertionError if it does not."""
        assert self.done.wait(timeout), f"the cell is still running; outputs: {self.outputs}"
        assert self.reply is not None
        return self.reply

    def next_output(self, kind: str, timeout: float) -> dict[str, Any]:
        """The next output of ``kind`` (those of other kinds seen meanwhile are skipped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                output = self._new.get(timeout=0.25)
            except queue.Empty:
                if self.done.is_set():
                    break
                continue
            if output["output_type"] == kind:
                return output
        raise AssertionError(f"no {kind} output came; outputs: {self.outputs}")

    def text(self, name: str = "stdout") -> str:
        return "".join(o["text"] for o in self.outputs
                       if o["output_type"] == "stream" and o["name"] == name)


@contextlib.contextmanager
def kernel(cwd: str, env: dict[str, str] | None = None) -> Iterator[Any]:
    """A fresh python3 kernel (this interpreter's ipykernel) in ``cwd``, shut down after;
    ``env``: variables to add to its environment."""
    import os

    from jupyter_client.manager import start_new_kernel

    extra = {} if env is None else {"env": {**os.environ, **env}}
    manager, client = start_new_kernel(kernel_name="python3", cwd=cwd, startup_timeout=120,
                                       **extra)
    client.interrupt = manager.interrupt_kernel  # as the front end's stop button does
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def run_cell(client: Any, code: str, timeout: float = 120.0) -> Cell:
    """Run a cell to its end; AssertionError with its traceback if it raised."""
    cell = Cell(client, code)
    reply = cell.wait(timeout)
    assert reply["status"] == "ok", f"{reply.get('ename')}: {reply.get('evalue')}\n{cell.outputs}"
    return cell
