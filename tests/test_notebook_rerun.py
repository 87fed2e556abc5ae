"""A notebook used as notebooks are: cells run again, cells that attach after another did,
the kernel interrupted at a stop, and a kernel whose Python lacks textual-serve (issue 50).

Real kernel (jupyter_client + ipykernel) and, where the frame matters, a real headless
Chromium opening the frame's URL as the notebook would.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.browser import chromium, press, step_of, wait_for
from tests.kernel import Cell, kernel, run_cell
from tests.notebook_cells import ATTACHED, SAME, SETUP, gone

pytestmark = pytest.mark.timeout(300)


def wait_until(found: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not found():
        assert time.monotonic() < deadline, "never came"
        time.sleep(0.25)


def frame_url(cell: Cell) -> str:
    """The URL of the frame the cell shows (its first display)."""
    return cell.next_output("display_data", 120)["metadata"]["backstep"]["url"]


def open_at_first_stop(driver: object, url: str) -> str:
    driver.get(url)  # type: ignore[attr-defined]
    return wait_for(driver, lambda s: "MeanBackward0" in s and step_of(s) == 1, 90)


@pytest.mark.xfail(reason="flaky, about 1 run in 5 on this 2-core machine: after q in the frame of "
                   "a re-run cell, the cell sometimes never ends or ends in TypeError "
                   "('ServedAttachment' object is not callable); cause not found yet (issue 50)",
                   strict=False)
def test_attach_from_another_cell_or_the_same_cell_run_again_shows_its_own_frame(
        tmp_path: Path) -> None:
    with kernel(str(tmp_path)) as client, chromium(1100, 900) as driver:
        run_cell(client, SETUP)
        first = Cell(client, ATTACHED)
        url = frame_url(first)
        open_at_first_stop(driver, url)
        press(driver, "f")  # the pass runs to its end: the cell ends, the UI stays up
        assert first.wait(60)["status"] == "ok", first.outputs
        assert not gone(url, 1)
        # another cell attaches again: its own frame, the stop in it, the old page ended
        run_cell(client, "model.zero_grad(set_to_none=True)")
        second = Cell(client, ATTACHED)
        moved = frame_url(second)
        assert moved != url
        assert gone(url, 30)
        open_at_first_stop(driver, moved)
        assert not second.done.is_set()
        press(driver, "f")
        assert second.wait(60)["status"] == "ok", second.outputs
        assert run_cell(client, SAME).text() == "True\n"
        # that cell run again: Jupyter clears its output (the frame goes), the cell attaches
        # anew and its pass stops in the new frame
        driver.get("about:blank")
        run_cell(client, "model.zero_grad(set_to_none=True)")
        again = Cell(client, ATTACHED)
        rerun = frame_url(again)
        assert rerun not in (url, moved)
        open_at_first_stop(driver, rerun)
        assert not again.done.is_set()
        press(driver, "q")
        assert again.wait(60)["status"] == "ok", again.outputs
        assert run_cell(client, SAME).text() == "True\n"
        # q detached for good: "Reconnect" says there is nothing left, not "refused to connect"
        assert gone(rerun, 30)
        button = driver.find_element("css selector", ".closed-dialog button")
        wait_until(lambda: button.is_displayed(), 30)
        button.click()
        message = driver.find_element("css selector", ".closed-dialog .message")
        wait_until(lambda: "nothing to reconnect to" in message.text, 30)
        assert driver.current_url == rerun  # no reload onto a refused connection


def test_interrupting_the_kernel_at_a_stop_ends_it_in_one_line_and_detaches(
        tmp_path: Path) -> None:
    with kernel(str(tmp_path)) as client, chromium(1100, 900) as driver:
        run_cell(client, SETUP)
        cell = Cell(client, ATTACHED)
        url = frame_url(cell)
        open_at_first_stop(driver, url)
        press(driver, "n")
        wait_for(driver, lambda s: step_of(s) == 2, 30)
        client.interrupt()
        reply = cell.wait(60)
        errors = [o for o in cell.outputs if o["output_type"] == "error"]
        assert [e["ename"] for e in errors] == ["KeyboardInterrupt"], (reply, cell.outputs)
        (shown,) = errors[0]["traceback"]  # one line: the user's frame, none of ours
        assert shown.startswith("KeyboardInterrupt at In [") and "loss.backward()" in shown, shown
        assert "detached" in shown and "backstep/" not in shown and "torch/" not in shown
        assert "after backward" not in cell.text()
        assert gone(url, 30)  # detached: the server has ended
        # nothing stays armed: a later pass runs to its end untouched, gradients as plain
        run_cell(client, "model.zero_grad(set_to_none=True); loss_fn().backward()")
        assert run_cell(client, SAME).text() == "True\n"
        # any other interrupt shows as IPython shows it (no handler of ours is left)
        cell = Cell(client, "import time\nfor _ in range(600): time.sleep(0.1)")
        time.sleep(2)
        client.interrupt()
        cell.wait(60)
        errors = [o for o in cell.outputs if o["output_type"] == "error"]
        assert [e["ename"] for e in errors] == ["KeyboardInterrupt"], cell.outputs
        assert len(errors[0]["traceback"]) > 1
        # and a new attach() serves a new frame that stops as before
        run_cell(client, "model.zero_grad(set_to_none=True)")
        cell = Cell(client, ATTACHED)
        open_at_first_stop(driver, frame_url(cell))
        press(driver, "q")
        assert cell.wait(60)["status"] == "ok", cell.outputs


def test_without_textual_serve_the_cell_says_what_to_install_in_one_line(
        tmp_path: Path) -> None:
    hide = tmp_path / "hide" / "aiohttp_jinja2"
    hide.mkdir(parents=True)
    (hide / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'aiohttp_jinja2'\", name='aiohttp_jinja2')\n")
    with kernel(str(tmp_path), {"PYTHONPATH": str(hide.parent)}) as client:
        run_cell(client, SETUP)
        cell = run_cell(client, ATTACHED)
        assert cell.text() == "hello from the cell\nafter backward\n"
        said = cell.text("stderr")
        assert said.count("\n") == 1, said
        assert said.startswith("backstep: could not attach: textual-serve"), said
        assert f"({sys.executable})" in said and "%pip install 'backstep[serve]'" in said
        assert "Traceback" not in said and not [o for o in cell.outputs
                                                if o["output_type"] == "display_data"]
        assert run_cell(client, SAME).text() == "True\n"
        cell = run_cell(client, 'backstep.demo("graph_basics")')
        said = cell.text("stderr")
        assert said.count("\n") == 1 and "%pip install 'backstep[serve]'" in said, said
        results = [o for o in cell.outputs if o["output_type"] == "execute_result"]
        assert results and results[0]["data"]["text/plain"] == "2"


BEFORE = """loss = loss_fn()
import backstep
backstep.attach()
loss.backward()"""


def test_sources_name_the_cell_and_a_graph_built_before_attach_says_why_it_has_none(
        tmp_path: Path) -> None:
    with kernel(str(tmp_path)) as client, chromium(1100, 900) as driver:
        run_cell(client, SETUP)  # In [1]: loss_fn's line is its line 6
        cell = Cell(client, BEFORE)
        screen = open_at_first_stop(driver, frame_url(cell))
        panel = " ".join(row.split("││")[-1].strip("│ ") for row in screen.splitlines())
        assert ("no source recorded: this graph was built before backstep attached" in
                " ".join(panel.split())), screen
        assert "%%backstep" in screen
        press(driver, "q")
        assert cell.wait(60)["status"] == "ok", cell.outputs
        # attached before the forward: sources, and a cell's code goes by the cell's name
        run_cell(client, "model.zero_grad(set_to_none=True)")
        cell = Cell(client, ATTACHED)
        screen = open_at_first_stop(driver, frame_url(cell))
        assert "Source · In [1]:6" in screen and "return (model(x) ** 2).mean()" in screen
        # and the module paths stay (the graph's rows may be drawn a frame after the stop)
        screen = wait_for(driver, lambda s: "TanhBackward0 #5 model.1 :6" in s, 30)
        assert "built before" not in screen and ".py:6" not in screen
        press(driver, "q")
        assert cell.wait(60)["status"] == "ok", cell.outputs
