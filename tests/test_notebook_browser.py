"""``backstep.attach()`` in a real Jupyter kernel, stepped from a real headless Chromium.

The kernel (jupyter_client + ipykernel) runs a cell that attaches and calls ``backward()``; the
cell's output (a frame and a link) goes into a page standing in for the notebook, Chromium
opens it, the served UI shows the graph, ``n`` steps three times and ``q`` detaches; the cell
then finishes with the very gradients a plain run computes. No browser: these tests fail.
"""

from __future__ import annotations

import contextlib
import html
import http.server
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import backstep
from tests.browser import chromium, press, step_of, wait_for
from tests.kernel import Cell, kernel, run_cell
from tests.notebook_cells import ATTACHED, SAME, SETUP, gone

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = os.environ.get("BACKSTEP_SCREENSHOT")  # where to keep the README's picture

WITH_BLOCK = """with backstep.attached():
    loss_fn().backward()
print("block done")"""

MAGIC = """%%backstep --break TanhBackward0 --no-stop-at-start
loss_fn().backward()
print("magic done")"""



@contextlib.contextmanager
def notebook_page(code: str, output_html: str) -> Iterator[str]:
    """A page laid out like a notebook cell (its code, then its output as the kernel sent it),
    served from 127.0.0.1 as Jupyter serves a notebook; its URL."""
    page = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>notebook</title><style>"
        "body{font-family:sans-serif;margin:16px 24px;background:#fff}"
        "pre{background:#f5f5f5;border:1px solid #e0e0e0;padding:8px;margin:0 0 8px 0;"
        "font-size:13px}.prompt{color:#307fc1;font-family:monospace;font-size:13px}"
        "</style></head><body><div class='prompt'>[*]:</div>"
        f"<pre>{html.escape(code)}</pre><div class='output'>{output_html}</div></body></html>"
    ).encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/notebook.html"
    finally:
        server.shutdown()
        server.server_close()


def test_attach_in_a_notebook_steps_in_the_browser(tmp_path: Path) -> None:
    with kernel(str(tmp_path)) as client, chromium(1100, 1000) as driver:
        run_cell(client, SETUP)
        cell = Cell(client, ATTACHED)
        shown = cell.next_output("display_data", 120)
        frame_html = shown["data"]["text/html"]
        url = shown["metadata"]["backstep"]["url"]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]{32}/", url), url
        assert "<iframe" in frame_html and f'href="{url}"' in frame_html
        assert url in shown["data"]["text/plain"]  # for front ends that show no HTML
        with notebook_page(ATTACHED, frame_html) as page:
            driver.get(page)
        driver.switch_to.frame(driver.find_element("css selector", "iframe"))
        screen = wait_for(driver, lambda s: "Graph" in s and "MeanBackward0" in s, 90)
        # the graph panel lists the pass's nodes; the cell's print reached the console panel
        for node in ("MeanBackward0", "PowBackward0", "AddmmBackward0", "TanhBackward0",
                     "AccumulateGrad"):
            assert node in screen, screen
        assert "hello from the cell" in screen
        assert not cell.done.is_set()  # paused: the cell is busy
        for expected in (2, 3, 4):
            press(driver, "n")
            screen = wait_for(driver, lambda s, e=expected: step_of(s) == e, 30)
        if SCREENSHOT:
            driver.switch_to.default_content()
            driver.save_screenshot(SCREENSHOT)
            driver.switch_to.frame(driver.find_element("css selector", "iframe"))
        assert not cell.done.is_set()
        press(driver, "q")
        reply = cell.wait(60)
        assert reply["status"] == "ok", cell.outputs
        assert cell.text().endswith("after backward\n"), cell.outputs
        assert "hello from the cell" in cell.text()  # in the cell as without backstep
        assert run_cell(client, SAME).text() == "True\n"
        assert gone(url, 30)  # q detached for good: the page's server has ended
        # detached: a later pass runs to its end untouched, and the gradients still agree
        run_cell(client, "model.zero_grad(set_to_none=True); loss_fn().backward()")
        assert run_cell(client, SAME).text() == "True\n"
        # `with attached()`: c runs the pass to its end, the block's end detaches
        run_cell(client, "model.zero_grad(set_to_none=True)")
        cell = Cell(client, WITH_BLOCK)
        shown = cell.next_output("display_data", 120)
        driver.switch_to.default_content()
        driver.get(shown["metadata"]["backstep"]["url"])
        wait_for(driver, lambda s: "MeanBackward0" in s and step_of(s) == 1, 90)
        press(driver, "c")
        assert cell.wait(60)["status"] == "ok", cell.outputs
        assert cell.text() == "block done\n"
        # the cell did not wait for the page: it stays on the pass's last state, to review
        url = shown["metadata"]["backstep"]["url"]
        assert not gone(url, 1)
        press(driver, "p")
        wait_for(driver, lambda s: s.splitlines()[-1].lstrip().startswith("review"), 30)
        press(driver, "q")  # and q ends it, its server with it
        assert gone(url, 30)
        assert run_cell(client, SAME).text() == "True\n"
        # the cell magic, with a breakpoint: c stops there, c again ends the pass and the cell
        run_cell(client, "%load_ext backstep\nmodel.zero_grad(set_to_none=True)")
        cell = Cell(client, MAGIC)
        shown = cell.next_output("display_data", 120)
        assert "backstep: %%backstep in the frame above" in shown["data"]["text/html"]
        assert "interrupt the kernel" in shown["data"]["text/html"]  # a frame left blank
        driver.get(shown["metadata"]["backstep"]["url"])
        wait_for(driver, lambda s: "before TanhBackward0" in s, 90)
        press(driver, "c")
        assert cell.wait(60)["status"] == "ok", cell.outputs
        assert cell.text() == "magic done\n"
        assert run_cell(client, SAME).text() == "True\n"


