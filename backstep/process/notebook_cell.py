"""Where a served UI shows in a Jupyter notebook: in a cell, or on stderr outside one.

In a kernel, ``attach()`` serves the UI to the browser (``process.attach_served``) and the cell
shows it here: a frame sized for a notebook's output area and one line with a link to open it
in a tab of its own. The frame's address is the one the browser reaches: 127.0.0.1 by default;
under JupyterHub (JUPYTERHUB_SERVICE_PREFIX set) the server's ``proxy/PORT/`` path, which
jupyter-server-proxy forwards to the port; BACKSTEP_SERVE_URL (``{port}`` stands for the port)
for anything else, such as an SSH tunnel's far end. Outside a notebook the same lines are
printed. Nothing here imports torch, textual or IPython until it is used in a kernel.
"""

from __future__ import annotations

import html
import os
import sys
from typing import Any

ENV_URL = "BACKSTEP_SERVE_URL"  # the browser's base URL for the server, "{port}" for its port
FRAME_HEIGHT = 600  # pixels: about 36 rows at the page's font size
FONT_SIZE = 13
KEY = "(the URL is the key to this process: share it with no one)"
COLAB = ("in Colab the browser cannot reach this kernel's ports, so the UI cannot be served "
         "here: record with backstep.attach(trace='run.jsonl') and open the file with "
         "`backstep show run.jsonl` on your machine")
ONE_VIEW = ("(if the frame stays blank, or interrupt the kernel to give up; one view at a "
            "time)")


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel with no terminal of its own."""
    if "ipykernel" not in sys.modules or (os.isatty(0) and os.isatty(1)):
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def current_cell() -> int | None:
    """The execution count of the cell running now (a cell run again gets a new one); None
    outside a kernel."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return None if shell is None else getattr(shell, "execution_count", None)


def cell_name(filename: str) -> str | None:
    """``In [3]`` for the code of a cell (IPython compiles it under a hashed file name), None
    for any other file."""
    try:
        from IPython import get_ipython

        named = get_ipython().compile.format_code_name(filename)
    except Exception:  # noqa: BLE001 - no kernel, an IPython without it: no name
        return None
    if not named:
        return None
    label = str(named[1])
    number = label[3:-1] if label.startswith("In[") and label.endswith("]") else None
    return f"In [{number}]" if number is not None and number.isdigit() else label


def in_colab() -> bool:
    """Whether this kernel is Colab's, whose browser cannot reach the kernel's ports."""
    return "google.colab" in sys.modules


def browser_url(port: int, path: str) -> str:
    """The page's URL as the notebook's browser reaches it (``path`` carries the token)."""
    base = os.environ.get(ENV_URL)
    if not base and os.environ.get("JUPYTERHUB_SERVICE_PREFIX"):
        base = os.environ["JUPYTERHUB_SERVICE_PREFIX"].rstrip("/") + "/proxy/{port}/"
    if not base:
        return f"http://127.0.0.1:{port}{path}"
    return base.replace("{port}", str(port)).rstrip("/") + path


def show(served: Any, what: str, notebook: bool, one_view: bool = True) -> None:
    """Show the served page: a frame and a link in a notebook cell, a line on stderr else.
    ``one_view``: one browser view at a time drives the script (the others are refused)."""
    url = browser_url(served.port, served.path) if notebook else served.url
    line = f"backstep: {what} is served at {url} {KEY}"
    exposed = served.exposure()
    if not notebook:
        for text in (line, exposed):
            if text:
                print(text, file=sys.stderr, flush=True)
        return
    from IPython.display import display

    frame = f"{url}?fontsize={FONT_SIZE}"
    link = html.escape(url, quote=True)
    page = (
        f'<iframe src="{html.escape(frame, quote=True)}" width="100%" height="{FRAME_HEIGHT}" '
        'style="border: 0" title="backstep"></iframe>'
        f'<div>backstep: {html.escape(what)} in the frame above, or '
        f'<a href="{link}" target="_blank" rel="noopener">in a tab of its own</a> '
        f'{ONE_VIEW if one_view else ""}</div>'
        f'{"<div>" + html.escape(exposed) + "</div>" if exposed else ""}')
    # a front end that shows no HTML (jupyter console, a text export) shows the line
    display({"text/html": page, "text/plain": "\n".join(filter(None, (line, exposed)))},
            raw=True, metadata={"backstep": {"url": url}})
