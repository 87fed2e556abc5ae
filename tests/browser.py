"""A real headless Chromium for the served-UI tests (Debian's ``chromium`` + ``chromium-driver``).

No skip when it is missing: the tests that use it fail, saying what to install (``.ci/run``
installs both). The page's xterm.js draws on a canvas, so the screen's text is read from the
terminal's own buffer: a script run before the page's own catches the ``Terminal`` object as
xterm builds it (its public class is the one with ``loadAddon``).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")

CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, "_core", {
  configurable: true,
  set(value) {
    Object.defineProperty(this, "_core", {value, writable: true, configurable: true,
                                          enumerable: true});
    if (typeof this.loadAddon === "function") { window.__backstepTerminal = this; }
  },
});
"""

SCREEN = """
const term = window.__backstepTerminal;
if (!term) { return null; }
const buffer = term.buffer.active, lines = [];
for (let y = 0; y < term.rows; y++) {
  const line = buffer.getLine(buffer.viewportY + y);
  lines.push(line ? line.translateToString(true) : "");
}
return lines.join("\\n");
"""


def find_chromium() -> tuple[str, str]:
    """The browser and its driver; AssertionError (a failure, not a skip) when absent."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    assert browser and driver, (
        "the served-UI tests need Chromium and its driver: apt-get install -y chromium "
        "chromium-driver (.ci/run does it)")
    return browser, driver


@contextlib.contextmanager
def chromium(width: int = 1280, height: int = 860) -> Iterator[Any]:
    """A selenium driver for a fresh headless Chromium, quit afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = find_chromium()
    profile = tempfile.mkdtemp(prefix="backstep-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                               {"source": CATCH_TERMINAL})
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screen_text(driver: Any) -> str | None:
    """The text on the served terminal's screen (None before the terminal exists)."""
    return driver.execute_script(SCREEN)


def wait_for(driver: Any, found: Callable[[str], bool], timeout: float = 60.0,
             frame: Any = None) -> str:
    """Poll the screen until ``found(text)``; AssertionError with the last screen otherwise."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = screen_text(driver) or ""
        if found(text):
            return text
        time.sleep(0.25)
    raise AssertionError(f"the served screen never showed what was awaited; it shows:\n{text}")


def press(driver: Any, keys: str) -> None:
    """Type into the terminal (xterm's hidden textarea has the focus)."""
    from selenium.webdriver.common.by import By

    area = driver.find_element(By.CSS_SELECTOR, ".xterm-helper-textarea")
    area.send_keys(keys)


def step_of(screen: str) -> int:
    """The step the UI's status bar says it is at (0 when it says none)."""
    match = re.search(r"step (\d+) of \d+", screen)
    return int(match.group(1)) if match else 0