def test_a_demo_runs_in_a_notebook_cell(tmp_path: Path) -> None:
    with kernel(str(tmp_path)) as client, chromium(1100, 900) as driver:
        cell = Cell(client, 'import backstep\nbackstep.demo("graph_basics")')
        shown = cell.next_output("display_data", 120)
        assert "<iframe" in shown["data"]["text/html"]
        driver.get(shown["metadata"]["backstep"]["url"])
        screen = wait_for(driver, lambda s: "PowBackward0" in s and step_of(s) == 1, 90)
        assert "seed gradient" in screen  # the narration of the first stop
        assert not cell.done.is_set()
        press(driver, "q")
        reply = cell.wait(60)
        assert reply["status"] == "ok", cell.outputs
        results = [o for o in cell.outputs if o["output_type"] == "execute_result"]
        assert results and results[0]["data"]["text/plain"] == "0"


def test_an_unknown_demo_says_which_exist() -> None:
    with pytest.raises(ValueError, match="graph_basics"):
        backstep.demo("no_such_demo")


def test_interrupting_a_wait_for_the_page_gives_up_cleanly(tmp_path: Path) -> None:
    """No browser ever opens the frame: an interrupt ends the wait, and nothing stays armed."""
    with kernel(str(tmp_path)) as client:
        run_cell(client, SETUP)
        cell = Cell(client, ATTACHED)
        url = cell.next_output("display_data", 120)["metadata"]["backstep"]["url"]
        assert not gone(url, 1)  # served, waiting
        client.interrupt()
        cell.wait(60)
        errors = [o["ename"] for o in cell.outputs if o["output_type"] == "error"]
        assert errors == ["KeyboardInterrupt"], cell.outputs
        assert "hello from the cell" not in cell.text()
        assert gone(url, 30)
        run_cell(client, "model.zero_grad(set_to_none=True); loss_fn().backward()")
        assert run_cell(client, SAME).text() == "True\n"
        assert run_cell(client, "import sys; print(type(sys.stdout).__name__)").text() \
            == "OutStream\n"  # ipykernel's own stream, not backstep's copy
        run_cell(client, "%load_ext backstep")
        cell = Cell(client, "%%backstep --bogus\nprint('ran')")
        cell.wait(60)
        errors = [(o["ename"], o["evalue"]) for o in cell.outputs if o["output_type"] == "error"]
        assert errors and errors[0][0] == "ValueError" and "--bogus" in errors[0][1]
        assert "ran" not in cell.text()
