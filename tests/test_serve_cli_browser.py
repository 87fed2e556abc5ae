"""``backstep show TRACE --serve`` and ``backstep run --serve SCRIPT`` in a real headless
Chromium: the page shows the UI, keys step it, and ``run --serve`` leaves the script's output
and exit status exactly as plain python gives them."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.browser import chromium, press, step_of, wait_for

pytestmark = pytest.mark.timeout(300)

TRACE = str(Path(__file__).parent / "fixtures" / "small_trace.jsonl")
URL = re.compile(rb"is served at (http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]{32}/)")

SCRIPT = """
import torch
torch.manual_seed(0)
w = torch.randn(3, 4, requires_grad=True)
x = torch.randn(5, 3)
print("script says hi", flush=True)
(x @ w).tanh().pow(2).sum().backward()
print("grad", w.grad.flatten().tolist())
raise SystemExit(3)
"""


def served_url(process: subprocess.Popen[bytes], timeout: float = 60.0) -> str:
    """The URL the command prints on stderr."""
    assert process.stderr is not None
    deadline, seen = time.monotonic() + timeout, b""
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        seen += line
        match = URL.search(line)
        if match:
            return match.group(1).decode()
        if not line and process.poll() is not None:
            break
    raise AssertionError(f"no URL on stderr: {seen!r}")


def ctrl_c_as_on_a_terminal() -> None:
    """In the child, before exec: SIGINT back to its default. A shell's background job (CI
    runs the tests as one) starts with SIGINT ignored, every child inherits that, and Python
    then keeps ignoring it, as it should: ctrl-c would never reach the command."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def drain(process: subprocess.Popen[bytes]) -> list[bytes]:
    """Read the rest of the command's stderr from now on (a full pipe would block the server
    behind it); the list fills as it comes, for a failure's message."""
    assert process.stderr is not None
    stream, lines = process.stderr, []
    threading.Thread(target=lambda: lines.extend(iter(stream.readline, b"")),
                     daemon=True).start()
    return lines


def ended(driver: object, timeout: float) -> bool:
    """Whether the page shows "Session ended" within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if driver.execute_script(  # type: ignore[attr-defined]
                "return document.body.classList.contains('-closed')"):
            return True
        time.sleep(0.25)
    return False


def test_show_serve_steps_a_trace_in_the_browser() -> None:
    process = subprocess.Popen([sys.executable, "-m", "backstep", "show", TRACE, "--serve"],
                               stderr=subprocess.PIPE, preexec_fn=ctrl_c_as_on_a_terminal)
    try:
        url = served_url(process)
        said = drain(process)
        with chromium() as driver:
            driver.get(url)
            screen = wait_for(driver, lambda s: "Graph · pass 1" in s and step_of(s) == 1)
            assert "SumBackward0" in screen and "AccumulateGrad lin.weight" in screen
            press(driver, "n")
            wait_for(driver, lambda s: step_of(s) == 2, 30)
        process.send_signal(signal.SIGINT)  # ctrl-c ends the server
        try:
            code = process.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"ctrl-c did not end it; stderr: {b''.join(said)!r}") from None
        assert code == 0, b"".join(said)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_show_serve_takes_keys_without_a_click_first() -> None:
    """Issue 44: in the browser, keys worked only after a click on the terminal."""
    from selenium.webdriver.common.action_chains import ActionChains

    process = subprocess.Popen([sys.executable, "-m", "backstep", "show", TRACE, "--serve"],
                               stderr=subprocess.PIPE, preexec_fn=ctrl_c_as_on_a_terminal)
    try:
        url = served_url(process)
        drain(process)
        with chromium() as driver:
            driver.get(url)
            wait_for(driver, lambda s: "Graph · pass 1" in s and step_of(s) == 1)
            assert driver.execute_script(
                "return document.activeElement.classList.contains('xterm-helper-textarea')")
            ActionChains(driver).send_keys("n").perform()  # to whatever has the focus
            wait_for(driver, lambda s: step_of(s) == 2, 30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_run_serve_steps_a_script_and_changes_nothing(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120)
    assert plain.returncode == 3 and b"grad" in plain.stdout
    process = subprocess.Popen([sys.executable, "-m", "backstep", "run", "--serve",
                                "--break", "TanhBackward0", str(script)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = served_url(process)
        drain(process)
        with chromium() as driver:
            driver.get(url)
            screen = wait_for(driver, lambda s: "SumBackward0" in s and step_of(s) == 1)
            assert "TanhBackward0" in screen and "script says hi" in screen  # console copy
            first = driver.current_window_handle
            driver.switch_to.new_window("tab")  # one view at a time: a second page ends
            driver.get(url)
            assert ended(driver, 60)
            driver.close()
            driver.switch_to.window(first)
            press(driver, "c")  # to the breakpoint given on the command line
            wait_for(driver, lambda s: step_of(s) == 3 and "before TanhBackward0" in s, 30)
            press(driver, "n")
            wait_for(driver, lambda s: step_of(s) == 4, 30)
            press(driver, "c")  # to the end of the pass: the script ends, the page stays
            wait_for(driver, lambda s: "script exited with code 3" in s, 60)
            time.sleep(1)
            assert process.poll() is None and not ended(driver, 0)
            press(driver, "q")
            assert process.wait(60) == 3
        assert process.stdout is not None
        assert process.stdout.read() == plain.stdout  # same prints, same gradient digits
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
